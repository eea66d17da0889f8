//! `pagoda bench --sweep`: the highest request rate whose run meets the SLO. Each probe is an
//! ordinary open-loop run of `--num-requests` at one rate (fresh prompts each, so no probe
//! hits the prefix cache of another, but for a shared-prefix workload's system prompts under
//! `--prefix-warmup`, which its warm-up caches before the first probe); the rates come from
//! `pagoda_capacity::RateSearch`, the
//! search the planner runs on its simulation, and "meets" is `pagoda_capacity::slo`'s rule (at
//! least 90% of requests within every target), so measured and predicted answers compare.

use pagoda_capacity::{ATTAINMENT, RateSearch};

pub use crate::sweep_result::{SweepProbe, SweepResult};

use crate::runner::{BenchConfig, BenchError, BenchReport, Load, run_bench};

/// Run the sweep over `config` (one target; its first load gives burstiness and the cap on
/// requests in flight), starting at `start` requests/s.
pub async fn run_sweep(
    config: BenchConfig,
    start: f64,
    precision: f64,
    max_probes: usize,
) -> Result<BenchReport, BenchError> {
    let (burstiness, max_concurrency) = match config.loads.first() {
        Some(Load::Rate {
            burstiness,
            max_concurrency,
            ..
        }) => (*burstiness, *max_concurrency),
        _ => (1.0, None),
    };
    let mut search = RateSearch::new(start, precision, max_probes);
    let mut merged: Option<BenchReport> = None;
    let mut probes = Vec::new();
    let mut best_goodput = 0.0;
    let mut probe = 0u64;
    while let Some(rate) = search.next_rate() {
        let mut c = config.clone();
        c.loads = vec![Load::Rate {
            rate,
            burstiness,
            max_concurrency,
        }];
        // Fresh prompts per probe (a repeated prompt would hit the prefix cache), the same
        // arrival pattern for all.
        c.workload.seed = config.workload.seed.wrapping_add(probe.wrapping_mul(7919));
        c.arrival_seed = Some(config.workload.seed);
        if probe > 0 {
            c.warmup = 0;
        }
        probe += 1;
        let report = run_bench(c).await?;
        let Some(point) = report.points.first() else {
            break;
        };
        let g = point.summary.goodput;
        eprintln!(
            "sweep: {rate:.3} req/s: attainment {:.1}%, goodput {:.3} req/s: {}",
            g.attainment * 100.0,
            g.requests_per_s,
            if g.meets_slo { "meets" } else { "misses" }
        );
        search.record(rate, g.meets_slo);
        if g.meets_slo && search.best() == Some(rate) {
            best_goodput = g.requests_per_s;
        }
        probes.push(SweepProbe {
            rate,
            attainment: g.attainment,
            goodput_rps: g.requests_per_s,
            meets_slo: g.meets_slo,
        });
        match &mut merged {
            None => merged = Some(report),
            Some(m) => {
                m.settings.loads.extend(report.settings.loads);
                m.points.extend(report.points);
            }
        }
    }
    let mut report = merged.ok_or_else(|| BenchError::Config("the sweep ran no probe".into()))?;
    // Points in rate order read (and chart) as a curve.
    report
        .points
        .sort_by(|a, b| rate_of(&a.load).total_cmp(&rate_of(&b.load)));
    report
        .settings
        .loads
        .sort_by(|a, b| rate_of(a).total_cmp(&rate_of(b)));
    report.sweep = Some(SweepResult {
        slo: config.slo,
        attainment_needed: ATTAINMENT,
        max_rate_rps: search.best(),
        max_goodput_rps: best_goodput,
        lowest_failing_rps: search.lowest_failing(),
        probes,
    });
    Ok(report)
}

/// The offered rate of a load (closed loop: 0).
pub fn rate_of(load: &Load) -> f64 {
    match load {
        Load::Rate { rate, .. } => *rate,
        Load::Concurrency { .. } => 0.0,
    }
}

/// The sweep's lines of the terminal report.
pub fn render(sweep: &SweepResult) -> String {
    let mut out = format!(
        "\n== sweep for the SLO ({}; a rate meets it when {:.0}% of requests do) ==\n",
        sweep.slo.describe(),
        sweep.attainment_needed * 100.0
    );
    let mut probes = sweep.probes.clone();
    probes.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    for p in &probes {
        out.push_str(&format!(
            "{:>10.3} req/s  attainment {:>5.1}%  goodput {:>8.3} req/s  {}\n",
            p.rate,
            p.attainment * 100.0,
            p.goodput_rps,
            if p.meets_slo { "meets" } else { "misses" }
        ));
    }
    match sweep.max_rate_rps {
        Some(r) => out.push_str(&format!(
            "highest rate meeting the SLO: {r:.3} req/s (goodput {:.3} req/s){}\n",
            sweep.max_goodput_rps,
            sweep.lowest_failing_rps.map_or_else(
                || "; no probe missed it (more --sweep-max-probes or --num-requests)".into(),
                |f| format!("; {f:.3} req/s misses it")
            )
        )),
        None => out.push_str("no probed rate meets the SLO\n"),
    }
    out
}
