//! KV transfer throughput over loopback, with and without authentication (the cost of the
//! handshake and of an HMAC-SHA256 tag per frame against the checksum): a prefill replica's
//! sender thread ships one prompt's blocks to a decode replica's store and the clock stops
//! when the whole transfer has arrived and been checked.
//!
//! `cargo bench -p pagoda-benches --bench kv_transfer`: 64 blocks of 360 KiB (SmolLM2's f16
//! block, 23 MiB) per transfer; criterion's throughput is bytes of payload per second.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pagoda_core::kv::{BlockHash, KvRole, KvTier};
use pagoda_model::kv::transfer::{KvSender, TransferStore};
use pagoda_model::{KvSecret, KvTransferConfig};

const BLOCKS: usize = 64;
const PAYLOAD: usize = 360 << 10;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("kv_transfer");
    g.throughput(Throughput::Bytes((BLOCKS * PAYLOAD) as u64));
    g.sample_size(20);
    for (name, secret) in [
        ("checksum", None),
        ("hmac", Some(KvSecret::from_bytes(&[5; 32]).unwrap())),
    ] {
        let config = KvTransferConfig {
            role: KvRole::Decode,
            listen: "127.0.0.1:0".into(),
            timeout: Duration::from_secs(10),
            buffer_bytes: 1 << 30,
            ttl: Duration::from_secs(60),
            model_identity: "bench".into(),
            secret: secret.clone(),
            counters: Default::default(),
        };
        let store = TransferStore::open(&config, [1; 32], PAYLOAD).unwrap();
        let addr = store.local_addr().to_string();
        let sender = KvSender::start(
            [1; 32],
            PAYLOAD,
            Duration::from_secs(10),
            secret,
            Default::default(),
        )
        .unwrap();
        let mut n = 0u64;
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    n += 1;
                    let blocks: Vec<(BlockHash, Vec<u8>)> = (0..BLOCKS)
                        .map(|i| {
                            let mut key = [0u8; 32];
                            key[..8].copy_from_slice(&n.to_le_bytes());
                            key[8..16].copy_from_slice(&(i as u64).to_le_bytes());
                            (BlockHash(key), vec![i as u8; PAYLOAD])
                        })
                        .collect();
                    let keys: Vec<BlockHash> = blocks.iter().map(|(k, _)| *k).collect();
                    let received = config.counters.blocks_received.load(Ordering::Relaxed);
                    let start = Instant::now();
                    sender.send(format!("t{n}"), addr.clone(), blocks);
                    while config.counters.blocks_received.load(Ordering::Relaxed) == received {
                        std::hint::spin_loop();
                    }
                    total += start.elapsed();
                    // Claimed, so the buffer does not fill.
                    let ticket = store.prefetch(keys);
                    assert_eq!(store.take_read(ticket).len(), BLOCKS);
                }
                total
            })
        });
        drop(sender);
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
