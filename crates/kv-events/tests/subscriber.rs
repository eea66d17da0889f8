//! The Rust subscriber against a scripted publisher (PUB + ROUTER replay, the publisher's
//! framing): a late joiner gets the batches it missed from the replay socket, in order, before
//! the live one; a sequence number that goes back (a restarted replica) gives `Reset` first.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use pagoda_core::engine::KvEventBatch;
use pagoda_core::kv::KvEvent;
use pagoda_kv_events::msgpack::encode_batch;
use pagoda_kv_events::{END_SEQ, SubscribeTo, SubscriberEvent, subscribe};
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use pagoda_testkit::free_port;

fn batch(ts: f64) -> Vec<u8> {
    encode_batch(&KvEventBatch {
        ts,
        events: vec![KvEvent::AllBlocksCleared],
    })
}

type Buffer = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

async fn serve_replay(mut router: RouterSocket, buffer: Buffer) {
    while let Ok(m) = router.recv().await {
        let f = m.into_vec();
        let start = u64::from_be_bytes(<[u8; 8]>::try_from(f[2].as_ref()).unwrap());
        let items: Vec<_> = buffer.lock().unwrap().clone();
        for (s, p) in items.into_iter().filter(|(s, _)| *s >= start) {
            let frames: Vec<Bytes> = vec![
                f[0].clone(),
                Bytes::new(),
                s.to_be_bytes().to_vec().into(),
                p.into(),
            ];
            router
                .send(ZmqMessage::try_from(frames).unwrap())
                .await
                .unwrap();
        }
        let end: Vec<Bytes> = vec![
            f[0].clone(),
            Bytes::new(),
            END_SEQ.to_vec().into(),
            Bytes::new(),
        ];
        router
            .send(ZmqMessage::try_from(end).unwrap())
            .await
            .unwrap();
    }
}

async fn publish(sock: &mut PubSocket, seq: u64, payload: Vec<u8>) {
    let frames: Vec<Bytes> = vec![
        Bytes::from_static(b"kv"),
        seq.to_be_bytes().to_vec().into(),
        payload.into(),
    ];
    sock.send(ZmqMessage::try_from(frames).unwrap())
        .await
        .unwrap();
}

async fn next_ts(rx: &mut tokio::sync::mpsc::Receiver<SubscriberEvent>) -> Option<f64> {
    match tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
    {
        Some(SubscriberEvent::Batch(b)) => Some(b.ts),
        Some(SubscriberEvent::Reset) => None,
        None => panic!("the subscriber ended"),
    }
}

#[tokio::test]
async fn late_joiners_replay_and_restarts_reset() {
    let (port, replay_port) = (free_port(), free_port());
    let mut pub_socket = PubSocket::new();
    pub_socket
        .bind(&format!("tcp://127.0.0.1:{port}"))
        .await
        .unwrap();
    let mut router = RouterSocket::new();
    router
        .bind(&format!("tcp://127.0.0.1:{replay_port}"))
        .await
        .unwrap();
    let buffer: Buffer = Arc::new(Mutex::new((0..3).map(|s| (s, batch(s as f64))).collect()));
    tokio::spawn(serve_replay(router, Arc::clone(&buffer)));

    let mut rx = subscribe(SubscribeTo {
        endpoint: format!("tcp://127.0.0.1:{port}"),
        replay_endpoint: Some(format!("tcp://127.0.0.1:{replay_port}")),
        topic: "kv".into(),
    });
    // Batches 0..3 went out before anyone listened; 3 is live (sent until the SUB has joined).
    buffer.lock().unwrap().push((3, batch(3.0)));
    let mut got = Vec::new();
    while got.len() < 4 {
        publish(&mut pub_socket, 3, batch(3.0)).await;
        while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(1000), rx.recv()).await
        {
            match ev {
                SubscriberEvent::Batch(b) => got.push(b.ts),
                SubscriberEvent::Reset => panic!("no reset expected yet"),
            }
        }
    }
    assert_eq!(got, [0.0, 1.0, 2.0, 3.0]);

    // The replica restarts: its numbering starts again at 0.
    *buffer.lock().unwrap() = vec![(0, batch(10.0))];
    publish(&mut pub_socket, 0, batch(10.0)).await;
    assert_eq!(next_ts(&mut rx).await, None, "a reset comes first");
    assert_eq!(next_ts(&mut rx).await, Some(10.0));
}
