//! Human-readable output: one summary block per point and target, a sweep overview, the A/B
//! ratio table for `--compare`, and the most common errors. Also the JSON writer for `--output`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::metrics::{LatencyStats, Summary};
use crate::runner::{BenchReport, PointReport};
use crate::workload::WorkloadKind;

/// The whole terminal report.
pub fn render(report: &BenchReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "workload {:?}, api {:?}, {} requests per point, prompt lengths by {:?}",
        report.settings.workload.kind,
        report.settings.api,
        report.settings.num_requests,
        report.prompt_length_method
    );
    for point in &report.points {
        out.push_str(&render_point(point));
    }
    // Random prompts share nothing, so cached tokens mean the server saw these prompts before
    // (an earlier run with the same --seed): its TTFT then measures cache hits, not prefill.
    let random = report.settings.workload.kind == WorkloadKind::Random;
    for point in report
        .points
        .iter()
        .filter(|p| random && p.summary.total_cached_tokens > 0)
    {
        let _ = writeln!(
            out,
            "\nnote: {} {}: {} prompt tokens came from the server's prefix cache, but random \
             prompts share none; an earlier run with the same --seed sent these prompts. For \
             cold-cache latency, use another --seed or restart the server.",
            point.target,
            point.load.label(),
            point.summary.total_cached_tokens
        );
    }
    if report.points.len() > report.settings.targets.len() {
        out.push_str(&render_overview(report));
    }
    if !report.comparisons.is_empty() {
        out.push_str(&render_comparisons(report));
    }
    out
}

fn stats_row(out: &mut String, name: &str, s: &LatencyStats) {
    let _ = writeln!(
        out,
        "{name:<10}{:>10.2}{:>10.2}{:>10.2}{:>10.2}{:>10.2}",
        s.mean, s.p50, s.p90, s.p99, s.max
    );
}

/// One summary block.
pub fn render_point(point: &PointReport) -> String {
    let s: &Summary = &point.summary;
    let mut out = String::new();
    let _ = writeln!(out, "\n== {}  {} ==", point.target, point.load.label());
    let mut line = |k: &str, v: String| {
        let _ = writeln!(out, "{k:<34}{v}");
    };
    line(
        "Requests completed / failed",
        format!("{} / {}", s.completed, s.failed),
    );
    line("Duration (s)", format!("{:.2}", s.duration_s));
    line(
        "Request throughput (req/s)",
        format!("{:.3}", s.request_throughput),
    );
    line("Input tokens/s", format!("{:.1}", s.input_tokens_per_s));
    line("Output tokens/s", format!("{:.1}", s.output_tokens_per_s));
    line(
        "Total input / output tokens",
        format!("{} / {}", s.total_input_tokens, s.total_output_tokens),
    );
    line("Cached prompt tokens", s.total_cached_tokens.to_string());
    line("Max requests in flight", s.max_in_flight.to_string());
    if let Some(sp) = &point.speculation {
        line(
            "Speculative acceptance rate",
            format!(
                "{:.1}% ({} of {} proposed tokens)",
                sp.acceptance_rate * 100.0,
                sp.accepted_tokens,
                sp.draft_tokens
            ),
        );
        line(
            "Mean acceptance length",
            format!("{:.2}", sp.mean_acceptance_length),
        );
    }
    let slo = &s.goodput.slo;
    line(
        "Goodput (req/s)",
        format!(
            "{:.3} ({} good; {})",
            s.goodput.requests_per_s,
            s.goodput.good_requests,
            slo.describe()
        ),
    );
    if slo.is_set() {
        line(
            "SLO attainment",
            format!(
                "{:.1}% ({} the {:.0}% the load needs)",
                s.goodput.attainment * 100.0,
                if s.goodput.meets_slo {
                    "meets"
                } else {
                    "misses"
                },
                pagoda_capacity::ATTAINMENT * 100.0
            ),
        );
    }
    let _ = writeln!(
        out,
        "{:<10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "(ms)", "mean", "p50", "p90", "p99", "max"
    );
    stats_row(&mut out, "TTFT", &s.ttft_ms);
    stats_row(&mut out, "TPOT", &s.tpot_ms);
    stats_row(&mut out, "ITL", &s.itl_ms);
    stats_row(&mut out, "E2E", &s.e2e_ms);
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for e in point.records.iter().filter_map(|r| r.error.as_ref()) {
        let key = match e.status {
            Some(status) => format!("HTTP {status}: {}", e.message),
            None => e.message.clone(),
        };
        *errors.entry(key).or_default() += 1;
    }
    let mut errors: Vec<_> = errors.into_iter().collect();
    errors.sort_by_key(|e| std::cmp::Reverse(e.1));
    for (message, n) in errors.iter().take(5) {
        let _ = writeln!(out, "error x{n}: {message}");
    }
    out
}

fn render_overview(report: &BenchReport) -> String {
    let mut out = String::from("\n== sweep ==\n");
    let _ = writeln!(
        out,
        "{:<22}{:<28}{:>9}{:>11}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "load",
        "target",
        "req/s",
        "out tok/s",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TPOT p99",
        "goodput"
    );
    for p in &report.points {
        let s = &p.summary;
        let _ = writeln!(
            out,
            "{:<22}{:<28}{:>9.3}{:>11.1}{:>10.1}{:>10.1}{:>10.2}{:>10.2}{:>10.3}",
            p.load.label(),
            p.target,
            s.request_throughput,
            s.output_tokens_per_s,
            s.ttft_ms.p50,
            s.ttft_ms.p99,
            s.tpot_ms.p50,
            s.tpot_ms.p99,
            s.goodput.requests_per_s
        );
    }
    out
}

fn render_comparisons(report: &BenchReport) -> String {
    let mut out = String::new();
    let (a, b) = (
        &report.settings.targets[0].base_url,
        &report.settings.targets[1].base_url,
    );
    let _ = writeln!(
        out,
        "\n== ratios {b} / {a} (throughput > 1 and latency < 1 favour {b}) =="
    );
    let _ = writeln!(
        out,
        "{:<22}{:>11}{:>9}{:>9}{:>10}{:>10}{:>10}{:>10}{:>9}",
        "load",
        "out tok/s",
        "req/s",
        "goodput",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TPOT p99",
        "E2E p50"
    );
    for c in &report.comparisons {
        let _ = writeln!(
            out,
            "{:<22}{:>11.3}{:>9.3}{:>9.3}{:>10.3}{:>10.3}{:>10.3}{:>10.3}{:>9.3}",
            c.load.label(),
            c.output_tokens_per_s,
            c.request_throughput,
            c.goodput,
            c.ttft_p50,
            c.ttft_p99,
            c.tpot_p50,
            c.tpot_p99,
            c.e2e_p50
        );
    }
    out
}

/// Write the report as pretty JSON (settings, prompt-length method, per-point summaries and
/// per-request records, comparisons).
pub fn write_json(report: &BenchReport, path: &Path) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(report)?;
    std::fs::write(path, json).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}
