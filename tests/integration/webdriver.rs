//! A small W3C WebDriver client for the UI tests, over a blocking HTTP/1.1 client on
//! `std::net`. WebDriver is plain JSON over HTTP, so the handful of commands the tests
//! need cost ~150 lines here instead of an async client stack (hyper, TLS, cookies) in
//! every test build. It drives Debian's `chromedriver`, which starts `chromium`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A blocking HTTP request to `127.0.0.1:port`; returns the status and body.
pub fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> std::io::Result<(u16, Vec<u8>)> {
    http_with(port, method, path, &[], body)
}

/// [`http`] with extra request headers (e.g. `Authorization`).
pub fn http_with(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&Value>) -> std::io::Result<(u16, Vec<u8>)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nAccept: */*\r\n");
    for (name, value) in headers {
        req += &format!("{name}: {value}\r\n");
    }
    if body.is_some() {
        req += &format!("Content-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n", payload.len());
    }
    req += "\r\n";
    stream.write_all(req.as_bytes())?;
    stream.write_all(payload.as_bytes())?;
    // chromedriver keeps the connection open despite `Connection: close`, so the body
    // ends where Content-Length (or the last chunk) says, not at EOF.
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let mut raw = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    let mut parsed: Option<(usize, String)> = None;
    loop {
        if let Some((split, head)) = &parsed {
            let body = &raw[split + 4..];
            let lower = head.to_ascii_lowercase();
            let length = lower.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse::<usize>().ok());
            let chunked = lower.lines().any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
            let done = match length {
                Some(n) => body.len() >= n,
                None if chunked => dechunk(body).is_some(),
                None => false,
            };
            if done {
                let status: u16 = head.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| bad("no status"))?;
                let body = match length {
                    Some(n) => body[..n].to_vec(),
                    None => dechunk(body).unwrap_or_default(),
                };
                return Ok((status, body));
            }
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            let (split, head) = parsed.ok_or_else(|| bad("connection closed before the headers"))?;
            let status: u16 = head.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| bad("no status"))?;
            return Ok((status, raw[split + 4..].to_vec()));
        }
        raw.extend_from_slice(&buf[..n]);
        if parsed.is_none()
            && let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n")
        {
            parsed = Some((split, String::from_utf8_lossy(&raw[..split]).to_string()));
        }
    }
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&data[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// Where Chromium and its driver are, or why the UI tests cannot run here.
pub fn find_chromium() -> Result<(PathBuf, PathBuf), String> {
    let browser = PathBuf::from(std::env::var("KAAS_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    let driver = PathBuf::from(std::env::var("KAAS_CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into()));
    for p in [&browser, &driver] {
        if !p.exists() {
            return Err(format!("{} is missing; `apt-get install -y chromium chromium-driver` (.ci/run does)", p.display()));
        }
    }
    Ok((browser, driver))
}

/// A running chromedriver and one browser session; both end when this is dropped.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub fn start(browser: &Path, driver: &Path, width: u32, height: u32) -> Browser {
        let port = free_port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", driver.display()));
        let profile = tempfile::tempdir().unwrap();
        let mut me = Browser { driver: child, port, session: String::new(), _profile: profile };
        let deadline = Instant::now() + Duration::from_secs(20);
        while http(port, "GET", "/status", None).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not answer on port {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            &format!("--window-size={width},{height}"),
            &format!("--user-data-dir={}", me._profile.path().display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "unhandledPromptBehavior": "ignore",
            "goog:chromeOptions": {"binary": browser.to_string_lossy(), "args": args},
        }}});
        let v = me.raw("POST", "/session", Some(&caps)).unwrap_or_else(|e| panic!("new session: {e}"));
        me.session = v["sessionId"].as_str().expect("a session id").to_string();
        me
    }

    /// One WebDriver command; `Err` carries the WebDriver error (e.g. `no such alert`).
    pub fn raw(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let (status, bytes) = http(self.port, method, path, body).map_err(|e| format!("{method} {path}: {e}"))?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| format!("{method} {path}: not JSON ({e})"))?;
        if status != 200 {
            return Err(format!("{} ({})", v["value"]["error"].as_str().unwrap_or("error"), v["value"]["message"].as_str().unwrap_or("")));
        }
        Ok(v["value"].clone())
    }

    pub fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let full = format!("/session/{}{path}", self.session);
        self.raw(method, &full, body.as_ref()).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    /// Runs a function body in the page: `arguments[i]` are `args`.
    pub fn js(&self, script: &str, args: Value) -> Value {
        self.cmd("POST", "/execute/sync", Some(json!({ "script": script, "args": args })))
    }

    /// Runs an async script: it calls `arguments[arguments.length - 1](result)`.
    pub fn js_async(&self, script: &str, args: Value) -> Value {
        self.cmd("POST", "/execute/async", Some(json!({ "script": script, "args": args })))
    }

    /// Polls a script until it returns something truthy; panics after 20 s.
    pub fn wait_for(&self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let v = self.js(script, json!([]));
            if !(v.is_null() || v == json!(false) || v == json!(0) || v == json!("")) {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// The WebDriver id of the first element matching a CSS selector.
    pub fn find(&self, css: &str) -> String {
        let v = self.cmd("POST", "/element", Some(json!({"using": "css selector", "value": css})));
        v.as_object().and_then(|o| o.values().next()).and_then(|x| x.as_str()).expect("an element id").to_string()
    }

    pub fn click(&self, css: &str) {
        let id = self.find(css);
        self.cmd("POST", &format!("/element/{id}/click"), Some(json!({})));
    }

    /// Types keys (WebDriver key codes, e.g. "\u{E014}" = ArrowRight) into an element.
    pub fn keys(&self, css: &str, text: &str) {
        let id = self.find(css);
        self.cmd("POST", &format!("/element/{id}/value"), Some(json!({ "text": text })));
    }

    /// The open alert's text, if an alert or other dialog is open.
    pub fn alert_text(&self) -> Option<String> {
        let path = format!("/session/{}/alert/text", self.session);
        self.raw("GET", &path, None).ok().map(|v| v.as_str().unwrap_or_default().to_string())
    }

    /// A PNG of the whole page, beyond the window's height.
    pub fn screenshot(&self, file: &Path) {
        use base64::Engine;
        let v = self.cdp("Page.captureScreenshot", json!({"format": "png", "captureBeyondViewport": true}));
        let png = base64::engine::general_purpose::STANDARD.decode(v["data"].as_str().expect("base64 PNG")).expect("valid base64");
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(file, png).unwrap();
    }

    /// A Chrome DevTools command through chromedriver (e.g. `Network.clearBrowserCache`).
    pub fn cdp(&self, cmd: &str, params: Value) -> Value {
        self.cmd("POST", "/goog/cdp/execute", Some(json!({ "cmd": cmd, "params": params })))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = http(self.port, "DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
