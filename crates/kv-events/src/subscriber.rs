//! The subscriber side of the stream (a router's or an indexer's): SUB to a replica's
//! publisher, events handed on in sequence order with no gaps. A gap (a late join, a dropped
//! message) is filled from the replay socket; a sequence number that goes back means the
//! replica restarted, so the consumer is told to drop what it knew first.

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

use crate::END_SEQ;
use crate::decode::{WireBatch, decode_batch};

/// What the consumer is told, in order.
#[derive(Debug)]
pub enum SubscriberEvent {
    /// The next batch in sequence.
    Batch(WireBatch),
    /// Forget every block learnt so far: the replica restarted (or a gap could not be filled),
    /// what follows rebuilds the state from its first event.
    Reset,
}

/// Where a replica publishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscribeTo {
    /// The PUB endpoint, `tcp://host:port`.
    pub endpoint: String,
    /// The ROUTER replay endpoint, if the replica has one.
    pub replay_endpoint: Option<String>,
    /// The topic (first frame) to subscribe to; empty: all.
    pub topic: String,
}

/// How long a replay may take before the subscriber gives up on it (and resets).
const REPLAY_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between connection attempts to a replica that is not up.
const RECONNECT: Duration = Duration::from_millis(500);

/// Starts a task on the current tokio runtime that follows `to` and sends its events to the
/// returned receiver; the task ends when the receiver is dropped.
pub fn subscribe(to: SubscribeTo) -> mpsc::Receiver<SubscriberEvent> {
    let (tx, rx) = mpsc::channel(1024);
    tokio::spawn(follow(to, tx));
    rx
}

async fn follow(to: SubscribeTo, tx: mpsc::Sender<SubscriberEvent>) {
    // The next sequence number to hand on; None before the first message.
    let mut next: Option<u64> = None;
    while !tx.is_closed() {
        let mut sub = SubSocket::new();
        let connected = async {
            sub.connect(&to.endpoint).await?;
            sub.subscribe(&to.topic).await
        };
        if let Err(e) = connected.await {
            tracing::debug!(endpoint = to.endpoint, "KV events: cannot subscribe: {e}");
            tokio::time::sleep(RECONNECT).await;
            continue;
        }
        loop {
            let msg = tokio::select! {
                m = sub.recv() => m,
                _ = tx.closed() => return,
            };
            let frames = match msg {
                Ok(m) => m.into_vec(),
                Err(e) => {
                    tracing::debug!(endpoint = to.endpoint, "KV events: {e}");
                    break;
                }
            };
            let [_, seq, payload] = frames.as_slice() else {
                continue;
            };
            let Ok(seq) = <[u8; 8]>::try_from(seq.as_ref()).map(u64::from_be_bytes) else {
                continue;
            };
            if !on_message(&to, &tx, &mut next, seq, payload).await {
                return;
            }
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

/// Hands on `payload` (number `seq`) after whatever must come before it; false once the
/// consumer is gone.
async fn on_message(
    to: &SubscribeTo,
    tx: &mpsc::Sender<SubscriberEvent>,
    next: &mut Option<u64>,
    seq: u64,
    payload: &[u8],
) -> bool {
    let expected = match *next {
        // A first message or a restart: everything the replica still buffers comes first.
        None => 0,
        Some(n) if seq < n => {
            if tx.send(SubscriberEvent::Reset).await.is_err() {
                return false;
            }
            0
        }
        Some(n) => n,
    };
    let mut at = expected;
    if seq > at {
        match replay(to, at).await {
            Some(batches) => {
                for (s, p) in batches {
                    if s == at && s < seq {
                        if !hand_on(tx, &p).await {
                            return false;
                        }
                        at += 1;
                    }
                }
            }
            None => tracing::debug!(endpoint = to.endpoint, "KV events: no replay"),
        }
        if at < seq && next.is_some() {
            // A hole nobody can fill: the index may hold blocks that are gone, so start over
            // from what comes now.
            if tx.send(SubscriberEvent::Reset).await.is_err() {
                return false;
            }
        }
    }
    *next = Some(seq + 1);
    hand_on(tx, payload).await
}

async fn hand_on(tx: &mpsc::Sender<SubscriberEvent>, payload: &[u8]) -> bool {
    match decode_batch(payload) {
        Ok(b) => tx.send(SubscriberEvent::Batch(b)).await.is_ok(),
        Err(e) => {
            tracing::warn!("KV events: {e}");
            !tx.is_closed()
        }
    }
}

/// The replica's buffered batches from `start` on, in order; None when there is no replay
/// socket or it does not answer in time.
async fn replay(to: &SubscribeTo, start: u64) -> Option<Vec<(u64, Vec<u8>)>> {
    let endpoint = to.replay_endpoint.as_deref()?;
    let run = async {
        let mut dealer = DealerSocket::new();
        dealer.connect(endpoint).await.ok()?;
        let req: Vec<Bytes> = vec![Bytes::new(), start.to_be_bytes().to_vec().into()];
        dealer.send(ZmqMessage::try_from(req).ok()?).await.ok()?;
        let mut out = Vec::new();
        loop {
            let frames = dealer.recv().await.ok()?.into_vec();
            let [_, seq, payload] = frames.as_slice() else {
                return None;
            };
            if seq.as_ref() == END_SEQ {
                return Some(out);
            }
            let s = u64::from_be_bytes(<[u8; 8]>::try_from(seq.as_ref()).ok()?);
            out.push((s, payload.to_vec()));
        }
    };
    tokio::time::timeout(REPLAY_TIMEOUT, run)
        .await
        .ok()
        .flatten()
}
