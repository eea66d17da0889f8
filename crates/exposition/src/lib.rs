//! `/metrics` for the server and the router: one scrape's families gathered in an
//! [`Exposition`] and written by prometheus-client in the Prometheus text format 0.0.4, with
//! live histograms registered as they are and values read at scrape time as [`Scraped`] ones.

mod exposition;
mod scraped;

pub use exposition::{Aliases, CONTENT_TYPE, Exposition};
pub use prometheus_client::metrics::histogram::Histogram;
pub use scraped::{Labels, Scraped, Value};
