"""Peer for the ingest benchmark: DuckDB parses the same OTLP JSON Lines file, flattens one row
per span with the GenAI attributes as columns, and writes zstd Parquet. Three runs, wall time."""
import sys
import time

import duckdb

src, dst = sys.argv[1], sys.argv[2]
SQL = f"""
COPY (
  WITH rs AS (SELECT unnest(resourceSpans) AS r FROM read_json('{src}', format='newline_delimited',
                maximum_object_size=1000000000)),
       ss AS (SELECT r.resource AS res, unnest(r.scopeSpans) AS s FROM rs),
       sp AS (SELECT res, unnest(s.spans) AS span FROM ss)
  SELECT span.traceId AS trace_id, span.spanId AS span_id, span.name AS name,
         CAST(span.startTimeUnixNano AS BIGINT) AS ts,
         list_filter(span.attributes, lambda a: a.key = 'gen_ai.request.model')[1].value.stringValue AS model,
         CAST(list_filter(span.attributes, lambda a: a.key = 'gen_ai.usage.input_tokens')[1].value.intValue AS BIGINT) AS input_tokens,
         CAST(list_filter(span.attributes, lambda a: a.key = 'gen_ai.usage.output_tokens')[1].value.intValue AS BIGINT) AS output_tokens,
         list_filter(span.attributes, lambda a: a.key = 'gen_ai.latency.e2e')[1].value.doubleValue * 1000 AS e2e_ms
  FROM sp
) TO '{dst}' (FORMAT parquet, COMPRESSION zstd)
"""
con = duckdb.connect()
for run in range(1, 4):
    start = time.perf_counter()
    con.execute(SQL)
    elapsed = time.perf_counter() - start
    rows = con.execute(f"SELECT count(*) FROM read_parquet('{dst}')").fetchone()[0]
    print(f"duckdb {duckdb.__version__} run {run}: {elapsed:.2f} s, {rows / elapsed:,.0f} spans/s ({rows} rows)")
