//! `cache_aware`: the replica whose prefix cache (as its KV events say) saves the most
//! prefill, against its load. Cost (NVIDIA Dynamo's KV router): uncached prompt blocks +
//! `decode_weight` x requests in flight; the lowest cost wins, ties rotate. When load is
//! skewed (max - min > `balance_abs` and max > `balance_rel` x min, SGLang's rule) the least
//! loaded replica wins instead, so one hot prefix cannot pile everything on one replica.
//! Without a prompt (not tokenizable) it is least load. The chosen replica's index counts the
//! prompt's blocks as held right away (`BlockIndex::predict`), before its events say so.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use super::{Choice, Policy, argmin_rotating};
use crate::config::CacheAwareTuning;
use crate::routing_key::RoutingKey;
use crate::worker::Worker;

/// The tuning and the tie-break turn.
#[derive(Debug)]
pub struct CacheAware {
    tuning: CacheAwareTuning,
    turn: AtomicUsize,
}

impl CacheAware {
    pub fn new(tuning: CacheAwareTuning) -> Self {
        Self {
            tuning,
            turn: AtomicUsize::new(0),
        }
    }

    fn skewed(&self, loads: &[usize]) -> bool {
        let (Some(&max), Some(&min)) = (loads.iter().max(), loads.iter().min()) else {
            return false;
        };
        max - min > self.tuning.balance_abs && max as f64 > self.tuning.balance_rel * min as f64
    }
}

impl Policy for CacheAware {
    fn select(&self, workers: &[Arc<Worker>], key: &RoutingKey) -> Choice {
        let loads: Vec<usize> = workers.iter().map(|w| w.load()).collect();
        let least = |turn: &AtomicUsize| argmin_rotating(workers.len(), turn, |i| loads[i]);
        if !key.is_some() {
            return Choice::plain(least(&self.turn));
        }
        // Hashes once per distinct block size (replicas of one model share one).
        let mut by_size: Vec<(usize, Vec<u64>)> = Vec::new();
        let matched: Vec<(usize, usize)> = workers
            .iter()
            .map(|w| {
                let bs = w.block_size();
                let hashes = match by_size.iter().position(|(s, _)| *s == bs) {
                    Some(i) => &by_size[i].1,
                    None => {
                        by_size.push((bs, key.hashes(bs)));
                        &by_size[by_size.len() - 1].1
                    }
                };
                (w.matched(hashes), hashes.len())
            })
            .collect();
        let balanced = self.skewed(&loads);
        let index = if balanced {
            least(&self.turn)
        } else {
            argmin_rotating(workers.len(), &self.turn, |i| {
                let (hit, total) = matched[i];
                (total - hit) as f64 + self.tuning.decode_weight * loads[i] as f64
            })
        };
        let bs = workers[index].block_size();
        if let Some((_, hashes)) = by_size.iter().find(|(s, _)| *s == bs) {
            workers[index].predict(hashes);
        }
        Choice {
            index,
            matched_blocks: matched[index].0,
            prompt_blocks: matched[index].1,
            balanced,
        }
    }
}

#[cfg(test)]
mod tests {
    use pagoda_block_hash::root_hash;
    use pagoda_kv_events::WireEvent;

    use super::*;
    use crate::config::WorkerSpec;
    use crate::worker::{Health, InFlight};

    fn worker(port: u16) -> Arc<Worker> {
        let spec = WorkerSpec::parse(&format!("http://127.0.0.1:{port}"));
        let w = Arc::new(Worker::new(spec.unwrap_or_else(|e| panic!("{e}"))));
        w.set_health(Health::Ready);
        w
    }

    fn busy(w: &Arc<Worker>, n: usize) -> Vec<InFlight> {
        (0..n).map(|_| w.start()).collect()
    }

    #[test]
    fn the_holder_wins_until_load_is_skewed() {
        let (a, b) = (worker(1), worker(2));
        let key = RoutingKey::new((0..160).collect(), root_hash("0"), None, None, None);
        let hashes = key.hashes(16);
        assert_eq!(hashes.len(), 10);
        if let Ok(mut ix) = b.index.lock() {
            ix.apply(&WireEvent::BlockStored {
                block_hashes: hashes,
                parent_block_hash: None,
                token_ids: (0..160).collect(),
                block_size: 16,
            });
        }
        let ws = [Arc::clone(&a), Arc::clone(&b)];
        let policy = CacheAware::new(CacheAwareTuning::default());
        for _ in 0..3 {
            let c = policy.select(&ws, &key);
            assert_eq!((c.index, c.matched_blocks, c.prompt_blocks), (1, 10, 10));
        }
        // Two requests in flight cost 8 blocks, still less than the 10 uncached on `a`.
        let _two = busy(&b, 2);
        assert_eq!(policy.select(&ws, &key).index, 1);
        // Three cost 12: `a` is cheaper.
        let _three = busy(&b, 1);
        assert_eq!(policy.select(&ws, &key).index, 0);
        // Skew (max - min > 8 and max > 2 x min) overrides the cost even for a full hit.
        let _a = busy(&a, 1);
        let _many = busy(&b, 7);
        let c = policy.select(&ws, &key);
        assert_eq!((c.index, c.balanced), (0, true));
        // Without a prompt: least load.
        assert_eq!(policy.select(&ws, &RoutingKey::none()).index, 0);
    }
}
