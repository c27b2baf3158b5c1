#!/usr/bin/env bash
# Proves that two builds of `infersight ingest` store the same thing: every table's rows (as
# `infersight query --format json` returns them, one sorted line per row), the ingest summary, and the bytes of every Parquet
# segment and rollup sidecar. Inputs: a bench-gen sample, a simulator run with phase spans and
# token events (the span-tree memory across lines, logs, metrics) and its raw engine logs (one
# `--input-format raw --worker NAME` ingest per worker, as the README shows), and hand-written
# edge cases (enum names, escapes, every AnyValue kind, a malformed line, CRLF, a blank line).
# Usage: OLD=/tmp/infersight-before NEW=target/release/infersight bench/ingest_same.sh
#   ROWS_ONLY=1 compares rows and summaries only (for builds whose Parquet encoding differs,
#   e.g. another zstd level or row-group cut, while the data must not)
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${OLD:?path of the old binary}
NEW=${NEW:-target/release/infersight}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK/in"

"$OLD" bench-gen otlp-jsonl --out "$WORK/in/gen.jsonl" --spans 30000 --per-line 250 >/dev/null
"$OLD" simulate --scenario lora_kv_regression --seed 3 --duration 20m --workers 6 --rate 8 \
  --phase-spans --token-events 0.05 --out "$WORK/in/sim" --quiet --format json >/dev/null
T='"traceId":"5b8efff798038103d269b633813fc60c"'
{
  printf '%s\n' '{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"edge"}}]},"scopeSpans":[{"scope":{"name":"sc","version":"1"},"spans":[{'"$T"',"spanId":"eee19b7ec3c1b174","name":"llm_request","kind":"SPAN_KIND_SERVER","startTimeUnixNano":"1764400000000000000","endTimeUnixNano":"1764400001000000000","attributes":[{"key":"gen_ai.request.model","value":{"stringValue":"m"}}],"status":{"code":"STATUS_CODE_ERROR","message":"bad"}}]}]}]}'
  printf '%s\n' '{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"edge"}},{"key":"tenant","value":{"stringValue":"from-resource"}}]},"scopeSpans":[{"spans":[{'"$T"',"spanId":"eee19b7ec3c1b175","name":"gen \u00e9 \ud83d\ude00 \"q\"","kind":2,"startTimeUnixNano":1764400000500000000,"endTimeUnixNano":"1764400000900000000","attributes":[{"key":"gen_ai.request.model","value":{"stringValue":"caf\u00e9"}},{"key":"gen_ai.usage.input_tokens","value":{"intValue":12}},{"key":"gen_ai.usage.output_tokens","value":{"intValue":"-3"}},{"key":"tenant","value":{"stringValue":"t"}},{"key":"b","value":{"bytesValue":"aGVsbG8="}},{"key":"arr","value":{"arrayValue":{"values":[{"intValue":"1"},{"doubleValue":2.5},{"boolValue":true},{}]}}},{"key":"kv","value":{"kvlistValue":{"values":[{"key":"z","value":{"stringValue":"mail me at a@b.example"}},{"key":"a","value":null}]}}},{"key":"note","value":{"stringValue":"card 4111 1111 1111 1111, ip 10.1.2.3"}},{"key":"d","value":{"doubleValue":1e300}},{"key":"empty"}],"events":[{"timeUnixNano":"1764400000600000000","name":"gen_ai.token"},{"timeUnixNano":1764400000700000000,"name":"gen_ai.token"}]}]}]}]}'
  printf '%s\r\n' '{"resourceSpans":[{"scopeSpans":[{"spans":[{'"$T"',"spanId":"0000000000000000","name":"bad id","startTimeUnixNano":"1"},{'"$T"',"spanId":"eee19b7ec3c1b176","name":"no start"},{'"$T"',"spanId":"eee19b7ec3c1b177","parentSpanId":"eee19b7ec3c1b178","name":"prefill","startTimeUnixNano":"1764400000100000000","endTimeUnixNano":"1764400000200000000"}]}]}]}'
  printf '%s\n' '{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"truncated'
  printf '\n'
  printf '%s\n' '{"resourceSpans":[{"scopeSpans":[{"spans":[{'"$T"',"spanId":"eee19b7ec3c1b178","name":"llm_request","kind":2,"startTimeUnixNano":"1764400000000000000","endTimeUnixNano":"1764400001000000000","attributes":[{"key":"gen_ai.request.model","value":{"stringValue":"m"}},{"key":"gen_ai.usage.output_tokens","value":{"intValue":"11"}},{"key":"gen_ai.usage.input_tokens","value":{"intValue":"3"}}]}]}]}]}'
  printf '%s\n' '{"resourceSpans":[{"scopeSpans":[{"spans":[{'"$T"',"spanId":"eee19b7ec3c1b179","name":"x","startTimeUnixNano":"1764400000000000000","attributes":[{"key":"gen_ai.usage.input_tokens","value":{"stringValue":"many"}}]}]}]}]}'
} > "$WORK/in/edge.jsonl"

inputs=("$WORK/in/gen.jsonl" "$WORK/in/edge.jsonl" "$WORK/in"/sim/*.jsonl)
for which in old new; do
  bin=$OLD; [ "$which" = new ] && bin=$NEW
  rm -rf "$WORK/$which"
  mkdir -p "$WORK/$which"
  # rejected records make the exit status 2; the summary says which
  "$bin" ingest --quiet --data "$WORK/$which/data" --format json "${inputs[@]}" \
    > "$WORK/$which/summary.json" || true
  for raw in "$WORK/in"/sim/raw/*.log; do
    "$bin" ingest --quiet --data "$WORK/$which/data" --format json --input-format raw \
      --worker "$(basename "$raw" .log)" "$raw" >> "$WORK/$which/summary.json" || true
  done
  for table in requests spans tokens logs metrics; do
    "$bin" query --data "$WORK/$which/data" --format json "SELECT * FROM $table" \
      | python3 -c 'import json,sys; [print(json.dumps(r, sort_keys=True)) for r in json.load(sys.stdin)]' \
      | sort > "$WORK/$which/$table.jsonl"
  done
  (cd "$WORK/$which/data" && find segments -type f | sort | xargs sha256sum) > "$WORK/$which/files.sha256"
done
status=0
compared=(summary.json requests.jsonl spans.jsonl tokens.jsonl logs.jsonl metrics.jsonl)
[ "${ROWS_ONLY:-0}" = 1 ] || compared+=(files.sha256)
for f in "${compared[@]}"; do
  if cmp -s "$WORK/old/$f" "$WORK/new/$f"; then
    echo "same      $f ($(wc -l < "$WORK/new/$f") lines)"
  else
    echo "DIFFERENT $f"; diff "$WORK/old/$f" "$WORK/new/$f" | head -5; status=1
  fi
done
exit $status
