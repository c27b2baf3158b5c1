//! Headless Chromium through chromedriver's WebDriver protocol, over plain HTTP with `ureq`.
//!
//! Why WebDriver and not `--dump-dom` + `--enable-logging`: chromedriver returns the console
//! entries as structured records (level, source, message) instead of log lines interleaved with
//! Chromium's own diagnostics, runs the layout queries (bounding boxes) the DOM dump cannot, and
//! takes screenshots in the same page load.
//!
//! The skip rule ([`available`]): a test that needs the browser skips with a note when Chromium
//! or chromedriver is missing, unless `INFERSIGHT_TEST_CHROMIUM=1`, which turns the skip into a
//! failure (CI sets it so the browser tests cannot silently stop running).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Whether the browser tests can run here. Panics when `INFERSIGHT_TEST_CHROMIUM=1` and the
/// browser or its driver is missing; otherwise prints why `test` is skipped and answers false.
pub fn available(test: &str) -> bool {
    let required = std::env::var("INFERSIGHT_TEST_CHROMIUM").is_ok_and(|v| v == "1");
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        !required,
        "INFERSIGHT_TEST_CHROMIUM=1 but {missing:?} not installed (apt-get install chromium chromium-driver)"
    );
    eprintln!(
        "skipped {test}: {missing:?} not installed (set INFERSIGHT_TEST_CHROMIUM=1 to require it)"
    );
    false
}

/// A chromedriver child and at most one browser session. Dropping it ends the session and kills
/// chromedriver (and with it its browser), pass or fail.
pub struct Driver {
    child: Child,
    base: String,
    agent: ureq::Agent,
    session: Option<String>,
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let _ = self
                .agent
                .delete(format!("{}/session/{session}", self.base))
                .call();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    /// Starts chromedriver on a free port and waits until it is ready.
    pub fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .into();
        let driver = Driver {
            child,
            base: format!("http://127.0.0.1:{port}"),
            agent,
            session: None,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = driver
                .agent
                .get(format!("{}/status", driver.base))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_json::<Value>().ok())
                .is_some_and(|v| v["value"]["ready"] == json!(true));
            if ready {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        driver
    }

    /// One WebDriver command; panics on a transport error or a non-2xx answer, returns `value`.
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let response = match (method, body) {
            ("GET", _) => self.agent.get(&url).call(),
            ("DELETE", _) => self.agent.delete(&url).call(),
            (_, Some(body)) => self.agent.post(&url).send_json(body),
            (_, None) => self.agent.post(&url).send_json(json!({})),
        };
        let mut response = response.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status();
        let value: Value = response
            .body_mut()
            .with_config()
            .limit(256 << 20)
            .read_json()
            .unwrap_or_else(|e| panic!("{method} {path}: reading the answer: {e}"));
        assert!(
            status.is_success(),
            "{method} {path}: {status}: {}",
            value["value"]
        );
        value["value"].clone()
    }

    /// `/session/{id}{rest}` for the open session.
    pub fn session_path(&self, rest: &str) -> String {
        format!(
            "/session/{}{rest}",
            self.session.as_deref().expect("an open session")
        )
    }

    /// Opens a headless session at 1280×800 with its profile in `profile` and the browser log on.
    pub fn open_session(&mut self, profile: &Path) {
        let args = [
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            format!("--user-data-dir={}", profile.display()),
            "--window-size=1280,800".into(),
            "--hide-scrollbars".into(),
        ];
        let capabilities = json!({
            "capabilities": { "alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": { "binary": CHROMIUM, "args": args },
                "goog:loggingPrefs": { "browser": "ALL" },
            }}
        });
        let value = self.call("POST", "/session", Some(capabilities));
        self.session = Some(
            value["sessionId"]
                .as_str()
                .expect("a session id")
                .to_string(),
        );
    }

    /// Resizes the window (the viewport follows in headless mode).
    pub fn set_window_size(&self, width: u64, height: u64) {
        self.call(
            "POST",
            &self.session_path("/window/rect"),
            Some(json!({ "width": width, "height": height })),
        );
    }

    /// Navigates to `url` and waits for the page load.
    pub fn navigate(&self, url: &str) {
        self.call(
            "POST",
            &self.session_path("/url"),
            Some(json!({ "url": url })),
        );
    }

    /// The current page's URL.
    pub fn current_url(&self) -> String {
        self.call("GET", &self.session_path("/url"), None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub fn execute(&self, script: &str, args: Value) -> Value {
        self.call(
            "POST",
            &self.session_path("/execute/sync"),
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// Runs `script` with a callback as its last argument and answers what it was called with.
    pub fn execute_async(&self, script: &str, args: Value) -> Value {
        self.call(
            "POST",
            &self.session_path("/execute/async"),
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// Polls `script` (sync) every 100 ms until it answers something truthy, at most `timeout`;
    /// answers that value, or panics with `what` and the last answer.
    pub fn wait_for(&self, what: &str, script: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let value = self.execute(script, json!([]));
            let truthy = match &value {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
                Value::String(s) => !s.is_empty(),
                Value::Array(_) | Value::Object(_) => true,
            };
            if truthy {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}: last answer {value}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Drags the mouse with real pointer input (WebDriver actions) from `from` to `to`, in CSS
    /// pixels of the viewport, through a midpoint.
    pub fn drag(&self, from: (f64, f64), to: (f64, f64)) {
        let point = |(x, y): (f64, f64), duration: u64| {
            json!({ "type": "pointerMove", "duration": duration, "origin": "viewport",
                    "x": x.round() as i64, "y": y.round() as i64 })
        };
        let middle = ((from.0 + to.0) / 2.0, (from.1 + to.1) / 2.0);
        let actions = json!({ "actions": [{
            "type": "pointer", "id": "mouse", "parameters": { "pointerType": "mouse" },
            "actions": [
                point(from, 0),
                { "type": "pointerDown", "button": 0 },
                point(middle, 100),
                point(to, 100),
                { "type": "pointerUp", "button": 0 },
            ],
        }]});
        self.call("POST", &self.session_path("/actions"), Some(actions));
    }

    /// Browser console entries since the last call (chromedriver's log endpoint drains them).
    pub fn console(&self) -> Vec<Value> {
        let value = self.call(
            "POST",
            &self.session_path("/se/log"),
            Some(json!({ "type": "browser" })),
        );
        value.as_array().cloned().unwrap_or_default()
    }

    /// The console entries since the last call at level WARNING or SEVERE.
    pub fn console_errors(&self) -> Vec<Value> {
        self.console()
            .into_iter()
            .filter(|e| e["level"] == json!("SEVERE") || e["level"] == json!("WARNING"))
            .collect()
    }

    /// Proves the log channel is live: a deliberate `console.error` must be seen, so "no
    /// errors" cannot pass vacuously.
    pub fn assert_console_channel_works(&self) {
        self.execute("console.error('infersight-selftest')", json!([]));
        let seen = self.console().iter().any(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("infersight-selftest"))
        });
        assert!(
            seen,
            "the browser log did not report a deliberate console.error"
        );
    }

    /// A PNG of the viewport.
    pub fn screenshot(&self) -> Vec<u8> {
        let value = self.call("GET", &self.session_path("/screenshot"), None);
        base64_decode(value.as_str().expect("base64 screenshot"))
    }

    /// Checks `png` (size, bytes, colours decoded in the browser) and writes it to
    /// `dir/name`, so an all-white or all-black screenshot fails without a PNG decoder.
    pub fn check_and_save_screenshot(&self, png: &[u8], dir: &Path, name: &str) {
        let (w, h) = png_size(png);
        assert!(w >= 1000 && h >= 600, "{name}: {w}×{h}");
        assert!(png.len() > 20_000, "{name}: only {} bytes", png.len());
        std::fs::write(dir.join(name), png).unwrap();
        let data_url = format!("data:image/png;base64,{}", base64_encode(png));
        let decoded = self.execute_async(COUNT_COLOURS, json!([data_url]));
        assert!(decoded.get("error").is_none(), "{name}: {decoded}");
        let colours = decoded["colours"].as_u64().unwrap();
        assert!(colours > 50, "{name} has only {colours} colours");
    }
}

/// `target/{name}` of the workspace, created; `manifest_dir` is the calling crate's
/// `CARGO_MANIFEST_DIR` (crates live at `crates/NAME`).
pub fn screenshot_dir(manifest_dir: &str, name: &str) -> PathBuf {
    let dir = Path::new(manifest_dir).join("../../target").join(name);
    std::fs::create_dir_all(&dir).expect("screenshot folder");
    dir
}

pub fn base64_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut buffer = 0u32;
    let mut bits = 0;
    for byte in text.bytes() {
        let v = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\n' | b'\r' => continue,
            other => panic!("not base64: {other}"),
        };
        buffer = (buffer << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
        }
    }
    out
}

pub fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Width and height from a PNG's IHDR.
pub fn png_size(png: &[u8]) -> (u32, u32) {
    assert!(png.len() > 24, "PNG too short");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&png[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&png[16..20]), be(&png[20..24]))
}

/// Reads a PNG (a data URL, the first argument) back in the browser and counts its distinct
/// colours (sampled). Run with [`Driver::execute_async`].
pub const COUNT_COLOURS: &str = r#"
const done = arguments[arguments.length - 1];
const img = new Image();
img.onload = () => {
  const canvas = document.createElement('canvas');
  canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
  const g = canvas.getContext('2d');
  g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, canvas.width, canvas.height).data;
  const seen = new Set();
  for (let i = 0; i < d.length && seen.size < 10000; i += 4 * 3) {
    seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
  }
  done({ width: img.naturalWidth, height: img.naturalHeight, colours: seen.size });
};
img.onerror = () => done({ error: 'the PNG did not decode' });
img.src = arguments[0];
"#;
