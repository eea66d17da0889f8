//! The poller: every `poll_interval` each replica's /ready (200 ready, 503 loading or
//! draining, no answer down) and /metrics (running + waiting requests, engine steps to spot a
//! restart, the block size, the LoRA adapters' digests) are read, concurrently, each with a timeout.

use std::sync::Arc;
use std::time::Duration;

use crate::pool::Pool;
use crate::prom;
use crate::worker::{Health, Worker};

/// Polls until the pool is dropped.
pub async fn run(pool: std::sync::Weak<Pool>, client: reqwest::Client, interval: Duration) {
    loop {
        let Some(p) = pool.upgrade() else { return };
        poll_all(&p, &client, interval).await;
        drop(p);
        tokio::time::sleep(interval).await;
    }
}

/// One round over every replica.
pub async fn poll_all(pool: &Pool, client: &reqwest::Client, interval: Duration) {
    let timeout = interval.max(Duration::from_millis(500)) * 2;
    let polls = pool
        .workers()
        .into_iter()
        .map(|w| poll(w, client.clone(), timeout));
    futures_util::future::join_all(polls).await;
}

async fn poll(w: Arc<Worker>, client: reqwest::Client, timeout: Duration) {
    let ready = client
        .get(format!("{}/ready", w.url()))
        .timeout(timeout)
        .send()
        .await;
    let health = match ready {
        Ok(r) if r.status().is_success() => Health::Ready,
        Ok(_) => Health::Draining,
        Err(_) => Health::Down,
    };
    w.set_health(health);
    if health == Health::Down {
        return;
    }
    let metrics = client
        .get(format!("{}/metrics", w.url()))
        .timeout(timeout)
        .send()
        .await;
    let Ok(text) = (match metrics {
        Ok(r) if r.status().is_success() => r.text().await,
        _ => return,
    }) else {
        return;
    };
    let load = ["pagoda:num_requests_running", "pagoda:num_requests_waiting"]
        .iter()
        .filter_map(|n| prom::value(&text, n))
        .sum::<f64>();
    let steps = prom::value(&text, "pagoda:engine_steps_total").map(|v| v as u64);
    let block_size =
        prom::label(&text, "pagoda:cache_config_info", "block_size").and_then(|b| b.parse().ok());
    w.observe(load as usize, steps, block_size);
    let adapters = prom::label_pairs(
        &text,
        "pagoda:lora_adapter_info",
        "lora_name",
        "cache_digest",
    )
    .into_iter()
    .filter_map(|(name, hex)| Some((name, u64::from_str_radix(&hex, 16).ok()?)))
    .collect();
    w.observe_adapters(adapters);
}
