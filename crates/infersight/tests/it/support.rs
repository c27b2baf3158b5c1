//! Test support: run the binary, start a server on free ports, talk to it over HTTP.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_infersight"))
}

pub fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env_remove("INFERSIGHT_LOG")
        .output()
        .expect("running infersight")
}

pub fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

pub fn s(v: &str) -> Value {
    Value::StringValue(v.into())
}

/// A trace export with `n` vLLM-style request spans whose request ids are `{prefix}-{i}`.
pub fn request_spans(prefix: &str, n: usize, ts_ns: u64) -> ExportTraceServiceRequest {
    let spans = (0..n)
        .map(|i| {
            let mut trace_id = [7u8; 16];
            trace_id[..8].copy_from_slice(&(i as u64 + 1).to_be_bytes());
            let h = prefix
                .bytes()
                .fold(0u64, |a, b| a.wrapping_mul(31).wrapping_add(b as u64));
            trace_id[8..].copy_from_slice(&h.to_be_bytes());
            Span {
                trace_id: trace_id.to_vec(),
                span_id: ((i as u64) << 8 | 1).to_be_bytes().to_vec(),
                name: "llm_request".into(),
                kind: 2,
                start_time_unix_nano: ts_ns + i as u64 * 1_000_000,
                end_time_unix_nano: ts_ns + i as u64 * 1_000_000 + 2_000_000_000,
                attributes: vec![
                    kv("gen_ai.request.model", s("llama-3-8b")),
                    kv(
                        "gen_ai.usage.prompt_tokens",
                        Value::IntValue(100 + i as i64),
                    ),
                    kv("gen_ai.usage.completion_tokens", Value::IntValue(20)),
                    kv("gen_ai.latency.time_in_queue", Value::DoubleValue(0.125)),
                    kv(
                        "gen_ai.latency.time_to_first_token",
                        Value::DoubleValue(0.5),
                    ),
                    kv("gen_ai.latency.e2e", Value::DoubleValue(2.0)),
                    kv("gen_ai.request.id", s(&format!("{prefix}-{i}"))),
                ],
                ..Default::default()
            }
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", s("vllm")),
                    kv("k8s.pod.name", s("worker-1")),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            schema_url: String::new(),
        }],
    }
}

pub struct Server {
    child: Option<Child>,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub api: SocketAddr,
    pub stderr: Arc<Mutex<Vec<String>>>,
}

/// The address after `key=`; `off` (a listener the node's role does not open) is 0.0.0.0:0.
fn parse_addr(line: &str, key: &str) -> SocketAddr {
    let start = line.find(&format!("{key}=")).expect(key) + key.len() + 1;
    let rest = &line[start..];
    let end = rest.find(' ').unwrap_or(rest.len());
    match &rest[..end] {
        "off" => SocketAddr::from(([0, 0, 0, 0], 0)),
        addr => addr.parse().expect("socket address"),
    }
}

impl Server {
    /// Starts `infersight serve` on free ports with `config` (TOML) written next to `data`.
    pub fn start(data: &Path, config: &str) -> Server {
        Server::start_with(data, config, &[])
    }

    /// [`Server::start`] with extra environment variables for the server (e.g. a secret, or
    /// `INFERSIGHT_LOG`, which is `warn` unless given).
    pub fn start_with(data: &Path, config: &str, env: &[(&str, &str)]) -> Server {
        Server::launch(data, config, env, 0)
    }

    /// [`Server::start`] with the API on `api_port` (an address its config must name before
    /// it starts, like an OIDC `redirect_url`); see [`free_port`].
    pub fn start_on_api_port(data: &Path, config: &str, api_port: u16) -> Server {
        Server::launch(data, config, &[], api_port)
    }

    fn launch(data: &Path, config: &str, env: &[(&str, &str)], api_port: u16) -> Server {
        let config_path = data.with_extension("toml");
        std::fs::write(&config_path, config).unwrap();
        let mut command = Command::new(bin());
        command.env("INFERSIGHT_LOG", "warn");
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command
            .args([
                "serve",
                "--otlp-grpc-port",
                "0",
                "--otlp-http-port",
                "0",
                "--api-port",
                &api_port.to_string(),
                "--data",
            ])
            .arg(data)
            .arg("--config")
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting infersight serve");
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("listening otlp_grpc=") {
                    let _ = tx.send(line.clone());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let line = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!("server did not start: {:?}", lines.lock().unwrap());
            }
        };
        Server {
            child: Some(child),
            grpc: parse_addr(&line, "otlp_grpc"),
            http: parse_addr(&line, "otlp_http"),
            api: parse_addr(&line, "api"),
            stderr: lines,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// POSTs a body to the OTLP HTTP receiver; returns status, content type and body.
    pub fn post_otlp(
        &self,
        path: &str,
        content_type: &str,
        body: &[u8],
        gzip: bool,
    ) -> (u16, String, Vec<u8>) {
        post(
            &format!("http://{}{path}", self.http),
            content_type,
            body,
            gzip,
        )
    }

    pub fn sql(&self, sql: &str) -> serde_json::Value {
        let body = serde_json::json!({ "sql": sql }).to_string();
        let (status, _, bytes) = post(
            &format!("http://{}/api/v1/query", self.api),
            "application/json",
            body.as_bytes(),
            false,
        );
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        assert_eq!(status, 200, "query `{sql}` failed: {value}");
        value
    }

    /// The single number a `SELECT count(*) AS n ...` style query returns.
    pub fn scalar(&self, sql: &str) -> i64 {
        let value = self.sql(sql);
        first_value(&value)
            .as_i64()
            .unwrap_or_else(|| panic!("no integer in {value}"))
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        let agent = agent();
        let mut response = agent
            .get(&format!("http://{}{path}", self.api))
            .call()
            .expect("GET");
        let status = response.status().as_u16();
        (
            status,
            response.body_mut().read_to_string().unwrap_or_default(),
        )
    }

    pub fn terminate(mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        wait_with_timeout(&mut child, Duration::from_secs(60))
    }

    /// What the server has written to stderr so far.
    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// SIGTERM, wait for the exit, and answer everything the server wrote to stderr.
    pub fn stop(self) -> String {
        let lines = Arc::clone(&self.stderr);
        self.terminate();
        // let the reader thread drain the pipe
        std::thread::sleep(Duration::from_millis(200));
        lines.lock().unwrap().join("\n")
    }

    pub fn kill(mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn wait_with_timeout(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `infersight tokens create --name NAME --role ROLE --config CONFIG`: the token it printed.
pub fn create_token(config: &Path, name: &str, role: &str) -> String {
    let output = Command::new(bin())
        .args([
            "tokens", "create", "--name", name, "--role", role, "--config",
        ])
        .arg(config)
        .output()
        .unwrap();
    ok(&output, "infersight tokens create").trim().to_string()
}

/// An https agent that trusts only the CA of `ca_pem`.
pub fn https_agent(ca_pem: &str) -> ureq::Agent {
    use ureq::tls::{PemItem, RootCerts, TlsConfig};
    let roots: Vec<_> = ureq::tls::parse_pem(ca_pem.as_bytes())
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(cert)) => Some(cert.to_owned()),
            _ => None,
        })
        .collect();
    ureq::Agent::config_builder()
        .tls_config(
            TlsConfig::builder()
                .root_certs(RootCerts::Specific(std::sync::Arc::new(roots)))
                .build(),
        )
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(30)))
        .build()
        .into()
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

pub fn post(url: &str, content_type: &str, body: &[u8], gzip: bool) -> (u16, String, Vec<u8>) {
    let agent = agent();
    let mut request = agent.post(url).header("content-type", content_type);
    let payload = if gzip {
        request = request.header("content-encoding", "gzip");
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut encoder, body).unwrap();
        encoder.finish().unwrap()
    } else {
        body.to_vec()
    };
    let mut response = request.send(&payload[..]).expect("POST");
    let status = response.status().as_u16();
    let ct = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mut bytes = Vec::new();
    response
        .body_mut()
        .as_reader()
        .read_to_end(&mut bytes)
        .unwrap();
    (status, ct, bytes)
}

/// First value of the first row of a `/api/v1/query` JSON answer (rows as objects or arrays).
pub fn first_value(answer: &serde_json::Value) -> serde_json::Value {
    rows(answer)
        .into_iter()
        .next()
        .and_then(|row| row.into_iter().next())
        .map(|(_, v)| v)
        .unwrap_or_default()
}

/// Rows of a `/api/v1/query` answer as (column, value) lists in column order.
pub fn rows(answer: &serde_json::Value) -> Vec<Vec<(String, serde_json::Value)>> {
    let columns: Vec<String> = answer["columns"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| c["name"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default();
    answer["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|row| match row {
                    serde_json::Value::Object(map) => columns
                        .iter()
                        .map(|c| (c.clone(), map.get(c).cloned().unwrap_or_default()))
                        .collect(),
                    serde_json::Value::Array(items) => {
                        columns.iter().cloned().zip(items.iter().cloned()).collect()
                    }
                    _ => Vec::new(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts that a command exited 0 (showing its stderr otherwise); answers its stdout.
pub fn ok(out: &Output, what: &str) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A small simulated fleet: `scenario` with `seed` for `duration`, 8 workers at 10 req/s with
/// Poisson arrivals (plus `extra` flags for `simulate`), written to `dir/sim`; then `files` of it
/// (`traces.jsonl`, `logs.jsonl`, `metrics.jsonl`) ingested into `data`. Answers the ground truth.
pub fn simulate_and_ingest(
    dir: &Path,
    data: &Path,
    run_of: (&str, u64, &str),
    extra: &[&str],
    files: &[&str],
) -> serde_json::Value {
    let (sim, truth) = simulate_to(dir, run_of, extra);
    let paths: Vec<String> = files
        .iter()
        .map(|f| sim.join(f).to_string_lossy().into_owned())
        .collect();
    let mut args = vec!["ingest", "--quiet", "--data", data.to_str().unwrap()];
    args.extend(paths.iter().map(String::as_str));
    ok(&run(&args), "ingest");
    truth
}

/// `scenario` with `seed` for `duration`, 8 workers at 10 req/s with Poisson arrivals (plus
/// `extra` flags for `simulate`), written to `dir/sim`: that directory and the ground truth.
pub fn simulate_to(
    dir: &Path,
    (scenario, seed, duration): (&str, u64, &str),
    extra: &[&str],
) -> (PathBuf, serde_json::Value) {
    let sim = dir.join("sim");
    let seed = seed.to_string();
    let mut args = vec![
        "simulate",
        "--scenario",
        scenario,
        "--seed",
        &seed,
        "--duration",
        duration,
        "--workers",
        "8",
        "--rate",
        "10",
        "--arrivals",
        "poisson",
        "--quiet",
        "--out",
        sim.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    ok(&run(&args), "simulate");
    let truth = std::fs::read_to_string(sim.join("ground_truth.json")).unwrap();
    let truth = serde_json::from_str(&truth).expect("ground_truth.json");
    (sim, truth)
}

/// A port of 127.0.0.1 free a moment ago (bound and released), for a server that must know its
/// own address before it starts.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}
