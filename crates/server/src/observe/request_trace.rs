//! A generation request's trace: its root span (from the request's arrival at the server to its
//! last token) and the engine phases under it, `queue` (waiting for the first step), `prefill`
//! (first step to first token) and `decode` (first to last token), built from the generation's
//! timeline when it ends and handed to the OTLP exporter.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crate::observe::otlp::{AttrValue, OtlpExporter, SpanRecord};
use crate::observe::trace_context::{TraceContext, span_id};

/// When the phases of a generation happened (the earliest choice for the first token, the
/// latest for the last).
#[derive(Clone, Copy, Debug, Default)]
pub struct Timeline {
    pub arrival: Option<Instant>,
    pub first_scheduled: Option<Instant>,
    pub first_token: Option<Instant>,
    pub last_token: Option<Instant>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// A request being traced.
pub struct RequestTrace {
    exporter: Arc<OtlpExporter>,
    ctx: TraceContext,
    name: String,
    /// The same moment on both clocks, to place `Instant`s in wall time.
    start: (Instant, SystemTime),
    attributes: Vec<(&'static str, AttrValue)>,
}

impl RequestTrace {
    /// A trace whose root span started at `start`; `None` when the caller asked not to sample.
    pub fn begin(
        exporter: Arc<OtlpExporter>,
        ctx: TraceContext,
        name: String,
        start: (Instant, SystemTime),
        attributes: Vec<(&'static str, AttrValue)>,
    ) -> Option<Self> {
        ctx.sampled.then_some(Self {
            exporter,
            ctx,
            name,
            start,
            attributes,
        })
    }

    /// Ends the root span now and exports it with its phases.
    pub fn finish(self, t: &Timeline) {
        let now = Instant::now();
        let wall = |i: Instant| {
            let (base, sys) = self.start;
            if i >= base {
                sys + (i - base)
            } else {
                sys - (base - i)
            }
        };
        let root_id = span_id();
        let mut attributes = self.attributes;
        attributes.push((
            "gen_ai.usage.input_tokens",
            AttrValue::Int(t.prompt_tokens as i64),
        ));
        attributes.push((
            "gen_ai.usage.output_tokens",
            AttrValue::Int(t.completion_tokens as i64),
        ));
        let mut spans = vec![SpanRecord {
            trace_id: self.ctx.trace_id,
            span_id: root_id,
            parent_span_id: self.ctx.parent_span_id,
            name: self.name,
            kind: 2,
            start: self.start.1,
            end: wall(now),
            attributes,
        }];
        let phases = [
            ("queue", t.arrival, t.first_scheduled),
            ("prefill", t.first_scheduled, t.first_token),
            ("decode", t.first_token, t.last_token),
        ];
        for (name, from, to) in phases {
            if let (Some(from), Some(to)) = (from, to) {
                spans.push(SpanRecord {
                    trace_id: self.ctx.trace_id,
                    span_id: span_id(),
                    parent_span_id: Some(root_id),
                    name: name.to_owned(),
                    kind: 1,
                    start: wall(from),
                    end: wall(to.max(from)),
                    attributes: Vec::new(),
                });
            }
        }
        self.exporter.export(spans);
    }
}
