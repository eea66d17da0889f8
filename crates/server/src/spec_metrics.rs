//! Speculative decoding on `/metrics`, with vLLM's names under `pagoda:`: drafts, proposed and
//! accepted tokens, accepted tokens by position, and the number of speculative tokens chosen
//! per decoding sequence and step (a histogram: with `auto` it follows the load).

use std::fmt::Write;

use pagoda_core::SpecCounters;

use crate::metrics::counter;

pub(crate) fn render(out: &mut String, label: &str, c: &SpecCounters) {
    counter(
        out,
        "pagoda:spec_decode_num_drafts",
        "Sequence-steps with at least one proposed token.",
        label,
        c.num_drafts,
    );
    counter(
        out,
        "pagoda:spec_decode_num_draft_tokens",
        "Proposed tokens verified by the target model.",
        label,
        c.num_draft_tokens,
    );
    counter(
        out,
        "pagoda:spec_decode_num_accepted_tokens",
        "Proposed tokens the target model accepted.",
        label,
        c.num_accepted_tokens,
    );
    let name = "pagoda:spec_decode_num_accepted_tokens_per_pos";
    let _ = writeln!(
        out,
        "# HELP {name} Accepted tokens by position in their proposed run.\n# TYPE {name} counter"
    );
    for (pos, n) in c.accepted_per_pos.iter().enumerate() {
        let _ = writeln!(out, "{name}{{{label},position=\"{pos}\"}} {n}");
    }
    let name = "pagoda:spec_decode_num_speculative_tokens";
    let _ = writeln!(
        out,
        "# HELP {name} Speculative tokens chosen per decoding sequence and step.\n# TYPE {name} histogram"
    );
    let (mut cum, mut sum) = (0u64, 0u64);
    for (k, n) in c.chosen_k.iter().enumerate() {
        cum += n;
        sum += k as u64 * n;
        let _ = writeln!(out, "{name}_bucket{{{label},le=\"{k}\"}} {cum}");
    }
    let _ = writeln!(out, "{name}_bucket{{{label},le=\"+Inf\"}} {cum}");
    let _ = writeln!(out, "{name}_sum{{{label}}} {sum}");
    let _ = writeln!(out, "{name}_count{{{label}}} {cum}");
}
