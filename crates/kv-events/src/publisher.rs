//! The `pagoda-kv-events` thread: takes the engine's batches off the bounded queue, numbers
//! them, publishes each on a PUB socket as (topic, 8-byte big-endian sequence number, msgpack)
//! and keeps the last `buffer_steps` for the ROUTER replay socket, as vLLM's ZmqEventPublisher.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bytes::Bytes;
use pagoda_core::engine::{KvEventQueue, kv_event_queue};
use tokio::sync::mpsc::Receiver;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use crate::config::{KvEventsConfig, tcp_address};
use crate::msgpack::encode_batch;

pub use crate::END_SEQ;

/// Why publishing could not start.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot bind the KV events socket {endpoint}: {message}")]
    Bind { endpoint: String, message: String },
    #[error("cannot start the KV events thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// A running publisher. Dropping the engine's queue ends the thread.
#[derive(Debug)]
pub struct KvEventsPublisher {
    /// Batches the engine dropped because the queue was full (each followed by a resync).
    pub overflows: Arc<AtomicU64>,
    /// Batches published so far (the next sequence number).
    pub published: Arc<AtomicU64>,
    /// Where the sockets are bound (the port a `:0` endpoint got).
    pub endpoint: String,
    pub replay_endpoint: Option<String>,
    thread: Option<JoinHandle<()>>,
}

type Buffer = Arc<Mutex<VecDeque<(u64, Vec<u8>)>>>;

impl KvEventsPublisher {
    /// Binds the sockets and starts the thread; the queue goes to the engine
    /// (`EngineHandle::start_with_events`).
    pub fn start(config: &KvEventsConfig) -> Result<(Self, KvEventQueue), PublishError> {
        let endpoint = tcp_address(&config.endpoint)?;
        let replay = config
            .replay_endpoint
            .as_deref()
            .map(tcp_address)
            .transpose()?;
        let (queue, rx, overflows) = kv_event_queue(config.max_queue_size);
        let published = Arc::new(AtomicU64::new(0));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let cfg = config.clone();
        let count = Arc::clone(&published);
        let thread = std::thread::Builder::new()
            .name("pagoda-kv-events".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(PublishError::Thread(e)));
                        return;
                    }
                };
                rt.block_on(run(cfg, endpoint, replay, rx, count, ready_tx));
            })?;
        let (endpoint, replay_endpoint) = ready_rx.recv().map_err(|_| {
            PublishError::Thread(std::io::Error::other("the KV events thread ended"))
        })??;
        Ok((
            Self {
                overflows,
                published,
                endpoint,
                replay_endpoint,
                thread: Some(thread),
            },
            queue,
        ))
    }

    /// Waits for the thread, which ends once the engine's queue is dropped and drained.
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

type Ready = std::sync::mpsc::Sender<Result<(String, Option<String>), PublishError>>;

async fn run(
    cfg: KvEventsConfig,
    endpoint: String,
    replay: Option<String>,
    mut rx: Receiver<pagoda_core::engine::KvEventBatch>,
    published: Arc<AtomicU64>,
    ready: Ready,
) {
    let bind_err = |endpoint: &str, e: zeromq::ZmqError| PublishError::Bind {
        endpoint: endpoint.to_string(),
        message: e.to_string(),
    };
    let mut pub_socket = PubSocket::new();
    let bound = match pub_socket.bind(&endpoint).await {
        Ok(ep) => ep.to_string(),
        Err(e) => {
            let _ = ready.send(Err(bind_err(&endpoint, e)));
            return;
        }
    };
    let buffer: Buffer = Arc::new(Mutex::new(VecDeque::new()));
    let mut replay_bound = None;
    if let Some(r) = replay {
        let mut router = RouterSocket::new();
        match router.bind(&r).await {
            Ok(ep) => replay_bound = Some(ep.to_string()),
            Err(e) => {
                let _ = ready.send(Err(bind_err(&r, e)));
                return;
            }
        }
        tokio::spawn(serve_replay(router, Arc::clone(&buffer)));
    }
    let _ = ready.send(Ok((bound, replay_bound)));
    let topic = cfg.topic.into_bytes();
    let mut seq = 0u64;
    while let Some(batch) = rx.recv().await {
        let payload = encode_batch(&batch);
        let frames: Vec<Bytes> = vec![
            topic.clone().into(),
            seq.to_be_bytes().to_vec().into(),
            payload.clone().into(),
        ];
        if let Ok(msg) = ZmqMessage::try_from(frames)
            && let Err(e) = pub_socket.send(msg).await
        {
            tracing::warn!("KV events: publish failed: {e}");
        }
        if cfg.buffer_steps > 0
            && let Ok(mut b) = buffer.lock()
        {
            b.push_back((seq, payload));
            while b.len() > cfg.buffer_steps {
                b.pop_front();
            }
        }
        seq += 1;
        published.store(seq, Ordering::Release);
    }
}

/// Answers each replay request `[identity, "", start]` with every buffered batch from `start`
/// on, `[identity, "", seq, payload]`, then `[identity, "", END_SEQ, ""]`.
async fn serve_replay(mut router: RouterSocket, buffer: Buffer) {
    loop {
        let msg = match router.recv().await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("KV events: replay socket: {e}");
                return;
            }
        };
        let frames = msg.into_vec();
        let [identity, _, start] = frames.as_slice() else {
            tracing::warn!("KV events: a replay request of {} frames", frames.len());
            continue;
        };
        let Ok(start) = <[u8; 8]>::try_from(start.as_ref()) else {
            tracing::warn!("KV events: a replay start that is not 8 bytes");
            continue;
        };
        let start = u64::from_be_bytes(start);
        let batches: Vec<(u64, Vec<u8>)> = match buffer.lock() {
            Ok(b) => b.iter().filter(|(s, _)| *s >= start).cloned().collect(),
            Err(_) => Vec::new(),
        };
        let replies = batches
            .into_iter()
            .map(|(s, p)| (s.to_be_bytes().to_vec(), p))
            .chain(std::iter::once((END_SEQ.to_vec(), Vec::new())));
        for (s, p) in replies {
            let frames: Vec<Bytes> = vec![identity.clone(), Bytes::new(), s.into(), p.into()];
            if let Ok(m) = ZmqMessage::try_from(frames)
                && router.send(m).await.is_err()
            {
                break;
            }
        }
    }
}
