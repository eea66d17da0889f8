//! One scrape's families, each added under the name it is exported with, written in the
//! Prometheus text format 0.0.4; families may also be exported under alias names (the
//! server's `--metrics-compat vllm`), written after all the others.

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Metric, Registry};

use crate::scraped::{Labels, Scraped, Value};

/// What `/metrics` answers with: the 0.0.4 text format, which Prometheus and vLLM's scrapers
/// read (no `# EOF`, counters' families named with `_total`).
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// The other names an exported family name is also exported under (none for most).
pub type Aliases = fn(&str) -> Vec<String>;

/// The families of one scrape, in the order added. A registry per scrape, not per process:
/// which families exist depends on what is loaded (speculative decoding, the disk tier,
/// tenants), several servers and routers share a test process, and registering a hundred
/// families costs microseconds.
#[derive(Debug, Default)]
pub struct Exposition {
    registry: Registry,
    aliased: Registry,
    aliases: Option<Aliases>,
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

    /// `m` under `name` and its aliases. An alias reads the same metric, so a request that
    /// finishes between the two writes shows only in the second.
    fn metric<M: Metric + Clone>(&mut self, name: &str, help: &str, kind: MetricType, m: M) {
        for n in self.names(name) {
            let target = if n == name {
                &mut self.registry
            } else {
                &mut self.aliased
            };
            // prometheus-client adds a counter's `_total` and a period to the help.
            let base = match kind {
                MetricType::Counter => n.strip_suffix("_total").unwrap_or(&n),
                _ => &n,
            };
            target.register(base, help.strip_suffix('.').unwrap_or(help), m.clone());
        }
    }

    /// A family read now.
    pub fn scraped(&mut self, name: &str, help: &str, family: Scraped) {
        let kind = family.kind();
        self.metric(name, help, kind, family);
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

    /// A live histogram under `name`.
    pub fn histogram(&mut self, name: &str, help: &str, h: &crate::Histogram) {
        self.metric(name, help, MetricType::Histogram, h.clone());
    }

    /// The text of every family, the aliased copies last.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(16 << 10);
        // Writing to a String cannot fail; an encoder error would leave the text cut short,
        // which a scraper reports, rather than a failed scrape.
        let _ = prometheus_text::encode(&mut out, &self.registry);
        let _ = prometheus_text::encode(&mut out, &self.aliased);
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
mod tests {
    use super::*;

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
