//! The sweep chart: TTFT p99 (top) and TPOT p99 (bottom) against achieved output throughput, one
//! line per target, each point labelled with the load and its goodput, SLO limits as red lines.
//! SVG only: plotters' SVG backend needs no font files.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::runner::{BenchReport, PointReport};

/// Why the chart could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("cannot draw the sweep chart: {0}")]
pub struct ChartError(String);

impl ChartError {
    /// The error of a drawing call.
    pub fn new<E: std::fmt::Display>(e: E) -> Self {
        ChartError(e.to_string())
    }
}

fn err<E: std::fmt::Display>(e: E) -> ChartError {
    ChartError::new(e)
}

/// An SLO limit (in ms) as a red line across a chart, named in its legend; both charts draw
/// their limits through here.
pub(crate) fn slo_line<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    limit: f64,
    x_max: f64,
) -> Result<(), ChartError> {
    chart
        .draw_series(LineSeries::new(
            [(0.0, limit), (x_max, limit)],
            RED.stroke_width(1),
        ))
        .map_err(err)?
        .label(format!("SLO {limit} ms"))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED));
    Ok(())
}

/// The legend, upper left, as both charts draw it.
pub(crate) fn legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
) -> Result<(), ChartError> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

const COLORS: [RGBColor; 2] = [RGBColor(31, 119, 180), RGBColor(255, 127, 14)];

/// Render the chart of `report` as an SVG document.
pub fn sweep_svg(report: &BenchReport) -> Result<String, ChartError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 760)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (top, bottom) = root.split_vertically(380);
        let slo = report.settings.slo;
        panel(
            &top,
            report,
            "TTFT p99 (ms)",
            |p| p.summary.ttft_ms.p99,
            slo.ttft_ms,
        )?;
        panel(
            &bottom,
            report,
            "TPOT p99 (ms)",
            |p| p.summary.tpot_ms.p99,
            slo.tpot_ms,
        )?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    report: &BenchReport,
    y_desc: &str,
    metric: impl Fn(&PointReport) -> f64,
    slo: Option<f64>,
) -> Result<(), ChartError>
where
    DB::ErrorType: 'static,
{
    let x_max = report
        .points
        .iter()
        .map(|p| p.summary.output_tokens_per_s)
        .fold(1.0, f64::max)
        * 1.15;
    let y_max = report
        .points
        .iter()
        .map(&metric)
        .chain(slo)
        .fold(1.0, f64::max)
        * 1.2;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{y_desc} vs achieved throughput"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("output tokens/s")
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    if let Some(limit) = slo {
        slo_line(&mut chart, limit, x_max)?;
    }
    for (t, target) in report.settings.targets.iter().enumerate() {
        let color = COLORS[t % COLORS.len()];
        let mut points: Vec<&PointReport> = report
            .points
            .iter()
            .filter(|p| p.target == target.base_url)
            .collect();
        points.sort_by(|a, b| {
            a.summary
                .output_tokens_per_s
                .total_cmp(&b.summary.output_tokens_per_s)
        });
        let xy: Vec<(f64, f64)> = points
            .iter()
            .map(|p| (p.summary.output_tokens_per_s, metric(p)))
            .collect();
        chart
            .draw_series(LineSeries::new(xy.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(target.base_url.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
        chart
            .draw_series(xy.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(err)?;
        // Goodput is marked at each point, next to the load that produced it.
        chart
            .draw_series(points.iter().zip(&xy).map(|(p, &(x, y))| {
                let label = format!(
                    "{} good {:.2}/s",
                    p.load.label(),
                    p.summary.goodput.requests_per_s
                );
                Text::new(label, (x, y), ("sans-serif", 11).into_font().color(&BLACK))
            }))
            .map_err(err)?;
    }
    legend(&mut chart)
}
