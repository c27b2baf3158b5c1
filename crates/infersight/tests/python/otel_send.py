"""Send GenAI/vLLM spans and log records with the real OpenTelemetry Python SDK.

Usage: otel_send.py GRPC_ENDPOINT HTTP_ENDPOINT [--expect-refused]
Exports over OTLP/gRPC and OTLP/HTTP (protobuf), flushes, and exits non-zero on any export failure
(with --expect-refused: unless every export failed). Headers such as a bearer token come the
SDK's own way, from OTEL_EXPORTER_OTLP_HEADERS.
"""
import logging
import sys
import time

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogs
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs

grpc_endpoint, http_endpoint = sys.argv[1], sys.argv[2]
expect_refused = "--expect-refused" in sys.argv[3:]
exports = []
resource = Resource.create({"service.name": "vllm-python", "k8s.pod.name": "worker-7"})

failures = []


class Checked:
    """Wraps an exporter and records failed exports (the SDK only logs them)."""

    def __init__(self, inner, name):
        self.inner, self.name = inner, name

    def export(self, batch):
        exports.append(self.name)
        result = self.inner.export(batch)
        ok = result in (SpanExportResult.SUCCESS,) or getattr(result, "name", "") == "SUCCESS"
        if not ok:
            failures.append(f"{self.name}: {result}")
        return result

    def shutdown(self):
        return self.inner.shutdown()

    def force_flush(self, timeout_millis=30000):
        return True


def send(transport, span_exporter, log_exporter):
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(Checked(span_exporter, transport + " spans")))
    tracer = provider.get_tracer("infersight-test")
    current = {
        "gen_ai.request.model": "llama-3-8b",
        "gen_ai.provider.name": "vllm",
        "gen_ai.usage.input_tokens": 512,
        "gen_ai.usage.output_tokens": 128,
        "gen_ai.usage.cache_read.input_tokens": 64,
        "gen_ai.response.finish_reasons": ["stop"],
        "gen_ai.request.id": f"{transport}-current",
        "gen_ai.latency.time_in_queue": 0.25,
        "gen_ai.latency.time_to_first_token": 0.4,
        "gen_ai.latency.e2e": 3.0,
    }
    deprecated = {
        "gen_ai.request.model": "llama-3-8b",
        "gen_ai.system": "vllm",
        "gen_ai.usage.prompt_tokens": 512,
        "gen_ai.usage.completion_tokens": 128,
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.request.id": f"{transport}-deprecated",
        "gen_ai.latency.time_in_queue": 0.25,
        "gen_ai.latency.time_to_first_token": 0.4,
        "gen_ai.latency.e2e": 3.0,
    }
    for attrs in (current, deprecated):
        with tracer.start_as_current_span("llm_request", attributes=attrs):
            pass
    provider.shutdown()

    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(Checked(log_exporter, transport + " logs")))
    logger = logging.getLogger("infersight-test-" + transport)
    logger.propagate = False
    logger.addHandler(LoggingHandler(level=logging.INFO, logger_provider=logger_provider))
    logger.warning("%s log record: KV cache usage high", transport)
    logger_provider.shutdown()


send("grpc", GrpcSpans(endpoint=grpc_endpoint, insecure=True), GrpcLogs(endpoint=grpc_endpoint, insecure=True))
send("http", HttpSpans(endpoint=http_endpoint + "/v1/traces"), HttpLogs(endpoint=http_endpoint + "/v1/logs"))

if expect_refused:
    if len(failures) != len(exports) or not exports:
        print(f"expected every export refused; {len(failures)} of {len(exports)} were", file=sys.stderr)
        sys.exit(1)
    print("refused")
    sys.exit(0)
if failures:
    print("export failures:", failures, file=sys.stderr)
    sys.exit(1)
print("sent")
