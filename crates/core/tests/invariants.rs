//! Property tests over random sequences of add / step / abort with a tiny KV pool (so
//! preemption and eviction happen constantly): no block leaked or double-freed, ref counts
//! always match the owners, every request finishes or is aborted, generated tokens are the
//! model's whatever happened on the way, and the pool is all free at the end; with speculation
//! on, too, whatever the proposals were; and with the KV split into full and sliding-window
//! groups whose blocks leave the table as the window passes (the fake executor checks every
//! key each chunk's window sees). The KV cache events of every step (or a resync) add up to
//! the pool's cached set (to the first group's part of it when there are several), and each
//! `BlockStored` rehashes from its parent and tokens. With a lower KV tier (a fake disk), evicted
//! blocks are saved and read back into ordinary cached blocks under the same checks. Requests carry LoRA adapters too: never more than
//! `max_loras` distinct ones run at once, and requests of every adapter still finish.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::{HashMap, HashSet};

use common::*;
use pagoda_core::kv::KvGroup;
use pagoda_core::kv::block_hash::{ExtraKeys, hash_block, root_hash};
use pagoda_core::kv::{BlockHash, KvEvent};
use pagoda_core::{
    FinishReason, NumSpecTokens, SchedulerConfig, SchedulingPolicy, SpecConfig, SpecMethod, Tenant,
};
use proptest::prelude::*;

/// Applies `events` to `set` (what a subscriber keeps), checking each stored block's hash.
fn apply_events(set: &mut HashSet<BlockHash>, events: Vec<KvEvent>) -> Result<(), TestCaseError> {
    let root = root_hash("0");
    for e in events {
        match e {
            KvEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
                lora_id,
                ..
            } => {
                let first = parent_block_hash.is_none();
                let mut parent = parent_block_hash.unwrap_or(root);
                // The ops use no salt; the adapter (when any) is on every block.
                let keys = ExtraKeys {
                    lora_id,
                    cache_salt: None,
                };
                for (i, h) in block_hashes.iter().enumerate() {
                    let toks = &token_ids[i * block_size..(i + 1) * block_size];
                    let extra = keys.encode(first && i == 0);
                    prop_assert_eq!(hash_block(&parent, toks, &extra), *h);
                    parent = *h;
                    set.insert(*h);
                }
            }
            KvEvent::BlockRemoved { block_hashes } => {
                for h in block_hashes {
                    prop_assert!(set.remove(&h), "removed a block never stored");
                }
            }
            KvEvent::AllBlocksCleared => set.clear(),
        }
    }
    Ok(())
}

#[derive(Clone, Debug)]
enum Op {
    Add {
        prompt: Vec<u32>,
        max_tokens: u32,
        n: u32,
        priority: i32,
        /// 0: the base model, else adapter 1..=3.
        lora: u8,
    },
    Step,
    Abort(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        // A small alphabet and shared stems make prefix hits common.
        2 => (
            0usize..3,
            prop::collection::vec(0u32..4, 1..20),
            1u32..12,
            1u32..3,
            -2i32..2,
            0u8..4
        )
            .prop_map(|(stem, tail, max_tokens, n, priority, lora)| {
                let mut prompt: Vec<u32> = (0..stem as u32 * 4).collect();
                prompt.extend(tail);
                Op::Add {
                    prompt,
                    max_tokens,
                    n,
                    priority,
                    lora,
                }
            }),
        3 => Just(Op::Step),
        1 => (0usize..8).prop_map(Op::Abort),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn no_leaks_no_double_frees_and_right_tokens(
        ops in prop::collection::vec(op(), 1..60),
        caching in any::<bool>(),
        policy in 0u8..3,
        max_batched in 4usize..40,
        threshold in 0usize..8,
        spec_k in 0usize..5,
        wrong_every in 0u32..4,
        layout in 0u8..3,
        window in 1usize..14,
        max_loras in 0usize..3,
        tier in 0u8..3,
    ) {
        let config = SchedulerConfig {
            max_num_batched_tokens: max_batched,
            long_prefill_token_threshold: threshold,
            max_num_seqs: 4,
            max_model_len: 48,
            policy: [SchedulingPolicy::Fcfs, SchedulingPolicy::Priority, SchedulingPolicy::Fair]
                [usize::from(policy)],
            max_loras,
            ..Default::default()
        };
        // One full group (the classic pool), or full and sliding groups sharing the pool, sized
        // so a lone sequence always fits (more groups, more blocks per token).
        let groups = match layout {
            0 => vec![KvGroup::FULL],
            1 => vec![KvGroup::FULL, KvGroup::sliding(window)],
            _ => vec![KvGroup::sliding(window), KvGroup::FULL, KvGroup::sliding(window + 5)],
        };
        let num_blocks = 12 * groups.len();
        let single_group = groups.len() == 1;
        let mut core = engine_with_groups(num_blocks, 4, config, caching, groups);
        core.enable_kv_events();
        // A lower tier (0: none; 1: every evicted block kept; 2: some lost): blocks read back
        // must hold their tokens (the fake executor checks every key it attends to).
        if tier > 0 {
            let t = std::sync::Arc::new(FakeTier::new(if tier == 2 { 3 } else { 0 }));
            core.executor_mut().tier = Some(std::sync::Arc::clone(&t));
            core.set_kv_tier(t);
        }
        let mut subscriber: HashSet<BlockHash> = HashSet::new();
        let mut ops_done = 0usize;
        if spec_k > 0 {
            // Proposals right and wrong, full and short: tokens, blocks and caching unchanged.
            core.enable_speculation(SpecConfig {
                method: SpecMethod::Suffix,
                num_speculative_tokens: NumSpecTokens::Fixed(spec_k),
            });
            core.executor_mut().wrong_every = wrong_every;
        }
        let mut live: Vec<u64> = Vec::new();
        let mut prompts: HashMap<u64, (Vec<u32>, u32, u32)> = HashMap::new();
        let mut tokens: HashMap<(u64, u32), Vec<u32>> = HashMap::new();
        let mut finished: HashMap<(u64, u32), FinishReason> = HashMap::new();
        let mut next_id = 0u64;
        let record = |outs: Vec<pagoda_core::EngineOutput>,
                          tokens: &mut HashMap<(u64, u32), Vec<u32>>,
                          finished: &mut HashMap<(u64, u32), FinishReason>| {
            for o in outs {
                let key = (o.request_id, o.index);
                tokens.entry(key).or_default().extend(o.new_token_ids);
                if let Some(r) = o.finish_reason {
                    prop_assert!(finished.insert(key, r).is_none(), "finished twice");
                }
            }
            Ok(())
        };
        for op in ops {
            match op {
                Op::Add { prompt, max_tokens, n, priority, lora } => {
                    let mut r = request(next_id, prompt.clone(), max_tokens);
                    if lora > 0 {
                        let l = pagoda_core::LoraRef::new(format!("a{lora}"), u64::from(lora), std::sync::Arc::new(()));
                        r.extra_keys.lora_id = Some(l.digest());
                        r.params.lora = Some(l);
                    }
                    r.params.n = n;
                    r.priority = priority;
                    r.tenant = Tenant { id: (next_id % 3) as u32, weight: 1 + (next_id % 2) as u32 };
                    core.add_request(r).unwrap();
                    prompts.insert(next_id, (prompt, max_tokens, n));
                    live.push(next_id);
                    next_id += 1;
                }
                Op::Step => {
                    let outs = core.step();
                    record(outs, &mut tokens, &mut finished)?;
                }
                Op::Abort(i) => {
                    if !live.is_empty() {
                        let id = live.remove(i % live.len());
                        let outs = core.abort(id);
                        record(outs, &mut tokens, &mut finished)?;
                    }
                }
            }
            core.scheduler().kv().check_invariants().map_err(TestCaseError::fail)?;
            ops_done += 1;
            let events = if ops_done.is_multiple_of(7) { core.kv_resync_events() } else { core.take_kv_events() };
            apply_events(&mut subscriber, events)?;
            let cached: HashSet<BlockHash> = core.scheduler().kv().pool().cached_hashes().copied().collect();
            // Only the first group's blocks are published (the others' keys are mixed with
            // their group and mean nothing to a subscriber).
            if single_group {
                prop_assert_eq!(&subscriber, &cached);
            } else {
                prop_assert!(subscriber.is_subset(&cached));
            }
            let running = core.stats().running_loras.len();
            prop_assert!(max_loras == 0 || running <= max_loras, "{} adapters run, max {}", running, max_loras);
        }
        let mut guard = 0;
        while core.has_work() {
            let outs = core.step();
            record(outs, &mut tokens, &mut finished)?;
            core.scheduler().kv().check_invariants().map_err(TestCaseError::fail)?;
            guard += 1;
            prop_assert!(guard < 10_000, "engine did not drain");
        }
        let kv = core.scheduler().kv();
        prop_assert_eq!(kv.pool().num_free(), num_blocks);
        prop_assert_eq!(kv.num_tables(), 0);
        for (id, (prompt, max_tokens, n)) in &prompts {
            for index in 0..*n {
                let key = (*id, index);
                let reason = finished.get(&key);
                prop_assert!(reason.is_some(), "request {} seq {} never finished", id, index);
                let got = tokens.get(&key).cloned().unwrap_or_default();
                let want = expected(prompt, *max_tokens as usize);
                match reason {
                    Some(FinishReason::Length) => prop_assert_eq!(&got, &want),
                    Some(FinishReason::Abort) => prop_assert_eq!(&got[..], &want[..got.len()]),
                    other => prop_assert!(false, "unexpected finish {:?}", other),
                }
            }
        }
    }
}
