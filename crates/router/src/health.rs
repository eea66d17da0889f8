//! The poller: every `poll_interval` each replica's /ready (200 ready, 503 loading or
//! draining, a refused connection or `MISSED_POLLS_DOWN` timeouts in a row down) and /metrics (running + waiting requests, engine steps to spot a
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
    match ready {
        Ok(r) if r.status().is_success() => w.answered_poll(Health::Ready),
        Ok(_) => w.answered_poll(Health::Draining),
        // Nothing listens there: the process is gone.
        Err(e) if e.is_connect() && !e.is_timeout() => {
            w.set_health(Health::Down);
            return;
        }
        // Late (or cut off): busy, or hung; only a run of these is taken for a hang.
        Err(_) => {
            w.missed_poll();
            return;
        }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::WorkerSpec;
    use crate::worker::MISSED_POLLS_DOWN;

    fn worker(addr: std::net::SocketAddr) -> Arc<Worker> {
        Arc::new(Worker::new(
            WorkerSpec::parse(&format!("http://{addr}")).unwrap(),
        ))
    }

    #[tokio::test]
    async fn a_late_replica_is_down_only_after_a_run_of_missed_polls() {
        // Accepts connections and never answers: a replica too busy to reply in time.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let w = worker(silent.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let mut conns = Vec::new();
            while let Ok((c, _)) = silent.accept().await {
                conns.push(c);
            }
        });
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let timeout = Duration::from_millis(50);
        for _ in 1..MISSED_POLLS_DOWN {
            poll(Arc::clone(&w), client.clone(), timeout).await;
            assert_eq!(w.health(), Health::Unknown);
        }
        poll(Arc::clone(&w), client.clone(), timeout).await;
        assert_eq!(w.health(), Health::Down);
        held.abort();
    }

    #[tokio::test]
    async fn a_refused_connection_is_down_at_once() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let w = worker(closed.local_addr().unwrap());
        drop(closed);
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        poll(Arc::clone(&w), client, Duration::from_secs(1)).await;
        assert_eq!(w.health(), Health::Down);
    }
}
