//! The SLO policy's door (`--slo ttft=..`): a new request whose predicted time to first token
//! would break the TTFT target is refused at once (429 with a Retry-After) instead of queued to
//! miss it, and to make every request behind it miss theirs. The engine thread publishes what
//! the prediction needs after every step; the handle reads it on any thread.

use std::sync::Mutex;
use std::time::Duration;

use crate::add_request_error::AddRequestError;
use crate::speculative::StepCostModel;

/// The engine's load as of its last step, in the terms the prediction needs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SloLoad {
    /// Prompt tokens not yet computed, over every sequence waiting or running.
    pub backlog_tokens: usize,
    /// Sequences running or waiting (each will hold a place in the decode batch).
    pub seqs: usize,
    /// The most sequences a decode batch holds within the TPOT target.
    pub decode_cap: usize,
    /// Tokens a step holds within the TPOT target.
    pub step_tokens: usize,
    /// Step seconds against step tokens (`None`: nothing measured yet, so nothing is predicted).
    pub cost: Option<StepCostModel>,
    /// Seconds until each running sequence ends at the latest (its `max_tokens` left at the
    /// current step time), shortest first: when places in the decode batch come free.
    pub finishes: Vec<f64>,
}

impl SloLoad {
    /// Predicted seconds from now to the first token of a request of `prompt_tokens` prompt
    /// tokens and `seqs` sequences, served after everything already admitted (first come,
    /// first served); `None` when there is no curve to predict from.
    pub fn predict_ttft(&self, prompt_tokens: usize, seqs: usize) -> Option<f64> {
        let cost = self.cost.as_ref()?;
        // Prompt tokens per step: what the decodes leave, counting every sequence admitted
        // before this one as decoding by the time its prompt is computed.
        let decodes = self.seqs.min(self.decode_cap);
        let per_step = self.step_tokens.saturating_sub(decodes);
        // Places in the decode batch: the k-th sequence past the cap waits for the k-th end.
        let over = (self.seqs + seqs).saturating_sub(self.decode_cap);
        let wait = match over {
            0 => 0.0,
            k => match self.finishes.get(k - 1) {
                Some(&t) => t,
                // More waiting than running: they take turns behind the running ones.
                None => match self.finishes.last() {
                    Some(&t) => t * k.div_ceil(self.finishes.len()) as f64,
                    None => f64::INFINITY,
                },
            },
        };
        // Full steps for the prompt tokens ahead and its own, then one step for the rest.
        let tokens = self.backlog_tokens + prompt_tokens;
        let prefill = match (tokens, per_step) {
            (0, _) => 0.0,
            (_, 0) => f64::INFINITY,
            (t, p) => {
                let last = t % p;
                let tail = if last > 0 {
                    cost.predict(decodes + last)
                } else {
                    0.0
                };
                (t / p) as f64 * cost.predict(self.step_tokens) + tail
            }
        };
        Some(wait + prefill)
    }
}

/// What the handle checks new requests against.
#[derive(Debug)]
pub struct SloGate {
    ttft: Option<Duration>,
    load: Mutex<SloLoad>,
}

impl SloGate {
    pub fn new(ttft: Option<Duration>) -> Self {
        Self {
            ttft,
            load: Mutex::new(SloLoad::default()),
        }
    }

    /// Called by the engine thread after each step.
    pub fn publish(&self, load: SloLoad) {
        if let Ok(mut l) = self.load.lock() {
            *l = load;
        }
    }

    pub fn load(&self) -> SloLoad {
        self.load.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Refuses a request whose first token would come after the TTFT target, naming the
    /// prediction and when to retry (the time by which the prediction overshoots, at least 1 s).
    pub fn check(&self, prompt_tokens: usize, seqs: usize) -> Result<(), AddRequestError> {
        let Some(target) = self.ttft else {
            return Ok(());
        };
        let Ok(mut load) = self.load.lock() else {
            return Ok(());
        };
        let Some(ttft) = load.predict_ttft(prompt_tokens, seqs) else {
            return Ok(());
        };
        let target_secs = target.as_secs_f64();
        if ttft <= target_secs {
            // Counted until the engine's next step publishes it: a burst that arrives within
            // one step is predicted request by request, not all against the same load.
            load.backlog_tokens += prompt_tokens;
            load.seqs += seqs;
            return Ok(());
        }
        let over = ttft - target_secs;
        Err(AddRequestError::SloWouldBreak {
            predicted_ttft_ms: if ttft.is_finite() {
                (ttft * 1e3).round() as u64
            } else {
                u64::MAX
            },
            ttft_target_ms: target.as_millis() as u64,
            // Past an hour the prediction says little: ask for a minute.
            retry_after_secs: if over.is_finite() && over < 3600.0 {
                (over.ceil() as u64).max(1)
            } else {
                60
            },
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// One second a step, whatever its size.
    fn flat() -> StepCostModel {
        let mut m = StepCostModel::default();
        for t in [1, 64, 1024] {
            m.observe(t, 1.0);
        }
        m
    }

    fn load() -> SloLoad {
        SloLoad {
            backlog_tokens: 900,
            seqs: 3,
            decode_cap: 4,
            // 103 tokens a step, of which 3 decode: 100 prompt tokens a second.
            step_tokens: 103,
            cost: Some(flat()),
            finishes: vec![2.0, 5.0, 7.0],
        }
    }

    #[test]
    fn the_prediction_adds_the_wait_for_a_place_to_the_prefill_ahead() {
        let l = load();
        // A place is free: the 900 tokens ahead and its own 100 at 100 tokens/s.
        assert_eq!(l.predict_ttft(100, 1), Some(10.0));
        // Two sequences: the second waits for the first end (2 s).
        assert_eq!(l.predict_ttft(100, 2), Some(12.0));
        // Six more than fit waits two rounds of the longest.
        assert_eq!(l.predict_ttft(0, 7), Some(9.0 + 14.0));
        let nothing = SloLoad {
            step_tokens: 3,
            ..load()
        };
        assert_eq!(nothing.predict_ttft(10, 1), Some(f64::INFINITY));
        let unknown = SloLoad {
            cost: None,
            ..load()
        };
        assert_eq!(unknown.predict_ttft(10, 1), None);
        // An idle engine: one step of the prompt's own size.
        let mut linear = StepCostModel::default();
        for t in [1, 64, 1024] {
            linear.observe(t, 0.001 * t as f64);
        }
        let idle = SloLoad {
            backlog_tokens: 0,
            seqs: 0,
            step_tokens: 1024,
            cost: Some(linear),
            ..load()
        };
        assert!((idle.predict_ttft(2, 1).unwrap() - 0.002).abs() < 1e-9);
        assert!((idle.predict_ttft(1024 + 64, 1).unwrap() - (1.024 + 0.064)).abs() < 1e-9);
    }

    #[test]
    fn the_gate_refuses_what_would_miss_the_target_and_says_when_to_retry() {
        let gate = SloGate::new(Some(Duration::from_secs(11)));
        assert!(
            gate.check(100, 1).is_ok(),
            "no load published: no prediction"
        );
        gate.publish(load());
        assert!(gate.check(100, 1).is_ok());
        // That one now counts as ahead of the next: 1,000 tokens more.
        assert_eq!(gate.load().backlog_tokens, 1_000);
        gate.publish(load());
        match gate.check(300, 1) {
            Err(AddRequestError::SloWouldBreak {
                predicted_ttft_ms,
                ttft_target_ms,
                retry_after_secs,
            }) => assert_eq!(
                (predicted_ttft_ms, ttft_target_ms, retry_after_secs),
                (12_000, 11_000, 1)
            ),
            other => panic!("{other:?}"),
        }
        let open = SloGate::new(None);
        open.publish(load());
        assert!(open.check(1_000_000, 9).is_ok());
    }
}
