//! OpenTelemetry traces out over OTLP/HTTP with the JSON encoding (`--otlp-traces-endpoint`).
//! Hand-written: a request's spans are built after the fact from its timeline, so all that is
//! needed is the OTLP/JSON shape and one POST per batch, from a thread of its own over a bounded
//! channel (a slow or absent collector drops spans, never delays a request). The
//! opentelemetry-otlp stack (SDK, prost, an HTTP client) would be several times the code.
//! Plain `http://` only, like the local collector it is meant for.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::observe::trace_context::to_hex;

/// Batches waiting for the exporter thread; beyond this, spans are dropped.
const QUEUE: usize = 256;

/// An attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Str(String),
    Int(i64),
}

/// A finished span.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanRecord {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_span_id: Option<[u8; 8]>,
    pub name: String,
    /// OTLP SpanKind: 1 internal, 2 server.
    pub kind: u8,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<(&'static str, AttrValue)>,
}

/// An endpoint that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OtlpError {
    #[error("`{0}` is not an http://host:port[/path] URL (https is not supported)")]
    BadUrl(String),
    #[error("cannot start the trace exporter thread: {0}")]
    Thread(String),
}

/// Where batches go: a host, port and path (`/v1/traces` when the URL has none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    host: String,
    port: u16,
    path: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Self, OtlpError> {
        let bad = || OtlpError::BadUrl(url.to_owned());
        let rest = url.strip_prefix("http://").ok_or_else(bad)?;
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().map_err(|_| bad())?),
            None => (authority, 4318), // OTLP/HTTP's default port
        };
        if host.is_empty() {
            return Err(bad());
        }
        let path = if path.is_empty() || path == "/" {
            "/v1/traces".to_owned()
        } else {
            path.to_owned()
        };
        Ok(Self {
            host: host.to_owned(),
            port,
            path,
        })
    }
}

/// The sending half; cheap to share.
pub struct OtlpExporter {
    tx: SyncSender<Vec<SpanRecord>>,
}

impl OtlpExporter {
    /// Starts the exporter thread for `url`.
    pub fn start(url: &str) -> Result<Self, OtlpError> {
        let endpoint = Endpoint::parse(url)?;
        let (tx, rx) = sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("pagoda-otlp".into())
            .spawn(move || run(&endpoint, &rx))
            .map_err(|e| OtlpError::Thread(e.to_string()))?;
        Ok(Self { tx })
    }

    /// Queues `spans` for export; drops them when the queue is full.
    pub fn export(&self, spans: Vec<SpanRecord>) {
        if let Err(TrySendError::Full(_)) = self.tx.try_send(spans) {
            tracing::warn!("trace export queue full: spans dropped");
        }
    }
}

/// Sends everything queued as one request, until the server side goes away.
fn run(endpoint: &Endpoint, rx: &Receiver<Vec<SpanRecord>>) {
    while let Ok(mut batch) = rx.recv() {
        while let Ok(more) = rx.try_recv() {
            batch.extend(more);
        }
        let body = encode(&batch).to_string();
        match post(endpoint, body.as_bytes()) {
            Ok(200..=299) => {}
            Ok(status) => tracing::warn!(status, "trace export refused by the collector"),
            Err(e) => tracing::warn!("trace export failed: {e}"),
        }
    }
}

/// The OTLP/JSON `ExportTraceServiceRequest` for `spans`.
pub fn encode(spans: &[SpanRecord]) -> Value {
    let nanos = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            .to_string()
    };
    let spans: Vec<Value> = spans
        .iter()
        .map(|s| {
            let attributes: Vec<Value> = s
                .attributes
                .iter()
                .map(|(k, v)| {
                    let value = match v {
                        AttrValue::Str(s) => json!({ "stringValue": s }),
                        AttrValue::Int(i) => json!({ "intValue": i.to_string() }),
                    };
                    json!({ "key": k, "value": value })
                })
                .collect();
            let mut span = json!({
                "traceId": to_hex(&s.trace_id),
                "spanId": to_hex(&s.span_id),
                "name": s.name,
                "kind": s.kind,
                "startTimeUnixNano": nanos(s.start),
                "endTimeUnixNano": nanos(s.end),
                "attributes": attributes,
                "status": {},
            });
            if let Some(p) = s.parent_span_id {
                span["parentSpanId"] = json!(to_hex(&p));
            }
            span
        })
        .collect();
    json!({
        "resourceSpans": [{
            "resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": "pagoda"}},
                {"key": "service.version", "value": {"stringValue": env!("CARGO_PKG_VERSION")}},
            ]},
            "scopeSpans": [{"scope": {"name": "pagoda"}, "spans": spans}],
        }]
    })
}

/// One HTTP/1.1 POST; returns the status code.
fn post(endpoint: &Endpoint, body: &[u8]) -> std::io::Result<u16> {
    let addr = (endpoint.host.as_str(), endpoint.port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("the collector's host does not resolve"))?;
    let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    conn.set_write_timeout(Some(Duration::from_secs(5)))?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        endpoint.path,
        endpoint.host,
        endpoint.port,
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    conn.write_all(body)?;
    let mut status_line = [0u8; 12]; // "HTTP/1.1 200"
    conn.read_exact(&mut status_line)?;
    std::str::from_utf8(&status_line[9..12])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("the collector's answer is not HTTP"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        let e = Endpoint::parse("http://localhost:4318").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("localhost", 4318, "/v1/traces")
        );
        let e = Endpoint::parse("http://10.0.0.1:9000/otlp/v1/traces").unwrap();
        assert_eq!((e.port, e.path.as_str()), (9000, "/otlp/v1/traces"));
        assert!(Endpoint::parse("https://x:1").is_err());
        assert!(Endpoint::parse("http://:1").is_err());
        assert!(Endpoint::parse("http://x:port").is_err());
    }
}
