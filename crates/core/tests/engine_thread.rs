//! The engine on its own thread behind `EngineHandle`: outputs arrive in order on each
//! request's stream, a dropped stream aborts its request and frees its blocks, a full waiting
//! queue rejects at once, and a reader that falls too far behind is cut off, not waited for.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use pagoda_core::engine::{EngineHandle, HandleOptions, StreamError};
use pagoda_core::{AddRequestError, SchedulerConfig};

fn config() -> SchedulerConfig {
    SchedulerConfig {
        max_model_len: 4096,
        ..Default::default()
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn streams_deliver_every_token_then_finish() {
    let h = EngineHandle::start(engine(64, 4, config(), true), HandleOptions::default()).unwrap();
    let prompts: Vec<Vec<u32>> = (0..8).map(|i| (i..i + 5 + i).collect()).collect();
    let mut streams: Vec<_> = prompts
        .iter()
        .map(|p| h.add_request(request(0, p.clone(), 6)).unwrap())
        .collect();
    for (p, s) in prompts.iter().zip(&mut streams) {
        let mut toks = Vec::new();
        let mut finished = false;
        while let Some(item) = s.blocking_recv() {
            let o = item.unwrap();
            toks.extend(o.new_token_ids);
            finished |= o.finish_reason.is_some();
        }
        assert!(finished);
        assert_eq!(toks, expected(p, 6));
    }
    wait_until("idle", || h.stats().num_running == 0);
    assert_eq!(h.stats().kv_usage, 0.0);
}

#[test]
fn dropping_a_stream_aborts_and_frees_its_blocks() {
    let h = EngineHandle::start(engine(64, 4, config(), false), HandleOptions::default()).unwrap();
    let mut s = h.add_request(request(0, (0..10).collect(), 3000)).unwrap();
    s.blocking_recv().unwrap().unwrap();
    wait_until("blocks held", || h.stats().kv_usage > 0.0);
    drop(s);
    wait_until("blocks freed", || {
        let st = h.stats();
        st.kv_usage == 0.0 && st.num_running == 0
    });
}

#[test]
fn a_full_queue_rejects_at_once() {
    let mut c = config();
    c.max_waiting_requests = 2;
    c.max_num_seqs = 1;
    let h = EngineHandle::start(engine(64, 4, c, false), HandleOptions::default()).unwrap();
    let mut held = Vec::new();
    let mut rejected = 0;
    for _ in 0..6 {
        match h.add_request(request(0, (0..10).collect(), 3000)) {
            Ok(s) => held.push(s),
            Err(StreamError::Rejected(AddRequestError::QueueFull {
                waiting: 2,
                limit: 2,
                ..
            })) => rejected += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    // One may already be running; at most two wait; the rest are turned away.
    assert!(rejected >= 3, "{rejected} rejected");
}

#[test]
fn a_slow_reader_is_cut_off() {
    let mut core = engine(64, 4, config(), false);
    core.executor_mut().step_delay = Some(Duration::from_millis(2));
    let h = EngineHandle::start(
        core,
        HandleOptions {
            output_buffer: 4,
            ..HandleOptions::default()
        },
    )
    .unwrap();
    let mut slow = h.add_request(request(0, (0..10).collect(), 200)).unwrap();
    let mut fast = h.add_request(request(0, (20..30).collect(), 50)).unwrap();
    let mut n = 0;
    while let Some(item) = fast.blocking_recv() {
        n += item.unwrap().new_token_ids.len();
    }
    assert_eq!(n, 50);
    wait_until("slow reader cut off", || h.stats().num_running == 0);
    let mut last = None;
    while let Some(item) = slow.blocking_recv() {
        last = Some(item);
    }
    assert_eq!(last, Some(Err(StreamError::Overflow(4))));
}
