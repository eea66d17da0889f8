//! A family whose values are read at scrape time (an engine's stats, per-replica atomics):
//! its type and each series' labels and value, encoded through prometheus-client's encoder.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// A series' labels, in the order they are written.
pub type Labels = Vec<(&'static str, String)>;

/// A sample's value: integers stay integers in the text (`2`, not `2.0`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Self::Int(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Self::Float(v)
    }
}

/// A histogram computed elsewhere: per-bucket (not cumulative) counts by upper bound.
#[derive(Clone, Debug, PartialEq)]
struct Buckets {
    bounds: Vec<(f64, u64)>,
    sum: f64,
    count: u64,
}

#[derive(Clone, Debug, PartialEq)]
enum Series {
    Counter(Value),
    Gauge(Value),
    Histogram(Buckets),
}

/// One family's series as read now.
#[derive(Clone, Debug, PartialEq)]
pub struct Scraped {
    kind: MetricType,
    series: Vec<(Labels, Series)>,
}

impl Scraped {
    pub fn counters(series: impl IntoIterator<Item = (Labels, Value)>) -> Self {
        Self {
            kind: MetricType::Counter,
            series: series
                .into_iter()
                .map(|(l, v)| (l, Series::Counter(v)))
                .collect(),
        }
    }

    pub fn gauges(series: impl IntoIterator<Item = (Labels, Value)>) -> Self {
        Self {
            kind: MetricType::Gauge,
            series: series
                .into_iter()
                .map(|(l, v)| (l, Series::Gauge(v)))
                .collect(),
        }
    }

    /// One histogram series from per-bucket counts (the `+Inf` bucket is added as `count`).
    pub fn histogram(labels: Labels, buckets: Vec<(f64, u64)>, sum: f64, count: u64) -> Self {
        let b = Buckets {
            bounds: buckets,
            sum,
            count,
        };
        Self {
            kind: MetricType::Histogram,
            series: vec![(labels, Series::Histogram(b))],
        }
    }

    pub(crate) fn kind(&self) -> MetricType {
        self.kind
    }

    /// Appends `other`'s series (the same family, another model's or replica's series).
    pub(crate) fn extend(&mut self, other: Scraped) {
        self.series.extend(other.series);
    }
}

impl EncodeMetric for Scraped {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, series) in &self.series {
            let e = encoder.encode_family(labels)?;
            match series {
                Series::Counter(Value::Int(v)) => ConstCounter::new(*v).encode(e)?,
                Series::Counter(Value::Float(v)) => ConstCounter::new(*v).encode(e)?,
                Series::Gauge(Value::Int(v)) => ConstGauge::new(*v).encode(e)?,
                Series::Gauge(Value::Float(v)) => ConstGauge::new(*v).encode(e)?,
                Series::Histogram(b) => {
                    let mut e = e;
                    e.encode_histogram::<NoLabelSet>(b.sum, b.count, &b.bounds, None)?
                }
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        self.kind
    }
}
