//! The Responses API's `store`: finished responses kept in memory, with the conversation that
//! led to them, for `previous_response_id` and `GET` / `DELETE /v1/responses/{id}`. Bounded by
//! count (the oldest goes first) and by age, so it never grows without limit; a restart
//! forgets everything.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pagoda_protocol::ChatMessage;
use pagoda_protocol::responses::Response;

/// A stored response.
#[derive(Debug)]
pub struct Stored {
    pub response: Response,
    /// Every message up to and including this response's output (without `instructions`,
    /// which OpenAI does not carry over).
    pub conversation: Vec<ChatMessage>,
}

/// Responses by id, bounded.
#[derive(Debug)]
pub struct ResponseStore {
    max_entries: usize,
    max_age: Duration,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_id: HashMap<String, (Instant, Arc<Stored>)>,
    /// Insertion order, for eviction (ids already deleted are skipped).
    order: VecDeque<String>,
}

impl ResponseStore {
    pub fn new(max_entries: usize, max_age: Duration) -> Self {
        Self {
            max_entries,
            max_age,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Keeps `stored`; the oldest entries go when over the count (nothing is kept at 0).
    pub fn put(&self, stored: Stored) {
        if self.max_entries == 0 {
            return;
        }
        let mut inner = self.lock();
        self.expire(&mut inner);
        let id = stored.response.id.clone();
        inner.order.push_back(id.clone());
        inner.by_id.insert(id, (Instant::now(), Arc::new(stored)));
        while inner.by_id.len() > self.max_entries {
            match inner.order.pop_front() {
                Some(old) => {
                    inner.by_id.remove(&old);
                }
                None => break,
            }
        }
    }

    pub fn get(&self, id: &str) -> Option<Arc<Stored>> {
        let mut inner = self.lock();
        self.expire(&mut inner);
        inner.by_id.get(id).map(|(_, s)| Arc::clone(s))
    }

    /// True if it was there.
    pub fn delete(&self, id: &str) -> bool {
        let mut inner = self.lock();
        self.expire(&mut inner);
        inner.by_id.remove(id).is_some()
    }

    fn expire(&self, inner: &mut Inner) {
        let now = Instant::now();
        while let Some(id) = inner.order.front() {
            match inner.by_id.get(id) {
                Some((at, _)) if now.duration_since(*at) <= self.max_age => break,
                _ => {
                    if let Some(id) = inner.order.pop_front() {
                        inner.by_id.remove(&id);
                    }
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the maps consistent (every step is one insert
        // or remove), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::Map;

    fn stored(id: &str) -> Stored {
        Stored {
            response: Response {
                id: id.into(),
                object: "response".into(),
                created_at: 0,
                status: "completed".into(),
                error: None,
                incomplete_details: None,
                instructions: None,
                max_output_tokens: None,
                model: "m".into(),
                output: Vec::new(),
                parallel_tool_calls: true,
                previous_response_id: None,
                temperature: None,
                top_p: None,
                tool_choice: "auto".into(),
                tools: Vec::new(),
                text: serde_json::Value::Null,
                store: true,
                metadata: Map::new(),
                user: None,
                usage: None,
            },
            conversation: Vec::new(),
        }
    }

    #[test]
    fn bounded_by_count_and_age() {
        let s = ResponseStore::new(2, Duration::from_secs(3600));
        s.put(stored("a"));
        s.put(stored("b"));
        s.put(stored("c"));
        assert!(s.get("a").is_none(), "the oldest goes first");
        assert!(s.get("b").is_some() && s.get("c").is_some());
        assert!(s.delete("b"));
        assert!(!s.delete("b"));
        s.put(stored("d"));
        assert!(s.get("c").is_some() && s.get("d").is_some());

        let s = ResponseStore::new(10, Duration::ZERO);
        s.put(stored("a"));
        std::thread::sleep(Duration::from_millis(2));
        assert!(s.get("a").is_none(), "expired");
    }
}
