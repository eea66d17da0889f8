//! Tenant salts through a real `pagoda router` process in front of a real replica that has
//! keys (`--api-key` and `--api-keys-file`, KV events on): the router's cache-aware hashes of
//! a request presenting the single key, or a file key, are the replica's (the router's
//! estimated prefix hits match what the replica holds), another tenant's are not, and the
//! router re-reads `--tenant-keys-file` on SIGHUP: a key added is salted as its tenant's, a
//! file that does not read leaves the keys in use (and says so in the log). One replica, one
//! test, so the model loads once. Needs the `pagoda` binary built (`cargo build -p pagoda`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{MODEL_NAME, Replica, free_port, model};
use serde_json::{Value, json};

const KEYS: &str = r#"{"keys": [{"key": "sk-alice", "tenant": "alice"},
                                 {"key": "sk-bob", "tenant": "bob"}]}"#;
const KEYS_ROTATED: &str = r#"{"keys": [{"key": "sk-alice", "tenant": "alice"},
                                         {"key": "sk-alice2", "tenant": "alice"},
                                         {"key": "sk-bob", "tenant": "bob"}]}"#;

/// About 200 tokens: a dozen 16-token blocks, short enough to prefill fast on one thread.
fn long_system(topic: &str) -> String {
    (0..14)
        .map(|i| format!("Rule {i} about {topic}: answer briefly and stay on {topic}."))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A one-token chat with `system` and `user` sent to `base` with `key`: its cached tokens.
async fn chat(c: &reqwest::Client, base: &str, key: &str, system: &str, user: &str) -> u64 {
    let body = json!({"model": MODEL_NAME, "max_tokens": 1, "temperature": 0,
                      "messages": [{"role": "system", "content": system},
                                   {"role": "user", "content": user}]});
    let r = c
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{key} via {base}");
    let v: Value = r.json().await.unwrap();
    v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
}

/// The router's series `name{worker="url"}` (0 if absent).
async fn router_series(c: &reqwest::Client, router: &str, name: &str, url: &str) -> u64 {
    let m = c.get(format!("{router}/metrics")).send().await.unwrap();
    let key = format!("pagoda_router:{name}{{worker=\"{url}\"}} ");
    m.text()
        .await
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
}

/// Waits until the router has indexed at least `n` blocks of the replica.
async fn wait_indexed(c: &reqwest::Client, router: &str, url: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while router_series(c, router, "indexed_blocks", url).await < n {
        assert!(
            Instant::now() < deadline,
            "the router never indexed {n} blocks"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the router's log has a line containing `what`.
async fn wait_log(log: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(log)
        .unwrap_or_default()
        .contains(what)
    {
        assert!(Instant::now() < deadline, "no `{what}` in the router's log");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_salts_as_the_replica_and_reloads_its_keys_on_sighup() {
    let c = reqwest::Client::builder().no_proxy().build().unwrap();
    let dir = std::env::temp_dir().join(format!("pagoda-router-tenants-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.json");
    std::fs::write(&keys, KEYS).unwrap();
    let (events, replay) = (free_port(), free_port());
    let kv = json!({"enable_kv_cache_events": true, "publisher": "zmq",
                    "endpoint": format!("tcp://127.0.0.1:{events}"),
                    "replay_endpoint": format!("tcp://127.0.0.1:{replay}")});
    let replica = Replica::spawn(
        free_port(),
        &[
            "--api-key".into(),
            "sk-one".into(),
            "--api-keys-file".into(),
            keys.display().to_string(),
            "--kv-events-config".into(),
            kv.to_string(),
        ],
    );
    let url = replica.url.clone();
    let log = dir.join("router.log");
    let router = Replica::router(
        free_port(),
        &[
            "--worker".into(),
            format!("{url},events=tcp://127.0.0.1:{events},replay=tcp://127.0.0.1:{replay}"),
            "--policy".into(),
            "cache_aware".into(),
            "--model".into(),
            model().display().to_string(),
            "--tenant-api-key".into(),
            "sk-one".into(),
            "--tenant-keys-file".into(),
            keys.display().to_string(),
            "--poll-interval".into(),
            "0.2".into(),
        ],
        &log,
    );
    replica.wait_ready(&c).await;
    router.wait_ready(&c).await;
    let ra = &router.url;
    let hits = || router_series(&c, ra, "prefix_hit_blocks_total", &url);

    // The single --api-key (tenant `default`): a prefix seeded on the replica under it is
    // found by the router's hashes of a request presenting it.
    let p1 = long_system("gardening");
    chat(&c, &url, "sk-one", &p1, "seed").await;
    wait_indexed(&c, ra, &url, 8).await;
    let before = hits().await;
    let cached = chat(&c, ra, "sk-one", &p1, "q1").await;
    let found = hits().await - before;
    assert!(found >= 8, "the router found {found} of the blocks");
    assert!(cached >= found * 16, "the replica hit {cached} tokens");
    // Bob's hashes differ (his salt), on the router as on the replica.
    let before = hits().await;
    assert_eq!(chat(&c, ra, "sk-bob", &p1, "q2").await, 0);
    assert_eq!(
        hits().await,
        before,
        "bob's request matched another tenant's blocks"
    );

    // A key added to the file: the replica takes it on SIGHUP; until the router is signalled
    // too it does not know the key (no salt: no hit), afterwards it salts it as alice's.
    std::fs::write(&keys, KEYS_ROTATED).unwrap();
    replica.signal("-HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while c
        .get(format!("{url}/v1/models"))
        .bearer_auth("sk-alice2")
        .send()
        .await
        .unwrap()
        .status()
        != 200
    {
        assert!(
            Instant::now() < deadline,
            "the replica never took the new key"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let p2 = long_system("astronomy");
    let indexed = router_series(&c, ra, "indexed_blocks", &url).await;
    chat(&c, &url, "sk-alice", &p2, "seed").await;
    wait_indexed(&c, ra, &url, indexed + 8).await;
    let before = hits().await;
    assert!(chat(&c, ra, "sk-alice2", &p2, "q3").await > 0);
    assert_eq!(
        hits().await,
        before,
        "the router knew a key before its reload"
    );
    router.signal("-HUP");
    wait_log(&log, "--tenant-keys-file reloaded").await;
    let before = hits().await;
    chat(&c, ra, "sk-alice2", &p2, "q4").await;
    assert!(hits().await - before >= 8, "the reloaded key is not salted");

    // A file that does not read: logged, and the keys in use stay.
    std::fs::write(&keys, "not json").unwrap();
    router.signal("-HUP");
    wait_log(&log, "not reloaded, the old keys stay").await;
    let before = hits().await;
    chat(&c, ra, "sk-alice2", &p2, "q5").await;
    assert!(hits().await - before >= 8, "a bad file dropped the keys");
    drop(router);
    let _ = std::fs::remove_dir_all(&dir);
}
