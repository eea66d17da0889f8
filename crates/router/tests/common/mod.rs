//! What the router's integration tests share: real `pagoda serve` replicas on loopback (SmolLM2,
//! `--threads 1`, 64 MiB of KV) as child processes, and an in-process router in front of them.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pagoda_router::RouterConfig;

pub const MODEL_NAME: &str = "SmolLM2-135M-Instruct.Q4_1";

pub fn model() -> PathBuf {
    let dir = match std::env::var_os("PAGODA_MODEL_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/pagoda/models"),
    };
    dir.join(format!("{MODEL_NAME}.gguf"))
}

/// `$PAGODA_BIN`, else `pagoda` next to this test's `deps/` directory.
fn pagoda_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("PAGODA_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("pagoda");
    assert!(
        bin.is_file(),
        "{} is missing: build it first (cargo build -p pagoda) or set PAGODA_BIN",
        bin.display()
    );
    bin
}

pub use pagoda_testkit::free_port;

/// A `pagoda serve` (or `pagoda router`) child process, killed when dropped.
pub struct Replica {
    child: Child,
    pub url: String,
}

impl Replica {
    /// A replica on `port` with `extra` arguments after the shared ones.
    pub fn spawn(port: u16, extra: &[String]) -> Self {
        let child = Command::new(pagoda_bin())
            .args(["serve", "--threads", "1", "--port", &port.to_string()])
            .args(["--kv-cache-memory", "64MiB", "--max-model-len", "2048"])
            .args(extra)
            .arg("--model")
            .arg(model())
            .env_remove("PAGODA_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    /// A `pagoda router` on `port` with `args`, its stderr (the log) written to `log`.
    pub fn router(port: u16, args: &[String], log: &std::path::Path) -> Self {
        let child = Command::new(pagoda_bin())
            .args(["router", "--port", &port.to_string()])
            .args(args)
            .env_remove("PAGODA_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    pub async fn wait_ready(&self, c: &reqwest::Client) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let r = c.get(format!("{}/ready", self.url)).send().await;
            if r.is_ok_and(|r| r.status() == 200) {
                return;
            }
            assert!(Instant::now() < deadline, "{} never got ready", self.url);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sends `sig` (`-TERM`, `-KILL`) to the process.
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serves a router built from `config` on a free port; its base URL.
pub async fn serve_router(config: RouterConfig) -> String {
    let r = pagoda_router::build(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(pagoda_router::serve(listener, r, std::future::pending()));
    url
}
