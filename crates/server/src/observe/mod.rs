//! Beside every stage, what operators see: health and readiness, traces (W3C trace context in,
//! OTLP out, a request's spans) and Prometheus's `/metrics`.

pub mod health;
pub mod metrics;
pub mod otlp;
pub mod request_trace;
pub mod trace_context;
