//! Exactness of sampled speculation with a draft model: the draft samples its proposals from
//! its own distribution q and the verifier accepts with min(1, p/q), else draws from the
//! residual. Over thousands of seeded requests, the tokens that come out of verification are
//! distributed as the target's own softmax, by a chi-square test against probabilities
//! computed from the target's logits (99.9% critical value; deterministic given the seeds),
//! and the same counts fail against the draft's law (what accepting every draft would give).
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use crate::common;

use pagoda_core::{EngineRequest, NumSpecTokens, SamplingParams, SpecConfig, SpecMethod};
use pagoda_kernels::quant::GgmlType;
use pagoda_model::{CpuExecutor, EngineSetup, build_engine_with_draft};
use pagoda_testkit::tiny_model::TinyModel;

const TOP_K: usize = 8;
const TEMPERATURE: f32 = 1.0;
const SAMPLES: u64 = 2000;

/// The processed distribution of the next token after `context` under `model`: the softmax of
/// the top-k logits over the temperature, written out independently of the sampler's code.
struct Reference {
    exec: CpuExecutor,
    cache: HashMap<Vec<u32>, Vec<f64>>,
}

impl Reference {
    fn new(model: &TinyModel) -> Self {
        Self {
            exec: CpuExecutor::new(common::tiny(model), 64, 16).unwrap(),
            cache: HashMap::new(),
        }
    }

    fn probs(&mut self, context: &[u32]) -> Vec<f64> {
        if let Some(p) = self.cache.get(context) {
            return p.clone();
        }
        let table: Vec<u32> = (0..context.len().div_ceil(16) as u32).collect();
        let logits = common::logits_in_chunks(&mut self.exec, context, &[context.len()], &table);
        let vocab = self.exec.vocab_size();
        let row = &logits[logits.len() - vocab..];
        let mut order: Vec<usize> = (0..vocab).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        let max = row[order[0]];
        let mut p = vec![0.0; vocab];
        for &i in &order[..TOP_K] {
            p[i] = (f64::from(row[i] - max) / f64::from(TEMPERATURE)).exp();
        }
        let z: f64 = p.iter().sum();
        p.iter_mut().for_each(|x| *x /= z);
        self.cache.insert(context.to_vec(), p.clone());
        p
    }
}

/// Pearson's statistic of `counts` against `expected` (bins under 5 expected merged into one)
/// and its degrees of freedom.
fn chi_square(counts: &[u64], expected: &[f64]) -> (f64, usize) {
    let (mut stat, mut bins) = (0.0, 0usize);
    let (mut rest_c, mut rest_e) = (0.0, 0.0);
    for (&c, &e) in counts.iter().zip(expected) {
        if e < 5.0 {
            rest_c += c as f64;
            rest_e += e;
        } else {
            stat += (c as f64 - e).powi(2) / e;
            bins += 1;
        }
    }
    if rest_e > 0.0 {
        stat += (rest_c - rest_e).powi(2) / rest_e;
        bins += 1;
    }
    (stat, bins.saturating_sub(1))
}

/// The 99.9th percentile of chi-square with `df` degrees of freedom (Wilson-Hilferty).
fn critical(df: usize) -> f64 {
    let k = df as f64;
    let z = 3.090;
    k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
}

/// Generates 4 tokens for each of `SAMPLES` seeds with the draft speculating 2 tokens per step,
/// and returns every request's tokens with the speculation counters.
fn generate(target: &TinyModel, draft: &TinyModel, prompt: &[u32]) -> (Vec<Vec<u32>>, (u64, u64)) {
    let setup = EngineSetup {
        kv_cache_memory: Some(32 << 20),
        max_model_len: Some(64),
        speculative: Some(SpecConfig {
            method: SpecMethod::DraftModel {
                path: "tiny".into(),
            },
            num_speculative_tokens: NumSpecTokens::Fixed(2),
        }),
        ..EngineSetup::default()
    };
    let (mut core, _) =
        build_engine_with_draft(common::tiny(target), Some(common::tiny(draft)), &setup).unwrap();
    let mut out = vec![Vec::new(); SAMPLES as usize];
    // In rounds under the waiting queue's limit.
    for round in (0..SAMPLES).collect::<Vec<_>>().chunks(1000) {
        for &seed in round {
            let params = SamplingParams {
                temperature: TEMPERATURE,
                top_k: TOP_K as u32,
                seed: Some(seed),
                max_tokens: 4,
                ignore_eos: true,
                ..Default::default()
            };
            core.add_request(EngineRequest {
                id: seed,
                prompt_token_ids: prompt.to_vec(),
                params,
                priority: 0,
                extra_keys: Default::default(),
                tenant: Default::default(),
            })
            .unwrap();
        }
        while core.has_work() {
            for o in core.step() {
                out[o.request_id as usize].extend(o.new_token_ids);
            }
        }
    }
    let c = core.stats().spec.unwrap();
    (out, (c.num_draft_tokens, c.num_accepted_tokens))
}

/// With a coarser quantization of the target as the draft (q near p but not equal: about
/// three proposals in four accepted, the rest replaced from the residual), the second and
/// third tokens, both produced by verification, follow the target's conditional law.
#[test]
fn draft_sampling_keeps_the_target_distribution() {
    let target = TinyModel::llama();
    let drafts = [(
        "requantized",
        TinyModel {
            matrix_type: Some(GgmlType::Q4_1),
            ..TinyModel::llama()
        },
    )];
    let prompt = common::prompt(12, 3, 250, 7);
    let mut p = Reference::new(&target);
    for (name, draft) in drafts {
        let (tokens, (proposed, accepted)) = generate(&target, &draft, &prompt);
        assert!(proposed > SAMPLES, "{name}: {proposed} proposals");
        assert!(
            accepted > 0 && accepted < proposed,
            "{name}: {accepted}/{proposed}"
        );
        let mut q = Reference::new(&draft);
        for pos in 1..3 {
            let vocab = target.vocab_size;
            let (mut counts, mut expected, mut if_always) =
                (vec![0u64; vocab], vec![0.0; vocab], vec![0.0; vocab]);
            for t in &tokens {
                assert_eq!(t.len(), 4, "{name}");
                let ctx: Vec<u32> = prompt.iter().chain(&t[..pos]).copied().collect();
                counts[t[pos] as usize] += 1;
                for (e, x) in expected.iter_mut().zip(p.probs(&ctx)) {
                    *e += x;
                }
                for (e, x) in if_always.iter_mut().zip(q.probs(&ctx)) {
                    *e += x;
                }
            }
            let (stat, df) = chi_square(&counts, &expected);
            assert!(
                stat < critical(df),
                "{name}, token {pos}: chi-square {stat:.1} on {df} df (critical {:.1})",
                critical(df)
            );
            // The test has power: accepting every draft (output law q) would fail it.
            let (wrong, df) = chi_square(&counts, &if_always);
            assert!(wrong > 3.0 * critical(df), "{name}: {wrong:.1} on {df} df");
        }
    }
}
