//! Speculative decoding on `/metrics`, with vLLM's names under `pagoda:`: drafts, proposed and
//! accepted tokens, accepted tokens by position, and the number of speculative tokens chosen
//! per decoding sequence and step (a histogram: with `auto` it follows the load); and
//! pagoda's own count of sequences that were to speculate but had no KV blocks for it.

use pagoda_core::SpecCounters;
use pagoda_exposition::{Exposition, Scraped};

use crate::observe::metrics::labels::model_labels;

pub(crate) fn render(e: &mut Exposition, model_name: &str, c: &SpecCounters) {
    for (name, help, v) in [
        (
            "pagoda:spec_decode_num_drafts_total",
            "Sequence-steps with at least one proposed token.",
            c.num_drafts,
        ),
        (
            "pagoda:spec_decode_num_draft_tokens_total",
            "Proposed tokens verified by the target model.",
            c.num_draft_tokens,
        ),
        (
            "pagoda:spec_decode_num_accepted_tokens_total",
            "Proposed tokens the target model accepted.",
            c.num_accepted_tokens,
        ),
        (
            "pagoda:spec_decode_num_unsupported_total",
            "Decoding sequences chosen to speculate that decoded one token instead: their extra KV blocks did not fit.",
            c.num_unsupported,
        ),
    ] {
        e.counter(name, help, model_labels(model_name), v);
    }
    let per_pos = c.accepted_per_pos.iter().enumerate().map(|(pos, n)| {
        let mut labels = model_labels(model_name);
        labels.push(("position", pos.to_string()));
        (labels, (*n).into())
    });
    e.scraped(
        "pagoda:spec_decode_num_accepted_tokens_per_pos_total",
        "Accepted tokens by position in their proposed run.",
        Scraped::counters(per_pos),
    );
    // The controller counts each k chosen: the buckets are those counts, at le = k.
    let buckets: Vec<(f64, u64)> = c
        .chosen_k
        .iter()
        .enumerate()
        .map(|(k, n)| (k as f64, *n))
        .collect();
    let count = c.chosen_k.iter().sum();
    let sum: u64 = c
        .chosen_k
        .iter()
        .enumerate()
        .map(|(k, n)| k as u64 * n)
        .sum();
    e.scraped(
        "pagoda:spec_decode_num_speculative_tokens",
        "Speculative tokens chosen per decoding sequence and step.",
        Scraped::histogram(model_labels(model_name), buckets, sum as f64, count),
    );
}
