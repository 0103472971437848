//! Helpers of the server tests: real `cudaperf serve` / `cudaperf node` processes, a real
//! `redis-server` on a free loopback port, a blocking HTTP client. Every wait is bounded.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The crate root.
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The `cudaperf` binary.
pub fn cudaperf_bin() -> PathBuf {
    std::env::var_os("CUDAPERF_WORKER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cudaperf")))
}

/// A child process whose stdout and stderr lines are collected.
pub struct Proc {
    pub child: Child,
    pub name: String,
    lines: Arc<Mutex<Vec<String>>>,
    stdout_rx: Receiver<String>,
}

impl Proc {
    /// Starts `cmd` with its output collected.
    pub fn spawn(name: &str, mut cmd: Command) -> Proc {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, stdout_rx) = channel();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let l1 = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l1.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        let l2 = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                l2.lock().unwrap().push(line);
            }
        });
        Proc {
            child,
            name: name.into(),
            lines,
            stdout_rx,
        }
    }

    /// The first stdout line, within `timeout`.
    pub fn first_stdout_line(&self, timeout: Duration) -> String {
        self.stdout_rx.recv_timeout(timeout).unwrap_or_else(|_| {
            panic!(
                "{} printed nothing within {timeout:?}; output:\n{}",
                self.name,
                self.output()
            )
        })
    }

    /// Everything printed so far.
    pub fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Waits until a printed line satisfies `f`; returns it.
    pub fn wait_for_line(&self, timeout: Duration, f: impl Fn(&str) -> bool) -> Option<String> {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if let Some(l) = self.lines.lock().unwrap().iter().find(|l| f(l)) {
                return Some(l.clone());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// Sends a signal.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on the pid of a child this test started.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// Waits for the exit status, within `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cudaperf serve --port 0 --tasks fixtures/tasks --no-gpu ARGS`; returns it and its URL.
pub fn start_serve(args: &[&str]) -> (Proc, String) {
    let mut cmd = Command::new(cudaperf_bin());
    cmd.current_dir(manifest_dir())
        .env("CUDAPERF_WORKER", cudaperf_bin())
        .env("CUDAPERF_LOG", "info")
        .args([
            "serve",
            "--port",
            "0",
            "--tasks",
            "fixtures/tasks",
            "--no-gpu",
        ])
        .args(args);
    let p = Proc::spawn("cudaperf serve", cmd);
    let line = p.first_stdout_line(Duration::from_secs(60));
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in `{line}`"))
        .to_string();
    (p, url)
}

/// `cudaperf node --queue URL --tasks fixtures/tasks --no-gpu --name NAME ARGS`, started.
pub fn start_node(queue: &str, name: &str, args: &[&str]) -> Proc {
    let mut cmd = Command::new(cudaperf_bin());
    cmd.current_dir(manifest_dir())
        .env("CUDAPERF_WORKER", cudaperf_bin())
        .env("CUDAPERF_LOG", "info")
        .args([
            "node",
            "--queue",
            queue,
            "--tasks",
            "fixtures/tasks",
            "--no-gpu",
            "--name",
            name,
        ])
        .args(args);
    let p = Proc::spawn(&format!("node {name}"), cmd);
    let line = p.first_stdout_line(Duration::from_secs(60));
    assert!(line.contains("consuming"), "unexpected node banner: {line}");
    p
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A real `redis-server` in a temporary folder, without persistence.
pub struct Redis {
    pub proc: Proc,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    /// Starts one on `port` (a free one if `None`) and waits until it answers.
    pub fn start(port: Option<u16>) -> Redis {
        let bin = which("redis-server").unwrap_or_else(|| {
            panic!(
                "redis-server is not installed: `apt-get install -y redis-server` (.ci/run does)"
            )
        });
        let port = port.unwrap_or_else(free_port);
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(bin);
        cmd.current_dir(dir.path()).args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
        ]);
        let r = Redis {
            proc: Proc::spawn("redis-server", cmd),
            port,
            _dir: dir,
        };
        let end = Instant::now() + Duration::from_secs(15);
        while Instant::now() < end {
            if r.ping() {
                return r;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "redis-server did not answer on {port}:\n{}",
            r.proc.output()
        );
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Whether it answers PING.
    pub fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        if s.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 16];
        matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
    }

    /// A synchronous connection for checks.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap()
    }

    /// Kills it (SIGKILL) and waits for the exit.
    pub fn kill(mut self) {
        self.proc.signal(libc::SIGKILL);
        let _ = self.proc.wait_exit(Duration::from_secs(10));
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| PathBuf::from(d).join(name))
        .chain([PathBuf::from("/usr/bin").join(name)])
        .find(|p| p.is_file())
}

/// A blocking client that returns every status as a response.
pub fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

/// A response: status, `Retry-After`, body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub body: String,
}

impl Answer {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

fn answer(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Answer {
    let mut r = r.unwrap_or_else(|e| panic!("request failed: {e}"));
    Answer {
        status: r.status().as_u16(),
        retry_after: r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(String::from),
        body: r
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .unwrap_or_default(),
    }
}

/// POST raw bytes.
pub fn post(agent: &ureq::Agent, url: &str, body: &[u8]) -> Answer {
    answer(
        agent
            .post(url)
            .header("content-type", "application/json")
            .send(body),
    )
}

/// POST JSON.
pub fn post_json(agent: &ureq::Agent, url: &str, body: &serde_json::Value) -> Answer {
    post(agent, url, body.to_string().as_bytes())
}

/// GET.
pub fn get(agent: &ureq::Agent, url: &str) -> Answer {
    answer(agent.get(url).call())
}

/// A fenced completion of a source.
pub fn fenced(source: &str) -> String {
    format!("Here it is.\n\n```cuda\n{source}\n```\n")
}

/// The vector_add reference with a unique comment, so that it misses every cache and
/// really compiles.
pub fn fresh_vector_add(tag: &str) -> String {
    let src =
        std::fs::read_to_string(manifest_dir().join("fixtures/tasks/vector_add/reference.cu"))
            .unwrap();
    fenced(&format!("// fresh {tag}\n{src}"))
}

/// The value of a counter (summed over label sets) in Prometheus text.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
