//! The scheduler and KV manager against a fake executor with a tiny pool: exact block ids,
//! free-queue order, prefix-hit lengths, `num_computed_tokens` after each step, chunking, and
//! the preemption victim.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::*;
use pagoda_core::kv::{KvGroup, NULL_BLOCK};
use pagoda_core::{
    AddRequestError, FinishReason, LimitError, NumSpecTokens, SchedulerConfig, SchedulingPolicy,
    SpecConfig, SpecMethod,
};

fn sched(max_batched: usize, threshold: usize) -> SchedulerConfig {
    SchedulerConfig {
        max_num_batched_tokens: max_batched,
        long_prefill_token_threshold: threshold,
        max_model_len: 1024,
        ..Default::default()
    }
}

#[test]
fn blocks_prefix_hits_and_free_queue_order() {
    let mut core = engine(16, 4, sched(64, 0), true);
    let prompt: Vec<u32> = (0..10).collect();
    core.add_request(request(1, prompt.clone(), 3)).unwrap();
    let first = core.step();
    let step = &core.executor().steps[0];
    assert_eq!(step.scheduled.len(), 1);
    assert_eq!(step.scheduled[0].block_ids[0], vec![0, 1, 2]);
    assert_eq!(step.scheduled[0].num_scheduled_tokens, 10);
    let seq = step.scheduled[0].seq_id;
    assert_eq!(
        core.scheduler().request(seq).unwrap().num_computed_tokens,
        10
    );
    let out = run_to_end(&mut core);
    let mut got = first[0].new_token_ids.clone();
    got.extend(&out[&1]);
    assert_eq!(got, expected(&prompt, 3));
    // Freed tail first: 2, 1, 0 join the tail of the queue, keeping their hashes.
    let pool = core.scheduler().kv().pool();
    let mut want: Vec<u32> = (3..16).collect();
    want.extend([2, 1, 0]);
    assert_eq!(pool.free_queue(), want);

    // Shares the first two blocks (8 tokens), then differs.
    let mut p2: Vec<u32> = prompt[..8].to_vec();
    p2.extend([500, 501]);
    core.add_request(request(2, p2.clone(), 2)).unwrap();
    let outs = core.step();
    let step = core.executor().steps.last().unwrap();
    assert_eq!(step.scheduled[0].num_computed_tokens, 8);
    assert_eq!(step.scheduled[0].num_scheduled_tokens, 2);
    assert_eq!(step.scheduled[0].block_ids[0], vec![0, 1, 3]);
    assert_eq!(outs[0].num_cached_tokens, 8);
    let mut want: Vec<u32> = (4..16).collect();
    want.push(2);
    assert_eq!(core.scheduler().kv().pool().free_queue(), want);
    let out = run_to_end(&mut core);
    assert_eq!(out[&2].len(), 1);
    let stats = core.stats();
    assert_eq!(stats.prefix_hit_tokens, 8);
    assert_eq!(stats.prefix_queried_tokens, 20);
}

#[test]
fn a_hit_never_covers_the_last_prompt_token() {
    let mut core = engine(16, 4, sched(64, 0), true);
    let prompt: Vec<u32> = (0..8).collect();
    core.add_request(request(1, prompt.clone(), 2)).unwrap();
    run_to_end(&mut core);
    core.add_request(request(2, prompt.clone(), 2)).unwrap();
    core.step();
    let step = core.executor().steps.last().unwrap();
    // 8 tokens = 2 full cached blocks, but the last token must be computed: 1 block hit.
    assert_eq!(step.scheduled[0].num_computed_tokens, 4);
    assert_eq!(step.scheduled[0].num_scheduled_tokens, 4);
    let out = run_to_end(&mut core);
    assert_eq!(out[&2], expected(&prompt, 2)[1..].to_vec());
}

#[test]
fn no_prefix_caching_computes_everything() {
    let mut core = engine(16, 4, sched(64, 0), false);
    let prompt: Vec<u32> = (0..10).collect();
    core.add_request(request(1, prompt.clone(), 2)).unwrap();
    run_to_end(&mut core);
    core.add_request(request(2, prompt.clone(), 2)).unwrap();
    core.step();
    let step = core.executor().steps.last().unwrap();
    assert_eq!(step.scheduled[0].num_computed_tokens, 0);
    assert_eq!(step.scheduled[0].num_scheduled_tokens, 10);
}

#[test]
fn latest_arrival_is_preempted_and_recomputed() {
    let mut core = engine(4, 4, sched(64, 0), false);
    let a: Vec<u32> = (0..6).collect();
    let b: Vec<u32> = (100..106).collect();
    core.add_request(request(1, a.clone(), 8)).unwrap();
    core.add_request(request(2, b.clone(), 8)).unwrap();
    core.step(); // both prefill: 2 blocks each
    let step = &core.executor().steps[0];
    assert_eq!(step.scheduled[0].block_ids[0], vec![0, 1]);
    assert_eq!(step.scheduled[1].block_ids[0], vec![2, 3]);
    let seq_b = step.scheduled[1].seq_id;
    core.step(); // position 6: 7 tokens fit in 2 blocks
    core.step(); // position 7: 8 tokens, still 2 blocks
    core.step(); // position 8 needs a third block for A: B (latest) is preempted
    let step = core.executor().steps.last().unwrap();
    assert_eq!(step.preempted_seq_ids, vec![seq_b]);
    assert_eq!(step.scheduled.len(), 1);
    // B's blocks went back tail first, so its tail block (3) is handed out first.
    assert_eq!(step.scheduled[0].block_ids[0], vec![3]);
    assert_eq!(core.scheduler().num_waiting(), 1);
    assert_eq!(core.stats().preemptions, 1);
    let out = run_to_end(&mut core);
    // B was recomputed from scratch after A finished and still gives the same tokens.
    assert_eq!(out[&1], expected(&a, 8)[4..].to_vec()); // A sampled in all 4 steps
    assert_eq!(out[&2], expected(&b, 8)[3..].to_vec());
    let resumed = core
        .executor()
        .steps
        .iter()
        .flat_map(|s| &s.scheduled)
        .find(|s| s.seq_id == seq_b && s.resumed)
        .unwrap();
    assert_eq!(resumed.num_computed_tokens, 0);
    assert_eq!(resumed.num_scheduled_tokens, 9); // 6 prompt + 3 generated, recomputed
}

#[test]
fn lowest_priority_is_preempted_first() {
    let mut config = sched(64, 0);
    config.policy = SchedulingPolicy::Priority;
    let mut core = engine(4, 4, config, false);
    let mut hi = request(1, (0..6).collect(), 8);
    hi.priority = -1;
    let mut lo = request(2, (100..106).collect(), 8);
    lo.priority = 5;
    core.add_request(lo).unwrap(); // arrives first but has the lower priority
    core.add_request(hi).unwrap();
    for _ in 0..4 {
        core.step();
    }
    let victims: Vec<u64> = core
        .executor()
        .steps
        .iter()
        .flat_map(|s| s.preempted_seq_ids.clone())
        .collect();
    assert_eq!(victims, vec![0]); // seq 0 is request 2 (priority 5)
}

#[test]
fn long_prompts_are_chunked_beside_running_decodes() {
    let mut core = engine(64, 4, sched(16, 0), false);
    core.add_request(request(1, (0..4).collect(), 50)).unwrap();
    core.step();
    core.add_request(request(2, (200..240).collect(), 2))
        .unwrap();
    let mut computed = Vec::new();
    for _ in 0..4 {
        core.step();
        let s = core.executor().steps.last().unwrap();
        computed.push(
            s.scheduled
                .iter()
                .map(|x| (x.seq_id, x.num_computed_tokens, x.num_scheduled_tokens))
                .collect::<Vec<_>>(),
        );
    }
    // The decode always runs; the 40-token prompt takes the other 15 tokens of each step.
    assert_eq!(computed[0], vec![(0, 4, 1), (1, 0, 15)]);
    assert_eq!(computed[1], vec![(0, 5, 1), (1, 15, 15)]);
    assert_eq!(computed[2], vec![(0, 6, 1), (1, 30, 10)]);
    assert_eq!(computed[3], vec![(0, 7, 1), (1, 40, 1)]);
}

#[test]
fn threshold_caps_one_prompt_per_step() {
    let mut core = engine(64, 4, sched(100, 8), false);
    core.add_request(request(1, (0..20).collect(), 1)).unwrap();
    let mut chunks = Vec::new();
    while core.has_work() {
        core.step();
        chunks.push(core.executor().steps.last().unwrap().scheduled[0].num_scheduled_tokens);
    }
    assert_eq!(chunks, vec![8, 8, 4]);
}

#[test]
fn n_sequences_share_the_prompt_blocks() {
    let mut core = engine(32, 4, sched(64, 0), true);
    let prompt: Vec<u32> = (0..10).collect();
    let mut req = request(7, prompt.clone(), 3);
    req.params.n = 2;
    core.add_request(req).unwrap();
    let mut per_index = [Vec::new(), Vec::new()];
    let mut record = |outs: Vec<pagoda_core::EngineOutput>| {
        for o in outs {
            per_index[o.index as usize].extend(o.new_token_ids);
        }
    };
    record(core.step());
    // The second sequence waits while the first computes the shared blocks...
    assert_eq!(core.executor().steps[0].scheduled.len(), 1);
    record(core.step());
    // ...then takes them from the cache.
    let s = core.executor().steps.last().unwrap();
    assert_eq!(s.scheduled.len(), 2);
    assert_eq!(s.scheduled[1].num_computed_tokens, 8);
    assert_eq!(&s.scheduled[1].block_ids[0][..2], &[0, 1]);
    while core.has_work() {
        record(core.step());
    }
    // The fake model is deterministic, so both sequences give the prompt's continuation.
    assert_eq!(per_index[0], expected(&prompt, 3));
    assert_eq!(per_index[1], expected(&prompt, 3));
    assert_eq!(core.scheduler().kv().pool().num_free(), 32);
}

#[test]
fn requests_arriving_together_compute_a_shared_prefix_once() {
    // Four requests arrive in one step with a 24-token (6-block) system prompt and their own
    // 3-token questions; prompts are chunked 8 tokens at a time, so the prefix takes 3 steps.
    let mut core = engine(64, 4, sched(64, 8), true);
    let prefix: Vec<u32> = (100..124).collect();
    let prompts: Vec<Vec<u32>> = (0..4u32)
        .map(|i| {
            let mut p = prefix.clone();
            p.extend([300 + 3 * i, 301 + 3 * i, 302 + 3 * i]);
            p
        })
        .collect();
    for (i, p) in prompts.iter().enumerate() {
        core.add_request(request(i as u64, p.clone(), 1)).unwrap();
    }
    let out = run_to_end(&mut core);
    let steps = &core.executor().steps;
    // The first computes the prefix while the others wait for it (not 4 x 24 tokens), then
    // all four compute their questions beside each other from the cached prefix.
    let per_step: Vec<Vec<(usize, usize)>> = steps
        .iter()
        .map(|s| {
            s.scheduled
                .iter()
                .map(|x| (x.num_computed_tokens, x.num_scheduled_tokens))
                .collect()
        })
        .collect();
    assert_eq!(
        per_step,
        vec![
            vec![(0, 8)],
            vec![(8, 8)],
            vec![(16, 8)],
            vec![(24, 3), (24, 3), (24, 3), (24, 3)],
        ]
    );
    let stats = core.stats();
    assert_eq!(stats.prefix_hit_tokens, 3 * 24);
    for (i, p) in prompts.iter().enumerate() {
        assert_eq!(out[&(i as u64)], expected(p, 1));
    }
}

#[test]
fn abort_frees_blocks_and_reports() {
    let mut core = engine(16, 4, sched(64, 0), true);
    core.add_request(request(1, (0..10).collect(), 100))
        .unwrap();
    core.add_request(request(2, (50..60).collect(), 100))
        .unwrap();
    core.step();
    assert_eq!(core.scheduler().kv().pool().num_free(), 10);
    let outs = core.abort(1);
    assert_eq!(outs.len(), 1);
    assert_eq!(outs[0].finish_reason, Some(FinishReason::Abort));
    assert_eq!(core.scheduler().kv().pool().num_free(), 13);
    core.step();
    // The executor is told to drop the aborted sequence's state.
    assert_eq!(
        core.executor().steps.last().unwrap().finished_seq_ids,
        vec![0]
    );
    core.abort(2);
    assert!(!core.has_work());
    assert_eq!(core.scheduler().kv().pool().num_free(), 16);
}

#[test]
fn token_level_stops() {
    let mut core = engine(16, 4, sched(64, 0), false);
    let prompt: Vec<u32> = (0..5).collect();
    let generated = expected(&prompt, 5);
    let mut r = request(1, prompt.clone(), 50);
    r.params.stop_token_ids = vec![generated[2]];
    core.add_request(r).unwrap();
    let mut last = None;
    let mut toks = Vec::new();
    while core.has_work() {
        for o in core.step() {
            toks.extend(o.new_token_ids);
            last = o.finish_reason.or(last);
        }
    }
    assert_eq!(toks, generated[..3].to_vec());
    assert_eq!(last, Some(FinishReason::Stop(generated[2])));
}

#[test]
fn bad_requests_are_rejected_with_reasons() {
    let mut core = engine(16, 4, sched(64, 0), false);
    assert_eq!(
        core.add_request(request(1, vec![], 4)),
        Err(AddRequestError::Invalid(LimitError::EmptyPrompt))
    );
    assert!(matches!(
        core.add_request(request(2, vec![VOCAB + 5], 4)),
        Err(AddRequestError::Invalid(LimitError::BadToken {
            position: 0,
            ..
        }))
    ));
    assert!(matches!(
        core.add_request(request(3, vec![1; 1000], 100)),
        Err(AddRequestError::Invalid(LimitError::TooLong {
            prompt: 1000,
            max_tokens: 100,
            total: 1100,
            max_model_len: 1024
        }))
    ));
    let mut limited = sched(64, 0);
    limited.max_waiting_requests = 1;
    let mut core = engine(16, 4, limited, false);
    core.add_request(request(1, vec![1, 2], 4)).unwrap();
    assert_eq!(
        core.add_request(request(2, vec![1, 2], 4)),
        Err(AddRequestError::QueueFull {
            waiting: 1,
            requested: 1,
            limit: 1
        })
    );
}

#[test]
fn one_choice_is_aborted_and_the_others_run_on() {
    let mut core = engine(32, 4, sched(64, 0), true);
    let prompt: Vec<u32> = (0..10).collect();
    let mut req = request(7, prompt.clone(), 6);
    req.params.n = 3;
    core.add_request(req).unwrap();
    core.step();
    core.step();
    let out = core.abort_choice(7, 1).unwrap();
    assert_eq!(
        (out.index, out.finish_reason),
        (1, Some(FinishReason::Abort))
    );
    assert!(core.abort_choice(7, 1).is_none(), "already ended");
    let mut finished = Vec::new();
    while core.has_work() {
        for o in core.step() {
            if o.finish_reason.is_some() {
                finished.push((o.index, o.finish_reason));
            }
        }
    }
    finished.sort_by_key(|f| f.0);
    assert_eq!(
        finished,
        vec![
            (0, Some(FinishReason::Length)),
            (2, Some(FinishReason::Length))
        ]
    );
    assert_eq!(core.scheduler().kv().pool().num_free(), 32);
}

#[test]
fn speculation_verifies_several_tokens_per_step_and_gives_rejected_slots_back() {
    let prompt: Vec<u32> = (0..10).collect();
    let spec = SpecConfig {
        method: SpecMethod::Suffix,
        num_speculative_tokens: NumSpecTokens::Fixed(4),
    };
    let mut plain = engine(64, 4, sched(64, 0), true);
    plain.add_request(request(1, prompt.clone(), 40)).unwrap();
    let want = run_to_end(&mut plain);

    let mut core = engine(64, 4, sched(64, 0), true);
    core.enable_speculation(spec);
    core.executor_mut().wrong_every = 3;
    core.add_request(request(1, prompt.clone(), 40)).unwrap();
    let got = run_to_end(&mut core);
    assert_eq!(got, want);
    assert_eq!(got[&1], expected(&prompt, 40));
    let steps = &core.executor().steps;
    assert!(
        steps.len() < plain.executor().steps.len(),
        "{} steps with speculation",
        steps.len()
    );
    // K slots after the known token, never past max_tokens.
    assert!(steps.iter().any(|s| s.scheduled[0].num_spec_tokens == 4));
    let spec = core.stats().spec.unwrap();
    assert!(spec.num_accepted_tokens > 0 && spec.num_accepted_tokens < spec.num_draft_tokens);
    assert_eq!(
        spec.accepted_per_pos.iter().sum::<u64>(),
        spec.num_accepted_tokens
    );
    assert_eq!(core.scheduler().kv().pool().num_free(), 64);
    core.scheduler().kv().check_invariants().unwrap();
}

#[test]
fn a_request_caps_or_turns_off_its_own_speculation() {
    let prompt: Vec<u32> = (0..10).collect();
    let spec = SpecConfig {
        method: SpecMethod::Suffix,
        num_speculative_tokens: NumSpecTokens::Fixed(4),
    };
    for (cap, most) in [(Some(0), 0), (Some(2), 2), (None, 4)] {
        let mut core = engine(64, 4, sched(64, 0), true);
        core.enable_speculation(spec.clone());
        let mut req = request(1, prompt.clone(), 20);
        req.params.num_speculative_tokens = cap;
        core.add_request(req).unwrap();
        let got = run_to_end(&mut core);
        assert_eq!(got[&1], expected(&prompt, 20));
        let steps = &core.executor().steps;
        let k = steps.iter().map(|s| s.scheduled[0].num_spec_tokens).max();
        assert_eq!(k, Some(most), "cap {cap:?}");
        let c = core.stats().spec.unwrap();
        assert_eq!(c.num_draft_tokens == 0, most == 0, "{c:?}");
    }
}

/// A sequence chosen to speculate whose extra blocks do not fit decodes one token, and is
/// counted (`pagoda:spec_decode_num_unsupported_total`).
#[test]
fn speculation_short_of_blocks_is_counted_and_decodes_on() {
    // Two sequences fill the 6 blocks; K = 4 past a block's last free slot needs a 7th.
    let prompt: Vec<u32> = (0..10).collect();
    let other: Vec<u32> = (100..110).collect();
    let mut core = engine(6, 4, sched(64, 0), true);
    core.enable_speculation(SpecConfig {
        method: SpecMethod::Suffix,
        num_speculative_tokens: NumSpecTokens::Fixed(4),
    });
    core.add_request(request(1, prompt.clone(), 8)).unwrap();
    core.add_request(request(2, other.clone(), 8)).unwrap();
    let got = run_to_end(&mut core);
    assert_eq!(got[&1], expected(&prompt, 8));
    assert_eq!(got[&2], expected(&other, 8));
    let c = core.stats().spec.unwrap();
    assert!(c.num_unsupported > 0, "{c:?}");
    core.scheduler().kv().check_invariants().unwrap();
}

#[test]
fn sliding_groups_give_back_blocks_and_hit_only_their_window() {
    // Block 4, window 8: a query at p reads keys p-7..=p, so after 40 computed tokens the
    // sliding group needs blocks 8.. (keys 33..) and holds at most ceil(7/4) + 1 = 3 blocks.
    let groups = vec![KvGroup::FULL, KvGroup::sliding(8)];
    let mut core = engine_with_groups(64, 4, sched(16, 0), true, groups);
    let prompt: Vec<u32> = (0..40).collect();
    core.add_request(request(1, prompt.clone(), 4)).unwrap();
    let mut max_sliding = 0;
    while core.has_work() {
        core.step();
        let kv = core.scheduler().kv();
        kv.check_invariants().unwrap();
        if let Some(&seq) = core.scheduler().running().first() {
            let tables = kv.block_tables(seq);
            let real = |t: &Vec<u32>| t.iter().filter(|&&b| b != NULL_BLOCK).count();
            let computed = core.scheduler().request(seq).unwrap().num_computed_tokens;
            assert_eq!(real(&tables[0]), computed.div_ceil(4));
            max_sliding = max_sliding.max(real(&tables[1]));
            assert!(real(&tables[1]) <= 3, "sliding group holds {:?}", tables[1]);
        }
    }
    assert_eq!(max_sliding, 3);
    // The same prompt again: the full group hits its 9 blocks (36 tokens; the last token is
    // computed), the sliding group needs only blocks 7 and 8 (keys 29..35), still cached in
    // the free queue though they left the first request's window long ago.
    core.add_request(request(2, prompt.clone(), 1)).unwrap();
    core.step();
    let step = core.executor().steps.last().unwrap();
    assert_eq!(step.scheduled[0].num_computed_tokens, 36);
    let ids = &step.scheduled[0].block_ids;
    assert_eq!(ids[0].len(), 10);
    assert!(ids[1][..7].iter().all(|&b| b == NULL_BLOCK), "{:?}", ids[1]);
    assert!(ids[1][7..].iter().all(|&b| b != NULL_BLOCK));
    run_to_end(&mut core);
    core.scheduler().kv().check_invariants().unwrap();
    assert_eq!(core.scheduler().kv().pool().num_free(), 64);
}

#[test]
fn a_prefill_role_request_holds_its_prompt_blocks_until_they_are_shipped() {
    let mut core = engine(16, 4, sched(64, 0), true);
    let mut req = request(1, (0..10).collect(), 1);
    req.params.kv_transfer = Some(pagoda_core::kv::KvTransfer::Send {
        id: "t".into(),
        addr: "127.0.0.1:1".into(),
    });
    core.add_request(req).unwrap();
    let outs = core.step();
    assert_eq!(outs[0].finish_reason, Some(FinishReason::Length));
    // The two full prompt blocks stay held past the end; the partial third one is free.
    assert_eq!(core.scheduler().kv().pool().num_free(), 14);
    assert!(core.has_work(), "a step must still ship them");
    core.step();
    let sends = &core.executor().steps.last().unwrap().kv_sends;
    assert_eq!(sends.len(), 1);
    assert_eq!(sends[0].id, "t");
    let ids: Vec<u32> = sends[0].blocks.iter().map(|&(b, _)| b).collect();
    assert_eq!(ids, vec![0, 1]);
    // Released when named: nothing is held any more, and nothing is left to do.
    assert_eq!(core.scheduler().kv().pool().num_free(), 16);
    assert!(!core.has_work());
}

#[test]
fn a_decode_role_request_waits_for_its_transfer_then_runs() {
    let mut core = engine(16, 4, sched(64, 0), true);
    let tier = std::sync::Arc::new(FakeTier::new(0));
    core.executor_mut().tier = Some(std::sync::Arc::clone(&tier));
    core.set_kv_tier(tier.clone());
    tier.awaited.lock().unwrap().insert("t".into());
    let mut req = request(1, (0..10).collect(), 2);
    req.params.kv_transfer = Some(pagoda_core::kv::KvTransfer::Receive { id: "t".into() });
    core.add_request(req).unwrap();
    core.add_request(request(2, (50..60).collect(), 2)).unwrap();
    core.step();
    // The other request runs; this one waits (and the loop would sleep, not spin, if alone).
    let s = core.executor().steps.last().unwrap();
    assert_eq!(s.scheduled.len(), 1);
    assert_eq!(core.scheduler().num_awaiting_transfer(), 1);
    // The transfer failed or timed out: it prefills itself from the first token.
    tier.awaited.lock().unwrap().clear();
    let outs = run_to_end(&mut core);
    assert_eq!(outs[&1], expected(&(0..10).collect::<Vec<_>>(), 2));
    assert_eq!(core.scheduler().num_awaiting_transfer(), 0);
    assert_eq!(core.scheduler().kv().pool().num_free(), 16);
}
