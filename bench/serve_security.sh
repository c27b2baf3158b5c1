#!/usr/bin/env bash
# What safety costs on the serve path (issue 22's figures): `infersight serve` on 127.0.0.1 with
# explicit ports and a fresh data directory each time, loaded by `infersight bench-gen otlp-load`
# (EXPORTERS concurrent exporters, gRPC and HTTP/protobuf alternating, 512 simulated spans per
# export, closed loop) for DURATION, in four setups:
#   plain     no authentication, no TLS (today's default)
#   auth      [auth] tokens_file on: every export carries an ingest token bound to one org, the
#             token checked (SHA-256, constant time) and the org stamped on every row
#   tls       [server.tls] on: gRPC over TLS (ALPN h2) and OTLP/HTTP over https
#   auth_tls  both
# ROUNDS rounds, the setups in turn within each round (so drift hits all alike); per setup the
# median acknowledged spans/s and its ratio to `plain`, and a check that `spans` holds every
# acknowledged span. FSYNC (default interval: the WAL fsynced every 200 ms, so the CPU the
# receivers spend decides the rate and TLS or token costs show; `always` puts the disk first).
# Usage: bench/serve_security.sh   (builds nothing)
#   BIN=target/release/infersight  DURATION=20s  EXPORTERS=16  ROUNDS=3  FSYNC=interval
#   POOL=100000  OUT=bench/out/security  PORTS="25317 25318 25070" (gRPC, HTTP, API)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/infersight}
OUT=${OUT:-bench/out/security}
DURATION=${DURATION:-20s}
EXPORTERS=${EXPORTERS:-16}
ROUNDS=${ROUNDS:-3}
FSYNC=${FSYNC:-interval}
POOL=${POOL:-100000}
read -r GRPC_PORT HTTP_PORT API_PORT <<< "${PORTS:-25317 25318 25070}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SERVE_PID=

stop_serve() {
  if [ -n "$SERVE_PID" ]; then
    kill -TERM "$SERVE_PID" 2>/dev/null || true
    wait "$SERVE_PID" 2>/dev/null || true
    SERVE_PID=
  fi
}
trap stop_serve EXIT

# a private CA and a certificate for 127.0.0.1 (openssl), and an ingest token bound to org "bench"
PKI="$OUT/pki"
if [ ! -f "$PKI/server.pem" ]; then
  mkdir -p "$PKI"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=infersight bench CA" -keyout "$PKI/ca.key" -out "$PKI/ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$PKI/server.key" -out "$PKI/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$PKI/ext.cnf"
  openssl x509 -req -in "$PKI/server.csr" -CA "$PKI/ca.pem" -CAkey "$PKI/ca.key" \
    -CAcreateserial -days 2 -extfile "$PKI/ext.cnf" -out "$PKI/server.pem" 2>/dev/null
fi
TOKENS="$OUT/tokens.json"
rm -f "$TOKENS"
printf '[auth]\ntokens_file = "%s"\n' "$TOKENS" > "$OUT/tokens.toml"
TOKEN=$("$BIN" tokens create --config "$OUT/tokens.toml" --name bench --role ingest --tenant bench)

config() { # setup -> the TOML of that setup
  printf '[store]\nfsync = "%s"\n' "$FSYNC"
  case $1 in auth|auth_tls) printf '[auth]\ntokens_file = "%s"\n' "$TOKENS";; esac
  case $1 in tls|auth_tls)
    printf '[server.tls]\ncert_file = "%s"\nkey_file = "%s"\n' "$PKI/server.pem" "$PKI/server.key";;
  esac
}

run() { # setup round
  local setup=$1 round=$2 label="$1-$2" data="$OUT/data-$1-$2" scheme=http
  local flags=()
  rm -rf "$data"
  config "$setup" > "$OUT/$setup.toml"
  case $setup in tls|auth_tls) scheme=https; flags+=(--ca-file "$PKI/ca.pem");; esac
  case $setup in auth|auth_tls) flags+=(--token "$TOKEN");; esac
  INFERSIGHT_LOG=warn "$BIN" serve --config "$OUT/$setup.toml" --data "$data" \
    --otlp-grpc-port "$GRPC_PORT" --otlp-http-port "$HTTP_PORT" --api-port "$API_PORT" \
    > "$OUT/$label.serve.out" 2> "$OUT/$label.serve.err" &
  SERVE_PID=$!
  for _ in $(seq 1 300); do
    grep -q "listening otlp_grpc=" "$OUT/$label.serve.err" 2>/dev/null && break
    kill -0 "$SERVE_PID" 2>/dev/null || { echo "serve did not start:"; cat "$OUT/$label.serve.err"; exit 1; }
    sleep 0.2
  done
  "$BIN" bench-gen otlp-load --grpc "$scheme://127.0.0.1:$GRPC_PORT" \
    --http "$scheme://127.0.0.1:$HTTP_PORT" --exporters "$EXPORTERS" --pool-spans "$POOL" \
    --duration "$DURATION" --progress-every 0s "${flags[@]}" \
    > "$OUT/$label.json" 2> "$OUT/$label.gen.err"
  stop_serve
  # every acknowledged span is stored (read back with a plain `query` of the closed store)
  local stored
  stored=$("$BIN" query --data "$data" --format json "SELECT count(*) AS n FROM spans" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["n"])')
  python3 - "$OUT/$label.json" "$setup" "$round" "$stored" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
setup, rnd, stored = sys.argv[2], sys.argv[3], int(sys.argv[4])
print(f"{setup} round {rnd}: {r['acked_spans_per_s']:.0f} spans/s acked, ack p99 "
      f"{r['ack_latency_ms']['p99']} ms, 429 {r['throttled']}, failed {r['failed']}, "
      f"stored {stored} of {r['acked_spans']}")
if stored != r["acked_spans"] or r["failed"]:
    sys.exit("MISMATCH or failed exports")
PY
  rm -rf "$data"
}

echo "== serve-path cost of auth and TLS, $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "serve and generator: $BIN ($(stat -c %y "$BIN" | cut -d. -f1)); fsync $FSYNC, $EXPORTERS exporters, $DURATION per run"
SETUPS="plain auth tls auth_tls"
for round in $(seq 1 "$ROUNDS"); do
  for setup in $SETUPS; do run "$setup" "$round"; done
done
python3 - "$OUT" "$ROUNDS" $SETUPS <<'PY'
import json, statistics, sys
out, rounds, setups = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rate = {s: statistics.median(json.load(open(f"{out}/{s}-{k}.json"))["acked_spans_per_s"]
                             for k in range(1, rounds + 1)) for s in setups}
p99 = {s: statistics.median(json.load(open(f"{out}/{s}-{k}.json"))["ack_latency_ms"]["p99"]
                            for k in range(1, rounds + 1)) for s in setups}
print("\n| setup | acked spans/s (median of %d) | vs plain | ack p99 ms |" % rounds)
print("|---|---|---|---|")
for s in setups:
    print(f"| {s} | {rate[s]:.0f} | {rate[s] / rate['plain']:.3f} | {p99[s]} |")
PY
