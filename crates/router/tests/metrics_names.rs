//! The router's `/metrics` keeps its families: every `# TYPE` line and sample name, with one
//! decode worker and one prefill worker (so the `pd_*` families are there), compared with
//! tests/fixtures/metrics_names.txt. The workers need not run: the series exist per worker.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use pagoda_router::{PolicyKind, RouterConfig, WorkerSpec};
use pagoda_testkit::metrics_names;

#[tokio::test]
async fn metrics_names_and_types_are_kept() {
    let url = |p: u16| format!("http://127.0.0.1:{p}");
    let decode = format!(
        "{},kv=127.0.0.1:{}",
        url(common::free_port()),
        common::free_port()
    );
    let config = RouterConfig {
        workers: vec![WorkerSpec::parse(&decode).unwrap()],
        dns: None,
        policy: PolicyKind::RoundRobin,
        tokenizer: None,
        hash_seed: "0".into(),
        tenant_salts: None,
        router_key: None,
        tuning: Default::default(),
        poll_interval: Duration::from_millis(200),
        connect_timeout: Duration::from_secs(2),
        max_request_bytes: 8 << 20,
        prefill: vec![WorkerSpec::parse(&url(common::free_port())).unwrap()],
        pd_threshold: 0,
        pd_prefill_timeout: Duration::from_secs(5),
    };
    let router = common::serve_router(config).await;
    let text = reqwest::get(format!("{router}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/metrics_names.txt");
    if let Err(e) = metrics_names::check(&text, &path) {
        panic!("{e}");
    }
}
