//! A model split over pipeline stages behind the real server: `/v1/models` shows the rank
//! layout (`parallel`: sizes, each stage's CPUs, layers, heads, LM-head rows and weight bytes),
//! a completion runs through both stages, and `/metrics` counts the hand-offs between them.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{MODEL, TestServer, client, config, metric, post, small_setup};
use pagoda_model::{EngineSetup, PipelineParallelConfig};
use serde_json::{Value, json};

#[tokio::test]
async fn a_pipeline_shows_its_layout_and_counts_its_hand_offs() {
    let setup = EngineSetup {
        pipeline_parallel: PipelineParallelConfig::new(2),
        ..small_setup()
    };
    let s = TestServer::start(setup, config());
    let c = client();
    let (status, body) = post(
        &c,
        &s.url("/v1/completions"),
        &json!({"model": MODEL, "prompt": "The capital of France is", "max_tokens": 4}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let models: Value = c
        .get(s.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let p = &models["data"][0]["parallel"];
    assert_eq!(
        (&p["tensor_parallel_size"], &p["pipeline_parallel_size"]),
        (&json!(1), &json!(2)),
        "{p}"
    );
    // SmolLM2's 30 layers as 15 + 15; the LM head (49152 rows) on the last stage only.
    let ranks = p["ranks"].as_array().unwrap();
    assert_eq!(ranks[0]["layers"], json!([0, 15]));
    assert_eq!(ranks[1]["layers"], json!([15, 30]));
    assert!(ranks[0].get("vocab").is_none(), "{p}");
    assert_eq!(ranks[1]["vocab"], json!([0, 49152]));
    assert!(
        ranks
            .iter()
            .all(|r| r["weight_bytes"].as_u64().unwrap() > 0)
    );
    let base = &s.base;
    assert_eq!(metric(&c, base, "pagoda:pp_size").await, 2.0);
    // A step is two hand-offs at least: the residual stream forward, the logits back.
    let steps = metric(&c, base, "pagoda:pp_steps_total").await;
    let transfers = metric(&c, base, "pagoda:pp_transfers_total").await;
    assert!(
        steps >= 4.0 && transfers >= 2.0 * steps,
        "{transfers} in {steps} steps"
    );
    assert!(metric(&c, base, "pagoda:pp_transfer_bytes_total").await > 0.0);
    s.stop();
    s.join().unwrap();
}
