//! Conversion of OTLP logs and metrics into the `logs` and `metrics` tables.

use infersight_ingest::otlp::convert::exponential_buckets;
use infersight_ingest::{logs_to_batches, metrics_to_batches};
use infersight_model::mapping::AttributeMapper;
use infersight_model::{LogRecord, MetricRecord, Table};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, KeyValueList, any_value};
use opentelemetry_proto::tonic::logs::v1::{self as logs, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary,
    SummaryDataPoint, exponential_histogram_data_point::Buckets, metric, number_data_point,
    summary_data_point::ValueAtQuantile,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::traces::{T0, TRACE};
use crate::{batch_of, i, json, kv, s};

fn resource(attrs: Vec<KeyValue>) -> Option<Resource> {
    Some(Resource {
        attributes: attrs,
        ..Default::default()
    })
}

fn log_request(records: Vec<logs::LogRecord>) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: resource(vec![
                kv("service.name", s("vllm")),
                kv("k8s.pod.name", s("pod-7")),
            ]),
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[test]
fn log_records_fill_the_logs_table() {
    let request = log_request(vec![
        logs::LogRecord {
            time_unix_nano: T0,
            severity_number: 13,
            body: Some(AnyValue {
                value: Some(s("KV cache is full, preempting")),
            }),
            trace_id: TRACE.to_vec(),
            span_id: vec![1, 2, 3, 4, 5, 6, 7, 8],
            attributes: vec![
                kv("gen_ai.request.id", s("cmpl-42")),
                kv("worker", s("w-override")),
            ],
            ..Default::default()
        },
        logs::LogRecord {
            // only the observed time: it is used
            observed_time_unix_nano: T0 + 5,
            severity_text: "Information".into(),
            severity_number: 9,
            body: Some(AnyValue {
                value: Some(any_value::Value::KvlistValue(KeyValueList {
                    values: vec![kv("event", s("stats")), kv("running", i(3))],
                })),
            }),
            ..Default::default()
        },
        logs::LogRecord {
            severity_number: 17,
            body: Some(AnyValue {
                value: Some(s("no time at all")),
            }),
            ..Default::default()
        },
    ]);
    let converted = logs_to_batches(&request, &AttributeMapper::default()).unwrap();
    assert_eq!((converted.accepted, converted.rejected), (2, 1));
    let message = converted.rejection_message.unwrap();
    assert!(
        message.contains("neither time_unix_nano nor observed_time_unix_nano"),
        "{message}"
    );
    let rows = LogRecord::from_batch(batch_of(&converted.batches, Table::Logs)).unwrap();
    assert_eq!(rows.len(), 2);
    let first = &rows[0];
    assert_eq!(first.ts, T0 as i64);
    assert_eq!(first.severity.as_deref(), Some("WARN"));
    assert_eq!(first.service.as_deref(), Some("vllm"));
    // `worker` ranks before `k8s.pod.name` in the mapping table, and the record's own wins.
    assert_eq!(first.worker.as_deref(), Some("w-override"));
    assert_eq!(
        first.trace_id.as_deref(),
        Some("5b8efff798038103d269b633813fc60c")
    );
    assert_eq!(first.span_id.as_deref(), Some("0102030405060708"));
    assert_eq!(first.request_id.as_deref(), Some("cmpl-42"));
    assert_eq!(first.body.as_deref(), Some("KV cache is full, preempting"));
    assert_eq!(json(&first.attrs)["gen_ai.request.id"], "cmpl-42");
    assert_eq!(first.template_id, None);
    let second = &rows[1];
    assert_eq!(second.ts, (T0 + 5) as i64);
    assert_eq!(
        second.severity.as_deref(),
        Some("Information"),
        "severity_text wins"
    );
    assert_eq!(second.worker.as_deref(), Some("pod-7"));
    assert_eq!(
        (second.trace_id.as_deref(), second.request_id.as_deref()),
        (None, None)
    );
    assert_eq!(
        json(second.body.as_deref().unwrap()),
        json(r#"{"event":"stats","running":3}"#)
    );
}

fn number(value: number_data_point::Value, attrs: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        time_unix_nano: T0,
        value: Some(value),
        attributes: attrs,
        ..Default::default()
    }
}

fn metric(name: &str, data: metric::Data) -> Metric {
    Metric {
        name: name.into(),
        data: Some(data),
        ..Default::default()
    }
}

fn metrics_request(metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: resource(vec![
                kv("service.name", s("vllm")),
                kv("service.instance.id", s("10.0.0.5:8000")),
            ]),
            scope_metrics: vec![ScopeMetrics {
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn by_name<'a>(rows: &'a [MetricRecord], name: &str) -> Vec<&'a MetricRecord> {
    rows.iter()
        .filter(|r| r.name.as_deref() == Some(name))
        .collect()
}

#[test]
fn vllm_metrics_map_to_canonical_names_and_labels() {
    let vllm_labels = || vec![kv("model_name", s("llama-3-8b")), kv("engine", s("0"))];
    let request = metrics_request(vec![
        metric(
            "vllm:gpu_cache_usage_perc",
            metric::Data::Gauge(Gauge {
                data_points: vec![number(
                    number_data_point::Value::AsDouble(0.93),
                    vllm_labels(),
                )],
            }),
        ),
        metric(
            "vllm:num_preemptions",
            metric::Data::Sum(Sum {
                is_monotonic: true,
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                data_points: vec![number(number_data_point::Value::AsInt(12), vllm_labels())],
            }),
        ),
        metric(
            // the OTel Collector's Prometheus receiver strips `_total` from counters
            "vllm:prompt_tokens",
            metric::Data::Sum(Sum {
                is_monotonic: true,
                aggregation_temporality: AggregationTemporality::Delta as i32,
                data_points: vec![number(number_data_point::Value::AsInt(900), vec![])],
            }),
        ),
        metric(
            "DCGM_FI_DEV_FB_USED",
            metric::Data::Gauge(Gauge {
                data_points: vec![number(
                    number_data_point::Value::AsDouble(2.0),
                    vec![
                        kv("gpu", s("3")),
                        kv("modelName", s("NVIDIA H100")),
                        kv("Hostname", s("node-1")),
                    ],
                )],
            }),
        ),
        metric(
            "queue_depth",
            metric::Data::Sum(Sum {
                is_monotonic: false,
                data_points: vec![number(
                    number_data_point::Value::AsInt(4),
                    vec![kv("engine", s("sglang")), kv("pod", s("p-1"))],
                )],
                ..Default::default()
            }),
        ),
    ]);
    let converted = metrics_to_batches(&request, &AttributeMapper::default()).unwrap();
    assert_eq!((converted.accepted, converted.rejected), (5, 0));
    let rows = MetricRecord::from_batch(batch_of(&converted.batches, Table::Metrics)).unwrap();
    assert_eq!(rows.len(), 5);

    let kv_cache = by_name(&rows, "kv_cache_usage_ratio");
    assert_eq!(kv_cache.len(), 1);
    let kv_cache = kv_cache[0];
    assert_eq!(
        kv_cache.source_name.as_deref(),
        Some("vllm:gpu_cache_usage_perc")
    );
    assert_eq!(kv_cache.kind.as_deref(), Some("gauge"));
    assert_eq!(kv_cache.value, Some(0.93));
    assert_eq!(kv_cache.model.as_deref(), Some("llama-3-8b"));
    assert_eq!(kv_cache.engine.as_deref(), Some("vllm"));
    assert_eq!(kv_cache.worker.as_deref(), Some("10.0.0.5:8000"));
    let labels = json(&kv_cache.labels);
    assert_eq!(labels["engine"], "0", "vLLM's engine index stays a label");
    assert_eq!(labels["service.name"], "vllm");
    assert!(labels.get("model_name").is_none(), "{labels}");
    assert!(labels.get("service.instance.id").is_none(), "{labels}");

    let preemptions = by_name(&rows, "preemptions_total")[0];
    assert_eq!(
        (preemptions.kind.as_deref(), preemptions.value),
        (Some("counter"), Some(12.0))
    );

    let prompt = by_name(&rows, "prompt_tokens_total")[0];
    assert_eq!(prompt.source_name.as_deref(), Some("vllm:prompt_tokens"));
    assert_eq!(json(&prompt.labels)["otel.temporality"], "delta");

    let fb = by_name(&rows, "gpu_memory_used_bytes")[0];
    assert_eq!(fb.value, Some(2.0 * 1_048_576.0), "MiB scaled to bytes");
    assert_eq!(fb.device.as_deref(), Some("3"));
    assert_eq!(fb.engine.as_deref(), Some("dcgm"));
    assert_eq!(
        fb.model, None,
        "the GPU's modelName is not the served model"
    );
    assert_eq!(json(&fb.labels)["modelName"], "NVIDIA H100");

    let queue = by_name(&rows, "queue_depth")[0];
    assert_eq!(queue.kind.as_deref(), Some("sum"));
    assert_eq!(queue.source_name.as_deref(), Some("queue_depth"));
    assert_eq!(queue.engine.as_deref(), Some("sglang"));
    assert_eq!(
        queue.worker.as_deref(),
        Some("p-1"),
        "the point's pod ranks before the scrape target's instance"
    );
    assert_eq!(json(&queue.labels)["service.instance.id"], "10.0.0.5:8000");
}

/// A metric point's worker is the pod that serves, not the scrape target: label sets as DCGM's
/// exporter, kube-state style relabeling and OTel `hw.*` resources write them. Each case is
/// (resource, point labels, the worker).
#[test]
fn metric_workers_are_pods_before_scrape_targets() {
    let target = || kv("service.instance.id", s("10.2.3.4:9400"));
    let cases: Vec<(Vec<KeyValue>, Vec<KeyValue>, &str)> = vec![
        // DCGM with pod mapping: the GPU's pod, not the exporter's node or the target
        (
            vec![target()],
            vec![
                kv("gpu", s("1")),
                kv("UUID", s("GPU-5d1c")),
                kv("Hostname", s("dcgm-exporter-x2k")),
                kv("namespace", s("serving")),
                kv("pod", s("llm-7f9c-0")),
                kv("container", s("engine")),
            ],
            "llm-7f9c-0",
        ),
        // DCGM without pod mapping: the exporter's host, still before ip:port
        (
            vec![target()],
            vec![kv("gpu", s("0")), kv("Hostname", s("node-a17"))],
            "node-a17",
        ),
        // kube-state style: the series' own pod kept as `exported_pod`, `pod` is the exporter's
        (
            vec![target()],
            vec![kv("exported_pod", s("chat-1")), kv("pod", s("ksm-0"))],
            "chat-1",
        ),
        (
            vec![],
            vec![
                kv("pod_name", s("old-cadvisor-pod")),
                kv("instance", s("10.9.9.9:10250")),
            ],
            "old-cadvisor-pod",
        ),
        // OTel hw.*: the pod, then the host, then the instance id
        (
            vec![
                kv("service.instance.id", s("0c7e-uuid")),
                kv("host.name", s("gpu-host-3")),
                kv("k8s.pod.name", s("infer-2")),
            ],
            vec![kv("hw.id", s("gpu-0")), kv("hw.type", s("gpu"))],
            "infer-2",
        ),
        (
            vec![
                kv("service.instance.id", s("0c7e-uuid")),
                kv("host.name", s("gpu-host-3")),
            ],
            vec![kv("hw.id", s("gpu-0"))],
            "gpu-host-3",
        ),
        // nothing else: the target is all there is
        (vec![target()], vec![kv("gpu", s("0"))], "10.2.3.4:9400"),
        (
            vec![],
            vec![kv("instance", s("10.2.3.5:9400"))],
            "10.2.3.5:9400",
        ),
    ];
    for (resource_attrs, labels, worker) in cases {
        let request = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: resource(resource_attrs),
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![metric(
                        "DCGM_FI_DEV_FB_USED",
                        metric::Data::Gauge(Gauge {
                            data_points: vec![number(
                                number_data_point::Value::AsDouble(1.0),
                                labels,
                            )],
                        }),
                    )],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let converted = metrics_to_batches(&request, &AttributeMapper::default()).unwrap();
        let rows = MetricRecord::from_batch(batch_of(&converted.batches, Table::Metrics)).unwrap();
        assert_eq!(
            rows[0].worker.as_deref(),
            Some(worker),
            "{}",
            rows[0].labels
        );
        assert!(json(&rows[0].labels).get(worker).is_none());
    }
}

#[test]
fn histograms_summaries_and_missing_values() {
    let request = metrics_request(vec![
        metric(
            "vllm:time_to_first_token_seconds",
            metric::Data::Histogram(Histogram {
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                data_points: vec![HistogramDataPoint {
                    time_unix_nano: T0,
                    count: 10,
                    sum: Some(3.5),
                    bucket_counts: vec![2, 5, 3, 0],
                    explicit_bounds: vec![0.1, 0.5, 1.0],
                    attributes: vec![kv("model_name", s("m"))],
                    ..Default::default()
                }],
            }),
        ),
        metric(
            "request_latency",
            metric::Data::ExponentialHistogram(ExponentialHistogram {
                data_points: vec![ExponentialHistogramDataPoint {
                    time_unix_nano: T0,
                    count: 7,
                    sum: Some(20.0),
                    scale: 0,
                    zero_count: 1,
                    positive: Some(Buckets {
                        offset: 1,
                        bucket_counts: vec![2, 4],
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        ),
        metric(
            "rpc_duration",
            metric::Data::Summary(Summary {
                data_points: vec![SummaryDataPoint {
                    time_unix_nano: T0,
                    count: 100,
                    sum: 42.0,
                    quantile_values: vec![
                        ValueAtQuantile {
                            quantile: 0.5,
                            value: 0.3,
                        },
                        ValueAtQuantile {
                            quantile: 0.99,
                            value: 1.2,
                        },
                    ],
                    ..Default::default()
                }],
            }),
        ),
        metric(
            "broken",
            metric::Data::Gauge(Gauge {
                data_points: vec![
                    NumberDataPoint {
                        time_unix_nano: T0,
                        value: None,
                        ..Default::default()
                    },
                    NumberDataPoint {
                        time_unix_nano: 0,
                        value: Some(number_data_point::Value::AsInt(1)),
                        ..Default::default()
                    },
                    // a staleness marker is neither accepted nor rejected
                    NumberDataPoint {
                        time_unix_nano: T0,
                        flags: 1,
                        ..Default::default()
                    },
                ],
            }),
        ),
    ]);
    let converted = metrics_to_batches(&request, &AttributeMapper::default()).unwrap();
    assert_eq!((converted.accepted, converted.rejected), (3, 2));
    let message = converted.rejection_message.unwrap();
    assert!(
        message.contains("`broken`") && message.contains("no value"),
        "{message}"
    );
    let rows = MetricRecord::from_batch(batch_of(&converted.batches, Table::Metrics)).unwrap();

    let ttft = by_name(&rows, "ttft_seconds")[0];
    assert_eq!(ttft.kind.as_deref(), Some("histogram"));
    assert_eq!((ttft.value, ttft.sample_count), (Some(3.5), Some(10)));
    assert_eq!(ttft.bucket_bounds, vec![0.1, 0.5, 1.0]);
    assert_eq!(ttft.bucket_counts, vec![2.0, 5.0, 3.0, 0.0]);
    assert_eq!(ttft.model.as_deref(), Some("m"));

    let exp = by_name(&rows, "request_latency")[0];
    assert_eq!(exp.kind.as_deref(), Some("exponential_histogram"));
    assert_eq!((exp.value, exp.sample_count), (Some(20.0), Some(7)));
    // scale 0: base 2; buckets (2,4] and (4,8]
    assert_eq!(exp.bucket_bounds, vec![2.0, 4.0, 8.0]);
    assert_eq!(exp.bucket_counts, vec![1.0, 2.0, 4.0, 0.0]);

    let summary = by_name(&rows, "rpc_duration");
    assert_eq!(summary.len(), 3);
    assert_eq!(summary[0].kind.as_deref(), Some("summary"));
    assert_eq!(
        (summary[0].value, summary[0].sample_count),
        (Some(42.0), Some(100))
    );
    assert_eq!(summary[2].kind.as_deref(), Some("quantile"));
    assert_eq!(summary[2].value, Some(1.2));
    assert_eq!(json(&summary[2].labels)["quantile"], "0.99");
    assert!(json(&summary[0].labels).get("quantile").is_none());
}

#[test]
fn exponential_bounds_follow_scale_and_offset() {
    let point = ExponentialHistogramDataPoint {
        scale: 1,
        zero_count: 0,
        positive: Some(Buckets {
            offset: -2,
            bucket_counts: vec![1, 1],
        }),
        negative: Some(Buckets {
            offset: 0,
            bucket_counts: vec![3],
        }),
        ..Default::default()
    };
    let (bounds, counts) = exponential_buckets(&point);
    let base = 2f64.sqrt();
    let expected = [base.powi(-2), base.powi(-1), 1.0];
    assert_eq!(bounds.len(), 3);
    for (b, e) in bounds.iter().zip(expected) {
        assert!((b - e).abs() < 1e-12, "{bounds:?}");
    }
    assert_eq!(counts, vec![3.0, 1.0, 1.0, 0.0]);
}
