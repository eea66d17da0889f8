//! The tenant-fair order of the waiting queue: deficit round robin over tenants, measured in
//! tokens, in its counter form (the limit of DRR as the quantum shrinks to one token). Each
//! tenant's `served` counts the tokens computed for it, prompt and generated (charged by the
//! scheduler every step, running sequences included), divided by its weight; the waiting tenant
//! served least goes next, FCFS within a tenant.
//!
//! A tenant that starts waiting joins at most two step budgets behind the least-served waiting
//! tenant (at the floor when nobody waits), or at its own count if that is higher: as in DRR,
//! where an emptied queue's deficit resets, idling banks only a bounded credit, and capacity
//! used while nobody else waited is not held against it.
//!
//! A step admits only from tenants within one step budget of the least served: when a tenant
//! under its share is waiting, a tenant far over it gets no new prompts into that step, so the
//! step that computes the newcomer's prompt is not made long by the flood's (work conservation
//! yields for one step; the flood's running sequences keep decoding).

use std::collections::{BTreeMap, VecDeque};

use crate::request::SeqId;
use crate::tenant::Tenant;

/// Fixed-point scale of the weighted counts, so that a weight divides a token count exactly
/// enough for the order (a count is tokens * SCALE / weight).
const SCALE: u128 = 1 << 20;

#[derive(Debug)]
struct TenantQueue {
    weight: u32,
    served: u128,
    /// Fresh (never run) sequences of this tenant: (arrival, seq, tokens to compute).
    seqs: VecDeque<(u64, SeqId, usize)>,
}

impl TenantQueue {
    fn weighted(&self, tokens: usize) -> u128 {
        tokens as u128 * SCALE / u128::from(self.weight.max(1))
    }

    fn charge(&mut self, tokens: usize) {
        self.served += self.weighted(tokens);
    }
}

/// Waiting sequences grouped by tenant; preempted ones first, by arrival.
#[derive(Debug)]
pub struct FairQueue {
    tenants: BTreeMap<u32, TenantQueue>,
    preempted: VecDeque<(u64, SeqId)>,
    /// Monotone: where a tenant joins when nobody else is waiting.
    floor: u128,
    len: usize,
    /// One step's token budget, in counts.
    step: u128,
}

impl FairQueue {
    /// A queue for steps of `step_tokens` tokens (`max_num_batched_tokens`).
    pub fn new(step_tokens: usize) -> Self {
        Self {
            tenants: BTreeMap::new(),
            preempted: VecDeque::new(),
            floor: 0,
            len: 0,
            step: step_tokens.max(1) as u128 * SCALE,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues a sequence: `cost` is the tokens it has to compute when admitted.
    pub fn push(&mut self, seq: SeqId, arrival: u64, fresh: bool, tenant: Tenant, cost: usize) {
        self.len += 1;
        if !fresh {
            let at = self.preempted.partition_point(|(a, _)| *a <= arrival);
            self.preempted.insert(at, (arrival, seq));
            return;
        }
        let others = self.min_waiting(Some(tenant.id));
        let (floor, credit) = (self.floor, 2 * self.step);
        let q = self.entry(tenant);
        if q.seqs.is_empty() {
            q.served = match others {
                Some(least) => q.served.max(least.saturating_sub(credit)),
                None => floor,
            };
        }
        let at = q.seqs.partition_point(|(a, _, _)| *a <= arrival);
        q.seqs.insert(at, (arrival, seq, cost));
        self.raise_floor();
    }

    /// Charges `tokens` computed this step to `tenant`.
    pub fn charge(&mut self, tenant: Tenant, tokens: usize) {
        self.entry(tenant).charge(tokens);
        self.raise_floor();
    }

    pub fn remove(&mut self, seq: SeqId) -> bool {
        if let Some(i) = self.preempted.iter().position(|(_, s)| *s == seq) {
            self.preempted.remove(i);
            self.len -= 1;
            return true;
        }
        for q in self.tenants.values_mut() {
            if let Some(i) = q.seqs.iter().position(|(_, s, _)| *s == seq) {
                q.seqs.remove(i);
                self.len -= 1;
                return true;
            }
        }
        false
    }

    /// This step's admission order: preempted sequences, then one fresh sequence at a time from
    /// the least-served eligible tenant, each pick counted as if admitted (ties: the lower
    /// tenant id). Tenants more than a step budget above the least served wait for a later step.
    pub fn order(&self) -> Vec<SeqId> {
        let mut out: Vec<SeqId> = self.preempted.iter().map(|(_, s)| *s).collect();
        let Some(least) = self.min_waiting(None) else {
            return out;
        };
        let mut heads: Vec<(u128, u32, &TenantQueue, usize)> = self
            .tenants
            .iter()
            .filter(|(_, q)| !q.seqs.is_empty() && q.served <= least + self.step)
            .map(|(id, q)| (q.served, *id, q, 0))
            .collect();
        while let Some(i) = (0..heads.len()).min_by_key(|&i| (heads[i].0, heads[i].1)) {
            let (served, _, q, next) = &mut heads[i];
            let (_, seq, cost) = q.seqs[*next];
            out.push(seq);
            *served += q.weighted(cost);
            *next += 1;
            if *next == q.seqs.len() {
                heads.swap_remove(i);
            }
        }
        out
    }

    fn entry(&mut self, tenant: Tenant) -> &mut TenantQueue {
        let q = self.tenants.entry(tenant.id).or_insert(TenantQueue {
            weight: tenant.weight,
            served: 0,
            seqs: VecDeque::new(),
        });
        q.weight = tenant.weight.max(1);
        q
    }

    /// The least count among waiting tenants other than `except`.
    fn min_waiting(&self, except: Option<u32>) -> Option<u128> {
        self.tenants
            .iter()
            .filter(|(id, q)| Some(**id) != except && !q.seqs.is_empty())
            .map(|(_, q)| q.served)
            .min()
    }

    fn raise_floor(&mut self) {
        if let Some(least) = self.min_waiting(None) {
            self.floor = self.floor.max(least);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(id: u32, weight: u32) -> Tenant {
        Tenant { id, weight }
    }

    #[test]
    fn a_flood_does_not_bury_a_later_tenant() {
        let mut q = FairQueue::new(64);
        for i in 0..5 {
            q.push(i, i, true, t(1, 1), 10);
        }
        q.charge(t(1, 1), 50); // its running sequences computed 50 tokens
        q.push(100, 100, true, t(2, 1), 10);
        // Tenant 2 joins under tenant 1 (which has computed 50 tokens) and goes first.
        assert_eq!(q.order(), vec![100, 0, 1, 2, 3, 4]);
        q.push(101, 101, true, t(2, 1), 10);
        assert_eq!(q.order(), vec![100, 101, 0, 1, 2, 3, 4]);
        // Tenant 1 is now more than a step (64 tokens) over tenant 2: it waits a step.
        q.charge(t(1, 1), 100);
        assert_eq!(q.order(), vec![100, 101]);
    }

    #[test]
    fn weights_split_tokens_and_charges_reorder() {
        let mut q = FairQueue::new(64);
        for i in 0..4 {
            q.push(i, i, true, t(1, 1), 12);
            q.push(10 + i, 10 + i, true, t(2, 3), 12);
        }
        // Weight 3 takes three requests for each of weight 1's.
        assert_eq!(q.order(), vec![0, 10, 11, 12, 1, 13, 2, 3]);
        // Tenant 2's running sequences computed 150 tokens (50 weighted): tenant 1 goes first.
        q.charge(t(2, 3), 150);
        assert_eq!(q.order(), vec![0, 1, 2, 3, 10, 11, 12, 13]);
        // At 300 (100 weighted, over a step above tenant 1), tenant 2 sits this step out.
        q.charge(t(2, 3), 150);
        assert_eq!(q.order(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn preempted_first_and_idle_banks_no_credit() {
        let mut q = FairQueue::new(64);
        q.charge(t(1, 1), 1000); // served while nobody waited
        q.push(1, 1, true, t(1, 1), 10);
        q.push(2, 2, true, t(2, 1), 10);
        q.push(0, 0, false, t(2, 1), 50);
        // Tenant 1 joined alone at the floor (its idle-time use forgiven), tenant 2 level.
        assert_eq!(q.order(), vec![0, 1, 2]);
        assert!(q.remove(1) && q.remove(0) && !q.remove(0));
        assert_eq!((q.order(), q.len()), (vec![2], 1));
    }
}
