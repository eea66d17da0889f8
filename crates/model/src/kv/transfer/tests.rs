//! The transfer path end to end over loopback: a sender's blocks arrive whole and are
//! claimed; a foreign layout, a stall, a peer without the secret, a wrong secret, a replayed
//! connection and a tampered frame all import nothing and are counted.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pagoda_core::kv::{BlockHash, KvTier};

use super::{KvSecret, KvSender, KvTransferConfig, TransferStore};

fn config(timeout_ms: u64) -> KvTransferConfig {
    KvTransferConfig {
        role: pagoda_core::kv::KvRole::Decode,
        listen: "127.0.0.1:0".into(),
        timeout: Duration::from_millis(timeout_ms),
        buffer_bytes: 1 << 20,
        ttl: Duration::from_secs(60),
        model_identity: "m".into(),
        secret: None,
        counters: Default::default(),
    }
}

fn wait(mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_sent_transfer_is_claimed_whole_and_a_foreign_one_is_refused() {
    let c = config(5000);
    let store = TransferStore::open(&c, [1; 32], 8).unwrap_or_else(|e| panic!("{e}"));
    let addr = store.local_addr().to_string();
    let blocks: Vec<(BlockHash, Vec<u8>)> =
        (0..3u8).map(|i| (BlockHash([i; 32]), vec![i; 8])).collect();
    assert!(store.awaiting("t1"), "asked before anything arrived");
    let sender = KvSender::start([1; 32], 8, Duration::from_secs(5), None, Default::default())
        .unwrap_or_else(|e| panic!("{e}"));
    sender.send("t1".into(), addr.clone(), blocks.clone());
    wait(|| !store.awaiting("t1"));
    assert!(store.contains(&BlockHash([2; 32])));
    let ticket = store.prefetch(blocks.iter().map(|(k, _)| *k).collect());
    assert_eq!(store.poll(ticket), Some(3));
    assert_eq!(store.take_read(ticket), blocks);
    assert_eq!(c.counters.blocks_received.load(Ordering::Relaxed), 3);
    assert_eq!(c.counters.buffered_blocks.load(Ordering::Relaxed), 0);
    assert_eq!(c.counters.fallbacks.load(Ordering::Relaxed), 0);
    // Another model's layout: refused, and the request is told to prefill itself.
    let other = KvSender::start([2; 32], 8, Duration::from_secs(5), None, Default::default())
        .unwrap_or_else(|e| panic!("{e}"));
    other.send("t2".into(), addr, blocks);
    wait(|| c.counters.receives_failed.load(Ordering::Relaxed) == 1);
    assert!(!store.awaiting("t2"));
    assert!(!store.contains(&BlockHash([0; 32])));
    assert_eq!(c.counters.fallbacks.load(Ordering::Relaxed), 1);
    wait(|| c.counters.in_flight.load(Ordering::Relaxed) == 0);
}

#[test]
fn a_transfer_that_never_comes_times_out() {
    let c = config(50);
    let store = TransferStore::open(&c, [1; 32], 8).unwrap_or_else(|e| panic!("{e}"));
    assert!(store.awaiting("never"));
    std::thread::sleep(Duration::from_millis(80));
    assert!(!store.awaiting("never"));
    assert!(!store.awaiting("never"), "told once, counted once");
    assert_eq!(c.counters.fallbacks.load(Ordering::Relaxed), 1);
}

fn secret(b: u8) -> Option<KvSecret> {
    Some(KvSecret::from_bytes(&[b; 32]).unwrap_or_else(|e| panic!("{e}")))
}

fn blocks() -> Vec<(BlockHash, Vec<u8>)> {
    (0..3u8).map(|i| (BlockHash([i; 32]), vec![i; 8])).collect()
}

/// A store with `secret` and a sender with `sender_secret` sending one transfer `id`
/// (through `via`, a relay, when given); waits until the store has settled it.
fn push(
    store: &TransferStore,
    sender_secret: Option<KvSecret>,
    id: &str,
    via: Option<String>,
) -> Arc<super::KvTransferCounters> {
    let counters: Arc<super::KvTransferCounters> = Default::default();
    let sender = KvSender::start(
        [1; 32],
        8,
        Duration::from_secs(5),
        sender_secret,
        Arc::clone(&counters),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let addr = via.unwrap_or_else(|| store.local_addr().to_string());
    sender.send(id.into(), addr, blocks());
    wait(|| !store.awaiting(id));
    drop(sender);
    counters
}

fn authenticated(c: &KvTransferConfig) -> TransferStore {
    let c = KvTransferConfig {
        secret: secret(7),
        ..c.clone()
    };
    TransferStore::open(&c, [1; 32], 8).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn peers_with_the_secret_transfer_and_others_import_nothing() {
    let c = config(300);
    let store = authenticated(&c);
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    // No secret: the sender writes a Begin, the store wants a handshake.
    push(&store, None, "plain", None);
    assert!(!store.contains(&BlockHash([0; 32])));
    // A wrong secret: the sender sees the store's proof fail and sends nothing.
    let sent = push(&store, secret(8), "wrong", None);
    assert_eq!(
        get(&sent.auth_failures),
        1,
        "the sender refused the listener"
    );
    assert_eq!(get(&sent.blocks_sent), 0);
    assert!(!store.contains(&BlockHash([0; 32])));
    wait(|| get(&c.counters.auth_failures) == 2);
    assert_eq!(get(&c.counters.blocks_received), 0);
    // The right secret: all blocks arrive.
    push(&store, secret(7), "good", None);
    assert!(store.contains(&BlockHash([2; 32])));
    assert_eq!(get(&c.counters.blocks_received), 3);
    assert_eq!(get(&c.counters.auth_failures), 2);
}

#[test]
fn a_store_without_a_secret_refuses_an_authenticating_peer() {
    let c = config(300);
    let store = TransferStore::open(&c, [1; 32], 8).unwrap_or_else(|e| panic!("{e}"));
    let sent = push(&store, secret(7), "t", None);
    assert_eq!(sent.blocks_sent.load(Ordering::Relaxed), 0);
    assert!(!store.contains(&BlockHash([0; 32])));
    assert_eq!(c.counters.auth_failures.load(Ordering::Relaxed), 1);
}

/// Relays each connection to `to`, passing `edit` every chunk the sender writes (with its
/// offset in the stream) and keeping a copy of what was sent.
fn relay(to: String, edit: fn(usize, &mut [u8])) -> (String, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let addr = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("{e}"))
        .to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&seen);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let (Ok(mut from), Ok(mut out)) = (conn, TcpStream::connect(&to)) else {
                continue;
            };
            let (Ok(mut back_from), Ok(mut back_to)) = (out.try_clone(), from.try_clone()) else {
                continue;
            };
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut back_from, &mut back_to);
            });
            let mut buf = [0u8; 4096];
            let mut at = 0;
            while let Ok(n @ 1..) = from.read(&mut buf) {
                edit(at, &mut buf[..n]);
                if let Ok(mut k) = keep.lock() {
                    k.extend_from_slice(&buf[..n]);
                }
                at += n;
                if out.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = out.shutdown(std::net::Shutdown::Write);
        }
    });
    (addr, seen)
}

#[test]
fn a_replayed_connection_or_a_tampered_frame_imports_nothing() {
    let c = config(300);
    let store = authenticated(&c);
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    // A good transfer through a relay that records it.
    let (via, seen) = relay(store.local_addr().to_string(), |_, _| {});
    push(&store, secret(7), "recorded", Some(via));
    assert_eq!(get(&c.counters.blocks_received), 3);
    let recorded = seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert!(recorded.len() > 200, "{} bytes", recorded.len());
    // Replayed byte for byte on a new connection: the store's fresh nonce fails the proof.
    let mut replay = TcpStream::connect(store.local_addr()).unwrap_or_else(|e| panic!("{e}"));
    let _ = replay.write_all(&recorded);
    let _ = replay.shutdown(std::net::Shutdown::Write);
    let _ = replay.read_to_end(&mut Vec::new());
    wait(|| get(&c.counters.auth_failures) == 1);
    // A byte flipped in the first block's payload, past the handshake (36 + 36 bytes)
    // and the Begin frame: the frame's tag fails.
    let (via, _) = relay(store.local_addr().to_string(), |at, buf| {
        let target = 200;
        if (at..at + buf.len()).contains(&target) {
            buf[target - at] ^= 1;
        }
    });
    push(&store, secret(7), "tampered", Some(via));
    wait(|| get(&c.counters.auth_failures) == 2);
    assert_eq!(get(&c.counters.blocks_received), 3, "nothing more imported");
}

#[test]
fn a_transfer_id_received_twice_is_refused() {
    let c = config(2000);
    let store = TransferStore::open(&c, [1; 32], 8).unwrap_or_else(|e| panic!("{e}"));
    push(&store, None, "once", None);
    let before = c.counters.receives_failed.load(Ordering::Relaxed);
    let sender = KvSender::start([1; 32], 8, Duration::from_secs(5), None, Default::default())
        .unwrap_or_else(|e| panic!("{e}"));
    sender.send("once".into(), store.local_addr().to_string(), blocks());
    wait(|| c.counters.receives_failed.load(Ordering::Relaxed) == before + 1);
    assert_eq!(c.counters.blocks_received.load(Ordering::Relaxed), 3);
}
