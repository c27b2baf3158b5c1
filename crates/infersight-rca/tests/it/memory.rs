//! The `gpu_memory_leak` signal over GPU metrics of every convention a fleet exports them in
//! (OTel hardware `hw.gpu.*`, DCGM, nvidia-smi exporters; bytes, MiB, ratios; usage with a
//! limit or with free memory, or a used fraction alone): rows carry the canonical names and
//! scales the ingest gives each source name (`infersight_model::mapping::canonical_metric`),
//! the worker from the resource's pod name (or the host's name, when a node agent reports the
//! devices: the pod is then the one whose requests carry that host), the device in a label
//! (`hw.id`) or the `device` column. The leaking pod is found whatever the convention; pods
//! whose memory is flat, or grows with their load, are not.

use infersight_model::mapping::canonical_metric;
use infersight_model::rng::SplitMix64;
use infersight_model::{MetricRecord, Table, TableBatch};
use infersight_rca::{SignalKind, collect_signals};
use infersight_store::StorageBackend;

use crate::support::{EngineOf, MINUTE_NS, TestStore, base_ns, rca_context, request};

const GIB: f64 = 1_073_741_824.0;
/// 80 GiB devices.
const CAPACITY: f64 = 80.0 * GIB;
const SCRAPE_NS: i64 = 30_000_000_000;
const LEAKING: &str = "llm-serve-5c8f7-qx2lm";
const PODS: [&str; 4] = [
    "llm-serve-5c8f7-a9k2p",
    LEAKING,
    "llm-serve-5c8f7-zz81c",
    "llm-serve-5c8f7-m4t7d",
];

/// How a fleet reports GPU memory and utilization.
#[derive(Debug, Clone, Copy)]
enum Convention {
    /// OTel hardware: `hw.gpu.memory.usage` and `hw.gpu.memory.limit` (bytes; the limit every
    /// five minutes only), `hw.gpu.utilization` per task, the device in `hw.id`.
    OtelHardware,
    /// OTel hardware, only the used fraction `hw.gpu.memory.utilization`.
    OtelFractionOnly,
    /// DCGM: `DCGM_FI_DEV_FB_USED` and `DCGM_FI_DEV_FB_FREE` in MiB, utilization in percent.
    Dcgm,
    /// nvidia-smi exporter: used and total bytes, utilization as a ratio.
    NvidiaSmi,
}

/// One metric row as the ingest writes it for `source` (canonical name, value scaled).
fn row(ts: i64, pod: &str, source: &str, value: f64, device: &str) -> MetricRecord {
    let (mapping, _) = canonical_metric(source).unwrap_or_else(|| panic!("{source} is unmapped"));
    let in_label = source.starts_with("hw.");
    MetricRecord {
        ts,
        name: Some(mapping.canonical.to_string()),
        source_name: Some(source.to_string()),
        kind: Some("gauge".into()),
        value: Some(value * mapping.scale),
        worker: Some(pod.to_string()),
        device: (!in_label).then(|| device.to_string()),
        engine: Some(mapping.engine.to_string()),
        labels: if in_label {
            format!(r#"{{"hw.id":"{device}","hw.type":"gpu"}}"#)
        } else {
            format!(r#"{{"Hostname":"node-{device}"}}"#)
        },
        ..Default::default()
    }
}

/// One device's samples at `ts`: `used` bytes at `utilization` (a fraction).
fn device_rows(
    convention: Convention,
    ts: i64,
    pod: &str,
    device: &str,
    used: f64,
    utilization: f64,
) -> Vec<MetricRecord> {
    let mib = 1_048_576.0;
    match convention {
        Convention::OtelHardware => {
            let mut rows = vec![row(ts, pod, "hw.gpu.memory.usage", used, device)];
            if ts % (5 * MINUTE_NS) == 0 {
                rows.push(row(ts, pod, "hw.gpu.memory.limit", CAPACITY, device));
            }
            for (task, share) in [("general", 1.0), ("encoder", 0.0), ("decoder", 0.02)] {
                let mut r = row(ts, pod, "hw.gpu.utilization", utilization * share, device);
                r.labels =
                    format!(r#"{{"hw.gpu.task":"{task}","hw.id":"{device}","hw.type":"gpu"}}"#);
                rows.push(r);
            }
            rows
        }
        Convention::OtelFractionOnly => vec![
            row(
                ts,
                pod,
                "hw.gpu.memory.utilization",
                used / CAPACITY,
                device,
            ),
            row(ts, pod, "hw.gpu.utilization", utilization, device),
        ],
        Convention::Dcgm => vec![
            row(ts, pod, "DCGM_FI_DEV_FB_USED", (used / mib).round(), device),
            row(
                ts,
                pod,
                "DCGM_FI_DEV_FB_FREE",
                ((CAPACITY - used) / mib).round(),
                device,
            ),
            row(
                ts,
                pod,
                "DCGM_FI_DEV_GPU_UTIL",
                (100.0 * utilization).round(),
                device,
            ),
        ],
        Convention::NvidiaSmi => vec![
            row(ts, pod, "nvidia_smi_memory_used_bytes", used, device),
            row(ts, pod, "nvidia_smi_memory_total_bytes", CAPACITY, device),
            row(
                ts,
                pod,
                "nvidia_smi_utilization_gpu_ratio",
                utilization,
                device,
            ),
        ],
    }
}

/// 90 minutes of a four-pod fleet, two GPUs per pod: from the onset (minute 60) device 1 of
/// the leaking pod grows from 50 % to ≈ 80 % of capacity at a steady 70 % utilization; one
/// other pod's memory grows with its rising load (not a leak); the rest stay flat.
fn fleet(
    convention: Convention,
    seed: u64,
    by_host: bool,
) -> (Vec<MetricRecord>, Vec<infersight_model::RequestRecord>) {
    let mut rng = SplitMix64::new(seed);
    let mut metrics = Vec::new();
    let mut requests = Vec::new();
    let steps = 90 * MINUTE_NS / SCRAPE_NS;
    for step in 0..steps {
        let ts = base_ns() + step * SCRAPE_NS;
        let after = (ts - base_ns() - 60 * MINUTE_NS).max(0) as f64 / (30 * MINUTE_NS) as f64;
        for (p, pod) in PODS.iter().enumerate() {
            for device in ["0", "1"] {
                let noise = (rng.uniform() - 0.5) * 0.004 * CAPACITY;
                let (fraction, utilization) = match (p, device) {
                    (1, "1") => (0.5 + 0.3 * after, 0.7),
                    // load rising from 55 % to 95 %, memory following it
                    (2, _) => (0.5 + 0.2 * after, 0.55 + 0.4 * after),
                    _ => (0.5, 0.6),
                };
                let utilization = (utilization + (rng.uniform() - 0.5) * 0.02).clamp(0.0, 1.0);
                let host = format!("gpu-node-{p}");
                metrics.extend(device_rows(
                    convention,
                    ts,
                    if by_host { &host } else { pod },
                    device,
                    fraction * CAPACITY + noise,
                    utilization,
                ));
            }
            let slowdown = if p == 1 { 2_000.0 * after } else { 0.0 };
            let attrs = format!(r#"{{"host.name":"gpu-node-{p}","k8s.pod.name":"{pod}"}}"#);
            let mut r = request(ts, "llama-3.1-8b", 900.0 + slowdown, &attrs);
            r.worker = Some(pod.to_string());
            requests.push(r);
        }
    }
    (metrics, requests)
}

#[tokio::test]
async fn a_leaking_pod_is_found_whatever_the_gpu_metric_convention() {
    for convention in [
        Convention::OtelHardware,
        Convention::OtelFractionOnly,
        Convention::Dcgm,
        Convention::NvidiaSmi,
    ] {
        for (seed, by_host) in [(1, false), (2, false), (3, true)] {
            let store = TestStore::new();
            let (metrics, requests) = fleet(convention, seed, by_host);
            store
                .append(&[TableBatch {
                    table: Table::Metrics,
                    batch: MetricRecord::to_batch(&metrics),
                }])
                .unwrap();
            store.append_requests(&requests);
            let signals = collect_signals(&store.engine(), &rca_context("e2e", Vec::new()))
                .await
                .unwrap();
            let leaks: Vec<_> = signals
                .iter()
                .filter(|s| s.kind == SignalKind::GpuMemoryLeak)
                .collect();
            let context = format!("{convention:?} seed {seed} by host {by_host}: {leaks:#?}");
            assert_eq!(leaks.len(), 1, "{context}");
            assert_eq!(
                leaks[0].subject.get("worker").map(String::as_str),
                Some(LEAKING),
                "{context}"
            );
            assert!(leaks[0].detail.contains("device 1"), "{context}");
            // judged as a fraction of capacity wherever the convention gives one
            assert!(leaks[0].detail.contains("% of capacity"), "{context}");
        }
    }
}
