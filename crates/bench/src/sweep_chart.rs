//! The `--sweep` chart, against offered request rate: TTFT p50/p90/p99 (top), TPOT
//! p50/p90/p99 (middle), each with its SLO target as a red line, and goodput and throughput
//! (bottom) beside the offered rate itself, the highest rate meeting the SLO marked. SVG, as
//! `chart.rs` (plotters' SVG backend needs no font files).

use plotters::prelude::*;

use crate::chart::ChartError;
use crate::metrics::LatencyStats;
use crate::runner::{BenchReport, PointReport};
use crate::sweep::rate_of;

fn err<E: std::fmt::Display>(e: E) -> ChartError {
    ChartError::new(e)
}

const P50: RGBColor = RGBColor(44, 160, 44);
const P90: RGBColor = RGBColor(31, 119, 180);
const P99: RGBColor = RGBColor(148, 103, 189);

type Series<'a> = (&'a str, RGBColor, Box<dyn Fn(&PointReport) -> f64 + 'a>);

/// Render the sweep chart of `report` as an SVG document.
pub fn sweep_svg(report: &BenchReport) -> Result<String, ChartError> {
    let mut points: Vec<&PointReport> = report.points.iter().collect();
    points.sort_by(|a, b| rate_of(&a.load).total_cmp(&rate_of(&b.load)));
    let best = report.sweep.as_ref().and_then(|s| s.max_rate_rps);
    let pct = |f: fn(&LatencyStats) -> f64, pick: fn(&PointReport) -> &LatencyStats| {
        Box::new(move |p: &PointReport| f(pick(p))) as Box<dyn Fn(&PointReport) -> f64>
    };
    let ttft: Vec<Series> = vec![
        ("TTFT p50", P50, pct(|s| s.p50, |p| &p.summary.ttft_ms)),
        ("TTFT p90", P90, pct(|s| s.p90, |p| &p.summary.ttft_ms)),
        ("TTFT p99", P99, pct(|s| s.p99, |p| &p.summary.ttft_ms)),
    ];
    let tpot: Vec<Series> = vec![
        ("TPOT p50", P50, pct(|s| s.p50, |p| &p.summary.tpot_ms)),
        ("TPOT p90", P90, pct(|s| s.p90, |p| &p.summary.tpot_ms)),
        ("TPOT p99", P99, pct(|s| s.p99, |p| &p.summary.tpot_ms)),
    ];
    let rates: Vec<Series> = vec![
        (
            "offered",
            RGBColor(160, 160, 160),
            Box::new(|p: &PointReport| rate_of(&p.load)),
        ),
        (
            "throughput",
            P90,
            Box::new(|p: &PointReport| p.summary.request_throughput),
        ),
        (
            "goodput",
            P50,
            Box::new(|p: &PointReport| p.summary.goodput.requests_per_s),
        ),
    ];
    let slo = report.settings.slo;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 1080)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let panels = root.split_evenly((3, 1));
        panel(&panels[0], &points, "TTFT (ms)", &ttft, slo.ttft_ms, best)?;
        panel(&panels[1], &points, "TPOT (ms)", &tpot, slo.tpot_ms, best)?;
        panel(&panels[2], &points, "requests/s", &rates, None, best)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    points: &[&PointReport],
    y_desc: &str,
    series: &[Series<'_>],
    slo: Option<f64>,
    best: Option<f64>,
) -> Result<(), ChartError>
where
    DB::ErrorType: 'static,
{
    let x_max = points
        .iter()
        .map(|p| rate_of(&p.load))
        .filter(|r| r.is_finite())
        .fold(0.1, f64::max)
        * 1.1;
    let y_max = points
        .iter()
        .flat_map(|p| series.iter().map(move |s| (s.2)(p)))
        .filter(|v| v.is_finite())
        .chain(slo)
        .fold(1e-3, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{y_desc} vs offered rate"), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("offered requests/s")
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    if let Some(limit) = slo {
        crate::chart::slo_line(&mut chart, limit, x_max)?;
    }
    if let Some(b) = best {
        chart
            .draw_series(LineSeries::new(
                [(b, 0.0), (b, y_max)],
                BLACK.stroke_width(1),
            ))
            .map_err(err)?
            .label(format!("highest rate meeting the SLO: {b:.2}/s"))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
    }
    for (name, color, metric) in series {
        let color = *color;
        let xy: Vec<(f64, f64)> = points
            .iter()
            .map(|p| (rate_of(&p.load), metric(p)))
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        chart
            .draw_series(LineSeries::new(xy.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
        chart
            .draw_series(xy.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    crate::chart::legend(&mut chart)
}
