//! A pagoda server on a loopback port inside this process: what `pagoda chat` talks to without
//! `--url`, and what `pagoda profile` times served decode steps on. The same load and the same
//! router as `pagoda serve`; it stops when its handle is stopped or dropped.

use std::path::PathBuf;

use anyhow::Context;
use pagoda_model::EngineSetup;
use pagoda_server::ServerConfig;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub struct LocalServer {
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

/// Load `path` (blocking work off the runtime's threads) and serve it on a free loopback port.
pub async fn start(
    path: PathBuf,
    setup: EngineSetup,
    config: ServerConfig,
) -> anyhow::Result<LocalServer> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot listen on a loopback port")?;
    let addr = listener.local_addr()?;
    let state = tokio::task::spawn_blocking(move || pagoda_server::load(&path, &setup, config))
        .await
        .context("model loading panicked")?
        .context("cannot load the model")?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(pagoda_server::serve(listener, state, async {
        let _ = stopped.await;
    }));
    Ok(LocalServer {
        base_url: format!("http://{addr}"),
        stop: Some(stop),
        task: Some(task),
    })
}

impl LocalServer {
    /// Shut the server down and wait until it has (its engine with it).
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => Ok(task.await.context("the local server panicked")??),
            None => Ok(()),
        }
    }
}
