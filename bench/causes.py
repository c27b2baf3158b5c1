"""Judging the causes an RCA names against a simulated scenario's ground truth, shared by
bench/variations.sh (the RCA on fleets told in other conventions) and bench/watch.sh (the
watcher's verdicts): attribute names are read through `infersight mapping`, a ground-truth
cause may be named as itself or as one of the equivalents it lists, and a named slice that
selects the same stored requests (Jaccard >= 0.95) names it too."""
import json
import re
import subprocess

# columns of the `requests` table a dimension may be stored in (else only in `attrs`)
REQUEST_COLUMNS = {"lora_adapters", "tenant", "service", "runtime", "worker", "device", "model",
                   "model_version", "kv_cache_policy"}


VERSION_SEGMENTS = {"version", "ver", "v", "build", "revision", "rev", "release"}
NOT_DEPLOYED_SEGMENTS = {"protocol", "sdk", "telemetry", "schema", "api", "tls", "http", "flavor"}


def names_a_deployed_version(name):
    """`infersight_model::mapping::names_a_deployed_version` for a canonical dimension name."""
    if name == "model_version":
        return True
    segments = re.split(r"[_./-]", name.lower())
    last = re.split(r"[_.-]", name.lower())[-1]
    return ((last in VERSION_SEGMENTS or name.lower().endswith("version"))
            and last not in ("release", "v")
            and not any(s in NOT_DEPLOYED_SEGMENTS for s in segments[:-1]))


class Judge:
    def __init__(self, binary, mapping_path=None):
        """`mapping_path`: the output of `infersight mapping` (None: names as they are)."""
        self.binary = binary
        self.mapped = {} if mapping_path is None else dict(re.findall(
            r"^\| `([^`]+)` \| `([a-z_0-9]+)` \|", open(mapping_path).read(), re.M))

    def canonical(self, dims):
        """`dims` with every attribute name the mapping knows under its canonical name."""
        return {self.mapped.get(k, k): v for k, v in (dims or {}).items()}

    def alternatives(self, cause):
        """The cause and the combinations the ground truth lists as selecting the same requests."""
        return [self.canonical(d) for d in [cause["dimensions"], *cause.get("equivalent", [])]]

    def selection(self, dims):
        """The SQL condition selecting the requests of `dims` (canonical keys), as variations.rs."""
        conditions = []
        for key, value in dims.items():
            key, value = key.replace("'", "''"), value.replace("'", "''")
            attribute = f"json_get(attrs, '{key}') = '{value}'"
            if key in REQUEST_COLUMNS or key in self.mapped.values():
                conditions.append(f'("{key}" = \'{value}\' OR {attribute})')
            else:
                conditions.append(attribute)
        return " AND ".join(conditions)

    def same_requests(self, data, a, b):
        """Whether `a` and `b` select the same stored requests of the store `data`; a query
        that fails (a key no column or attribute holds) says they do not."""
        sa, sb = self.selection(a), self.selection(b)
        sql = (f"SELECT SUM(CASE WHEN ({sa}) AND ({sb}) THEN 1 ELSE 0 END) AS both_, "
               f"SUM(CASE WHEN {sa} THEN 1 ELSE 0 END) AS a_, "
               f"SUM(CASE WHEN {sb} THEN 1 ELSE 0 END) AS b_ FROM requests")
        run = subprocess.run([self.binary, "query", "--data", data, "--format", "json", sql],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(f"    (same-requests query failed: {run.stderr.strip()[:200]})")
            return False
        both, ca, cb = (json.loads(run.stdout)[0].get(k) or 0 for k in ("both_", "a_", "b_"))
        return both > 0 and both / (ca + cb - both) >= 0.95

    # signal kinds read off a cause by what its names say (crates/infersight/tests/it/variations.rs)
    NAMED_KINDS = ("version_regression", "slow_worker")

    def names_the_kind(self, kind, cause):
        """Whether `cause` (canonical keys) carries the name `kind` is read off: a deployed
        version (as `mapping::names_a_deployed_version`), or one worker alone."""
        if kind == "version_regression":
            return any(names_a_deployed_version(k) for k in cause)
        return list(cause) == ["worker"]

    def kinds_missing(self, data, expected_signals, causes, signals):
        """The expected signals of NAMED_KINDS that no signal of the same kind names (the same
        canonical subject, or one selecting the same requests) while a named cause for that
        subject carries the kind's name, as "kind on subject"."""
        named = [self.canonical(c["dimensions"]) for c in causes or []]
        same = lambda a, b: a == b or self.same_requests(data, a, b)
        missing = []
        for want in expected_signals or []:
            kind = want["kind"]
            if kind not in self.NAMED_KINDS:
                continue
            subject = self.canonical(want["subject"])
            if not any(self.names_the_kind(kind, c) and same(c, subject) for c in named):
                continue
            got = [self.canonical(s["subject"]) for s in signals or [] if s["kind"] == kind]
            if not any(same(g, subject) for g in got):
                missing.append(f'{kind} on {want["subject"]}')
        return missing

    def right(self, data, truth_causes, named):
        """Whether the first causes `named` (as many as the truth has) hold every ground-truth
        cause; with none in the truth, whether nothing is named."""
        got = [self.canonical(c["dimensions"]) for c in named or []]
        if not truth_causes:
            return not got
        top = got[: len(truth_causes)]
        return all(
            any(a in top for a in self.alternatives(c))
            or any(self.same_requests(data, self.alternatives(c)[0], t) for t in top)
            for c in truth_causes)
