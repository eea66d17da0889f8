//! One tenant's live state: its limits (replaced on reload), the sliding one-minute windows of
//! requests and tokens, the requests it has running, and the counters `/metrics` shows. A
//! request is admitted against all three limits at once, under one lock, so the limits hold
//! exactly at their numbers however requests race.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pagoda_core::Tenant;

use super::keys_file::Limits;

const WINDOW: Duration = Duration::from_secs(60);

/// Which limit refused a request, and when it would pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverLimit {
    pub limit: &'static str,
    pub value: u64,
    /// Whole seconds, at least 1.
    pub retry_after: u64,
    /// The request can never pass (its prompt alone is over the token limit).
    pub never: bool,
}

#[derive(Default)]
struct Windows {
    limits: Limits,
    requests: VecDeque<Instant>,
    tokens: VecDeque<(Instant, u64)>,
    tokens_in_window: u64,
    running: u32,
}

impl Windows {
    fn expire(&mut self, now: Instant) {
        while self.requests.front().is_some_and(|t| now - *t >= WINDOW) {
            self.requests.pop_front();
        }
        while let Some(&(t, n)) = self.tokens.front() {
            if now - t < WINDOW {
                break;
            }
            self.tokens.pop_front();
            self.tokens_in_window -= n;
        }
    }

    fn record_tokens(&mut self, now: Instant, n: u64) {
        if n > 0 && self.limits.max_tokens_per_minute.is_some() {
            self.tokens.push_back((now, n));
            self.tokens_in_window += n;
        }
    }

    /// The first limit `prompt_tokens` more (and one more request) would break.
    fn check(&self, now: Instant, prompt_tokens: u64) -> Result<(), OverLimit> {
        let secs_until =
            |t: Instant| (WINDOW.saturating_sub(now - t).as_secs_f64().ceil() as u64).max(1);
        let l = &self.limits;
        if let Some(max) = l.max_concurrent_requests
            && self.running >= max
        {
            return Err(OverLimit {
                limit: "max_concurrent_requests",
                value: u64::from(max),
                retry_after: 1,
                never: false,
            });
        }
        if let Some(max) = l.max_requests_per_minute
            && self.requests.len() >= max as usize
        {
            let oldest = self.requests[self.requests.len() - max as usize];
            return Err(OverLimit {
                limit: "max_requests_per_minute",
                value: u64::from(max),
                retry_after: secs_until(oldest),
                never: false,
            });
        }
        if let Some(max) = l.max_tokens_per_minute
            && self.tokens_in_window + prompt_tokens > max
        {
            // Wait until enough of the window has expired for the prompt to fit.
            let mut freed = 0;
            let need = self.tokens_in_window + prompt_tokens - max;
            let at = self.tokens.iter().find(|(_, n)| {
                freed += n;
                freed >= need
            });
            return Err(OverLimit {
                limit: "max_tokens_per_minute",
                value: max,
                retry_after: at.map_or(60, |(t, _)| secs_until(*t)),
                never: prompt_tokens > max,
            });
        }
        Ok(())
    }
}

/// A tenant of `--api-keys-file` (or the one `--api-key`).
pub struct TenantState {
    pub name: String,
    /// What the engine schedules by; the id never changes while the server runs.
    id: u32,
    /// The prefix-cache salt of every request of this tenant.
    pub salt: String,
    windows: Mutex<Windows>,
    pub requests_total: AtomicU64,
    pub prompt_tokens_total: AtomicU64,
    pub generation_tokens_total: AtomicU64,
    /// Per limit of `LIMIT_NAMES`.
    pub rejected_total: [AtomicU64; 3],
}

/// The limits a tenant can be over, in the order `rejected_total` counts them.
pub const LIMIT_NAMES: [&str; 3] = [
    "max_concurrent_requests",
    "max_requests_per_minute",
    "max_tokens_per_minute",
];

impl TenantState {
    pub fn new(name: String, id: u32, salt: String, limits: Limits) -> Self {
        Self {
            name,
            id,
            salt,
            windows: Mutex::new(Windows {
                limits,
                ..Windows::default()
            }),
            requests_total: AtomicU64::new(0),
            prompt_tokens_total: AtomicU64::new(0),
            generation_tokens_total: AtomicU64::new(0),
            rejected_total: Default::default(),
        }
    }

    /// The engine's view: id and fair-share weight.
    pub fn engine_tenant(&self) -> Tenant {
        let weight = self.lock().limits.priority.unwrap_or(1);
        Tenant {
            id: self.id,
            weight,
        }
    }

    pub fn set_limits(&self, limits: Limits) {
        self.lock().limits = limits;
    }

    pub fn limits(&self) -> Limits {
        self.lock().limits
    }

    /// The cheap check before a request is prepared (its prompt is not known yet).
    pub fn precheck(&self) -> Result<(), OverLimit> {
        let now = Instant::now();
        let mut w = self.lock();
        w.expire(now);
        w.check(now, 0).inspect_err(|e| self.count_rejected(e))
    }

    /// Admits a request of `prompt_tokens`: counts it against every limit, or refuses it.
    pub fn admit(self: &Arc<Self>, prompt_tokens: u64) -> Result<TenantPermit, OverLimit> {
        let now = Instant::now();
        let mut w = self.lock();
        w.expire(now);
        if let Err(e) = w.check(now, prompt_tokens) {
            self.count_rejected(&e);
            return Err(e);
        }
        w.running += 1;
        w.requests.push_back(now);
        w.record_tokens(now, prompt_tokens);
        drop(w);
        self.requests_total.fetch_add(1, Ordering::Relaxed);
        self.prompt_tokens_total
            .fetch_add(prompt_tokens, Ordering::Relaxed);
        Ok(TenantPermit(Arc::clone(self)))
    }

    /// Generated tokens count against the token limit as they come.
    pub fn add_generated(&self, n: u64) {
        self.generation_tokens_total.fetch_add(n, Ordering::Relaxed);
        self.lock().record_tokens(Instant::now(), n);
    }

    pub fn running(&self) -> u32 {
        self.lock().running
    }

    fn count_rejected(&self, e: &OverLimit) {
        if let Some(i) = LIMIT_NAMES.iter().position(|n| *n == e.limit) {
            self.rejected_total[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Windows> {
        // The windows stay consistent even if a holder panicked: every update is one step.
        self.windows.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running request of a tenant; dropping it frees its `max_concurrent_requests` slot.
pub struct TenantPermit(Arc<TenantState>);

impl TenantPermit {
    pub fn tenant(&self) -> &Arc<TenantState> {
        &self.0
    }
}

impl Drop for TenantPermit {
    fn drop(&mut self) {
        let mut w = self.0.lock();
        w.running = w.running.saturating_sub(1);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tenant(limits: Limits) -> Arc<TenantState> {
        Arc::new(TenantState::new("t".into(), 1, "s".into(), limits))
    }

    #[test]
    fn requests_per_minute_hold_exactly() {
        let t = tenant(Limits {
            max_requests_per_minute: Some(2),
            ..Limits::default()
        });
        let a = t.admit(1);
        let b = t.admit(1);
        assert!(a.is_ok() && b.is_ok());
        let e = t.admit(1).err().unwrap();
        assert_eq!((e.limit, e.value), ("max_requests_per_minute", 2));
        assert!((59..=60).contains(&e.retry_after));
        assert_eq!(t.rejected_total[1].load(Ordering::Relaxed), 1);
    }

    #[test]
    fn concurrency_frees_on_drop_and_tokens_count_generation() {
        let t = tenant(Limits {
            max_concurrent_requests: Some(1),
            max_tokens_per_minute: Some(100),
            ..Limits::default()
        });
        let p = t.admit(40).unwrap();
        assert_eq!(t.admit(1).err().unwrap().limit, "max_concurrent_requests");
        t.add_generated(20);
        drop(p);
        assert!(t.admit(40).is_ok()); // 40 + 20 + 40 = 100: at the limit, not over
        let e = t.admit(1).err().unwrap();
        assert_eq!((e.limit, e.never), ("max_tokens_per_minute", false));
        assert!(t.admit(101).err().unwrap().never);
    }
}
