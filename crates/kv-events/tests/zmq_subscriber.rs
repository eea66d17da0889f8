//! The KV events a real engine publishes add up, for a real ZeroMQ subscriber (pyzmq + msgpack,
//! zmq_subscriber.py; scripts/test.sh installs both), to the engine's own cached blocks: a
//! tiny random-weight model, a pool small enough to evict, shared prefixes, a salted tenant,
//! an abort, a queue small enough to overflow now and then (resync), and the first batches
//! taken from the replay socket as a late joiner would.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use pagoda_core::kv::ExtraKeys;
use pagoda_core::{EngineRequest, SamplingParams, Tenant};
use pagoda_gguf::GgufFile;
use pagoda_kv_events::{KvEventsConfig, KvEventsPublisher};
use pagoda_model::{EngineSetup, Model, build_engine};
use pagoda_testkit::tiny_model::TinyModel;

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

use pagoda_testkit::free_port;

#[test]
fn published_events_add_up_to_the_cached_blocks() {
    let probe = Command::new(python())
        .args(["-c", "import zmq, msgpack"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python()));
    assert!(
        probe.status.success(),
        "pyzmq and msgpack are missing (scripts/test.sh installs them: \
         python3 -m pip install pyzmq msgpack): {}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let model = Model::load(Arc::new(
        GgufFile::from_bytes(TinyModel::llama().to_bytes()).unwrap(),
    ))
    .unwrap();
    let setup = EngineSetup {
        // 24 blocks of 16: the workload below needs more, so cached blocks are evicted.
        kv_cache_memory: Some(24 * 16 * 2 * 2 * 128 * 2),
        max_model_len: Some(256),
        ..EngineSetup::default()
    };
    let (mut core, report) = build_engine(model, &setup).unwrap();
    assert!(report.num_blocks < 40, "{} blocks", report.num_blocks);
    let (pub_port, replay_port) = (free_port(), free_port());
    let config = KvEventsConfig::parse(&format!(
        r#"{{"enable_kv_cache_events": true, "publisher": "zmq",
            "endpoint": "tcp://127.0.0.1:{pub_port}", "replay_endpoint": "tcp://127.0.0.1:{replay_port}",
            "max_queue_size": 3, "topic": "kv@test"}}"#
    ))
    .unwrap()
    .unwrap();
    let (publisher, mut queue) = KvEventsPublisher::start(&config).unwrap();
    core.enable_kv_events();

    let mut sub = Command::new(python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/zmq_subscriber.py"
        ))
        .args([
            format!("tcp://127.0.0.1:{pub_port}"),
            format!("tcp://127.0.0.1:{replay_port}"),
            "kv@test".into(),
            "3".into(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(sub.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "subscribed");
    // Let the subscription reach the publisher; whatever is missed still comes by replay.
    std::thread::sleep(std::time::Duration::from_millis(300));

    let vocab = core.limits().vocab_size as u32;
    let stem: Vec<u32> = (0..40).map(|i| (i * 7 + 3) % vocab).collect();
    let mut next_id = 0u64;
    for round in 0..4u32 {
        for i in 0..5u32 {
            let mut prompt = stem.clone();
            prompt.extend((0..20 + i * 9).map(|j| (j * 31 + i * 101 + round * 13) % vocab));
            let salted = i == 4;
            let req = EngineRequest {
                id: next_id,
                prompt_token_ids: prompt,
                params: SamplingParams {
                    ignore_eos: true,
                    ..SamplingParams::greedy(6 + i)
                },
                priority: 0,
                tenant: Tenant::default(),
                extra_keys: ExtraKeys {
                    cache_salt: salted.then(|| "tenant-b".to_string()),
                    ..Default::default()
                },
            };
            core.add_request(req).unwrap();
            next_id += 1;
        }
        let mut steps = 0;
        while core.has_work() {
            core.step();
            queue.flush(&mut core);
            steps += 1;
            if steps == 3 && round == 1 {
                core.abort(next_id - 2);
            }
        }
    }
    // A last flush once the publisher has room (an overflow at the very end resyncs here).
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(10));
        queue.flush(&mut core);
    }
    let total = {
        let mut last = u64::MAX;
        // Wait until the publisher thread has sent every queued batch.
        loop {
            let n = publisher.published.load(Ordering::Acquire);
            if n == last {
                break n;
            }
            last = n;
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    let mut stdin = sub.stdin.take().unwrap();
    writeln!(stdin, "end {total}").unwrap();
    drop(stdin);
    let got: BTreeSet<u64> = out
        .lines()
        .map(|l| l.unwrap().trim().parse().unwrap())
        .collect();
    let status = sub.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&status.stderr).to_string();
    eprintln!(
        "{total} batches, {} overflows; subscriber: {stderr}",
        publisher.overflows.load(Ordering::Relaxed)
    );
    assert!(status.status.success(), "subscriber failed: {stderr}");
    let want: BTreeSet<u64> = core
        .scheduler()
        .kv()
        .pool()
        .cached_hashes()
        .map(|h| h.external())
        .collect();
    assert!(want.len() > 5, "the workload must leave blocks cached");
    assert!(
        stderr.contains("BlockRemoved=") && !stderr.contains("replayed=0"),
        "the workload must evict, and the replay must run: {stderr}"
    );
    assert_eq!(got, want);
    drop(queue);
    publisher.join();
}
