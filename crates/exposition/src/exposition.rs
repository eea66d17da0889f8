//! One scrape's families, each added under the name it is exported with, written in the
//! Prometheus text format 0.0.4; families may also be exported under alias names (the
//! server's `--metrics-compat vllm`), written after all the others.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, prometheus_text};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::scraped::{Labels, Scraped, Value};

/// What `/metrics` answers with: the 0.0.4 text format, which Prometheus and vLLM's scrapers
/// read (no `# EOF`, counters' families named with `_total`).
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// The other names an exported family name is also exported under (none for most).
pub type Aliases = fn(&str) -> Vec<String>;

/// The families of one scrape, in the order added. A registry per scrape, not per process:
/// which families exist depends on what is loaded (speculative decoding, the disk tier,
/// tenants), several servers and routers share a test process, and registering a hundred
/// families costs microseconds. A family added again under the same name (the same metric of
/// another model) gains series rather than a second `# TYPE` line, which scrapers refuse.
#[derive(Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
    aliases: Option<Aliases>,
}

/// One exported family: every series added under its name.
#[derive(Debug)]
struct Family {
    name: String,
    help: String,
    kind: MetricType,
    scraped: Option<Scraped>,
    histograms: Histograms,
}

/// Live histograms of one family, each with its labels.
#[derive(Clone, Debug, Default)]
struct Histograms(Vec<(Labels, Histogram)>);

impl EncodeMetric for Histograms {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, h) in &self.0 {
            h.encode(encoder.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    /// An exposition that also exports each family under the names `aliases` gives it.
    pub fn with_aliases(aliases: Aliases) -> Self {
        Self {
            aliases: Some(aliases),
            ..Self::default()
        }
    }

    /// The family `name`, created on first use.
    fn family(&mut self, name: &str, help: &str, kind: MetricType) -> &mut Family {
        let i = match self.families.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.families.push(Family {
                    name: name.to_owned(),
                    help: help.to_owned(),
                    kind,
                    scraped: None,
                    histograms: Histograms::default(),
                });
                self.families.len() - 1
            }
        };
        &mut self.families[i]
    }

    /// A family read now (more series, if the name was added before).
    pub fn scraped(&mut self, name: &str, help: &str, family: Scraped) {
        let f = self.family(name, help, family.kind());
        match &mut f.scraped {
            Some(s) => s.extend(family),
            None => f.scraped = Some(family),
        }
    }

    /// A counter of one series. Like every name here, `name` is the exported one: a counter's
    /// ends in `_total` (prometheus-client gives the suffix to any that lacks it).
    pub fn counter(&mut self, name: &str, help: &str, labels: Labels, v: impl Into<Value>) {
        self.scraped(name, help, Scraped::counters([(labels, v.into())]));
    }

    /// A gauge of one series.
    pub fn gauge(&mut self, name: &str, help: &str, labels: Labels, v: impl Into<Value>) {
        self.scraped(name, help, Scraped::gauges([(labels, v.into())]));
    }

    /// A live histogram under `name`, with no labels.
    pub fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.labelled_histogram(name, help, Vec::new(), h);
    }

    /// A live histogram under `name` with `labels` (one series of the family per label set).
    pub fn labelled_histogram(&mut self, name: &str, help: &str, labels: Labels, h: &Histogram) {
        let f = self.family(name, help, MetricType::Histogram);
        f.histograms.0.push((labels, h.clone()));
    }

    /// The text of every family, the aliased copies last.
    pub fn encode(&self) -> String {
        let mut registry = Registry::default();
        let mut aliased = Registry::default();
        for f in &self.families {
            for n in self.names(&f.name) {
                let target = if n == f.name {
                    &mut registry
                } else {
                    &mut aliased
                };
                // prometheus-client adds a counter's `_total` and a period to the help.
                let base = match f.kind {
                    MetricType::Counter => n.strip_suffix("_total").unwrap_or(&n),
                    _ => &n,
                };
                let help = f.help.strip_suffix('.').unwrap_or(&f.help);
                match &f.scraped {
                    Some(s) => target.register(base, help, s.clone()),
                    None => target.register(base, help, f.histograms.clone()),
                }
            }
        }
        let mut out = String::with_capacity(16 << 10);
        // Writing to a String cannot fail; an encoder error would leave the text cut short,
        // which a scraper reports, rather than a failed scrape.
        let _ = prometheus_text::encode(&mut out, &registry);
        let _ = prometheus_text::encode(&mut out, &aliased);
        out
    }

    /// `name`, then its aliases.
    fn names(&self, name: &str) -> Vec<String> {
        let mut names = vec![name.to_owned()];
        if let Some(f) = self.aliases {
            names.extend(f(name));
        }
        names
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_family_added_per_model_is_one_family_with_a_series_each() {
        let mut e = Exposition::new();
        let h = Histogram::new([0.1, 1.0]);
        h.observe(0.5);
        for m in ["a", "b"] {
            let label = vec![("model_name", m.to_owned())];
            e.gauge("p:running", "Running.", label.clone(), 1u64);
            e.labelled_histogram("p:latency_seconds", "Latency.", label, &h);
        }
        let text = e.encode();
        assert_eq!(text.matches("# TYPE p:running gauge").count(), 1, "{text}");
        assert_eq!(
            text.matches("# TYPE p:latency_seconds histogram").count(),
            1
        );
        assert!(text.contains("p:running{model_name=\"a\"} 1"), "{text}");
        assert!(text.contains("p:running{model_name=\"b\"} 1"));
        assert!(
            text.contains("p:latency_seconds_bucket{model_name=\"b\",le=\"1\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn names_types_and_values_are_written_as_exported() {
        let mut e = Exposition::with_aliases(|n| match n.strip_prefix("a:") {
            Some(rest) => vec![format!("b:{rest}")],
            None => Vec::new(),
        });
        let model = || vec![("model_name", "m\"x".to_owned())];
        e.counter("a:requests_total", "Requests.", model(), 3u64);
        e.gauge("c:running", "Running", model(), 2u64);
        e.gauge("a:usage", "Usage.", Vec::new(), 0.25);
        let h = crate::Histogram::new([0.5, 2560.0]);
        h.observe(0.1);
        e.histogram("a:latency_seconds", "Latency.", &h);
        let text = e.encode();
        for line in [
            "# HELP a:requests_total Requests.",
            "# TYPE a:requests_total counter",
            "a:requests_total{model_name=\"m\\\"x\"} 3",
            "# HELP c:running Running.",
            "# TYPE c:running gauge",
            "c:running{model_name=\"m\\\"x\"} 2",
            "a:usage 0.25",
            "# TYPE a:latency_seconds histogram",
            "a:latency_seconds_bucket{le=\"0.5\"} 1",
            "a:latency_seconds_bucket{le=\"2560\"} 1",
            "a:latency_seconds_bucket{le=\"+Inf\"} 1",
            "a:latency_seconds_count 1",
            "# TYPE b:requests_total counter",
            "b:requests_total{model_name=\"m\\\"x\"} 3",
            "b:latency_seconds_count 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        assert!(!text.contains("b:running") && !text.contains("# EOF"));
        let first_alias = text.find("b:").unwrap_or(0);
        assert!(
            text[first_alias..].lines().all(|l| l.contains("b:")),
            "{text}"
        );
    }

    #[test]
    fn a_scraped_histogram_adds_the_inf_bucket() {
        let mut e = Exposition::new();
        let labels = vec![("model_name", "m".to_owned())];
        e.scraped(
            "k",
            "K.",
            Scraped::histogram(labels, vec![(0.0, 2), (1.0, 3)], 3.0, 5),
        );
        let text = e.encode();
        assert!(
            text.contains("k_bucket{model_name=\"m\",le=\"0\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("k_bucket{model_name=\"m\",le=\"1\"} 5\n"),
            "{text}"
        );
        assert!(
            text.contains("k_bucket{model_name=\"m\",le=\"+Inf\"} 5\n"),
            "{text}"
        );
        assert!(text.contains("k_count{model_name=\"m\"} 5\n"), "{text}");
    }
}
