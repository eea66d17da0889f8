//! Sampling of one step's logits rows (`sample_rows`), spread over the kernel pool, and the
//! verification of proposed tokens against them (`verify`), which keeps the target's
//! distribution exactly: one-hot proposals by comparing draws, a draft model's sampled ones by
//! the rejection rule against the draft's distribution.

use std::collections::HashMap;
use std::sync::Mutex;

use pagoda_core::{ConstraintError, SeqId};

use super::seq_state::{RowPlan, SeqState};
use crate::sampler::{Sampled, Sampler};

/// One sequence's sampling job of a step: its sampler, its rows (one, or one per proposed
/// token plus one), the proposals, and where the result goes.
struct SampleJob<'a> {
    sampler: &'a mut Sampler,
    rows: &'a [f32],
    drafts: &'a [u32],
    /// The draft model's distribution for each proposal (empty for one-hot proposals).
    draft_probs: &'a [Vec<f32>],
    result: Option<Result<Vec<Sampled>, ConstraintError>>,
}

/// Verifies `drafts` against `rows` (`drafts.len() + 1` rows of `vocab`): the sampler draws at
/// each position in turn, exactly as it would without speculation, and the run goes on while
/// its draw equals the proposal. For greedy requests that keeps the longest prefix equal to
/// the target's argmax; for sampled ones it is rejection sampling with a one-hot proposal
/// (accept with probability p(x), else a draw from p without x, renormalised), so the output
/// distribution is the target's. Penalties, bias, the grammar and min_tokens advance token by
/// token, so each row sees the state its position would have had. A proposal that comes with
/// its draft distribution q (a draft model sampling for a sampled request) is checked with
/// `Sampler::verify_draft` instead: accepted with probability min(1, p/q), else replaced by a
/// draw from max(p - q, 0); the bonus token after a fully accepted run is a plain draw.
fn verify(
    sampler: &mut Sampler,
    rows: &[f32],
    drafts: &[u32],
    draft_probs: &[Vec<f32>],
    vocab: usize,
) -> Result<Vec<Sampled>, ConstraintError> {
    let mut run = Vec::with_capacity(drafts.len() + 1);
    for (i, row) in rows.chunks_exact(vocab).enumerate() {
        let (s, accepted) = match (drafts.get(i), draft_probs.get(i)) {
            (Some(&x), Some(q)) => sampler.verify_draft(row, x, q)?,
            (x, _) => {
                let s = sampler.sample(row)?;
                let accepted = x == Some(&s.token_id);
                (s, accepted)
            }
        };
        run.push(s);
        if !accepted {
            break;
        }
    }
    Ok(run)
}

/// Samples every plan that samples, one result per plan (`None` where it does not). Each
/// sequence's sampler is independent and deterministic, so the rows are spread over the
/// kernel pool: at 32 streams and a 262k vocabulary one core would spend milliseconds here
/// while the other idles. Results do not depend on which thread ran a job.
pub(super) fn sample_rows(
    seqs: &mut HashMap<SeqId, SeqState>,
    plans: &[RowPlan],
    logits: &[f32],
    vocab: usize,
) -> Vec<Option<Result<Vec<Sampled>, ConstraintError>>> {
    // Plan index of each sampling sequence, to hand out one `&mut Sampler` per sequence.
    let slot: HashMap<SeqId, usize> = plans
        .iter()
        .enumerate()
        .filter(|(_, p)| p.samples)
        .map(|(i, p)| (p.seq_id, i))
        .collect();
    let mut jobs: Vec<(usize, Mutex<SampleJob<'_>>)> = Vec::with_capacity(slot.len());
    for (id, st) in seqs.iter_mut() {
        let Some(&i) = slot.get(id) else {
            continue;
        };
        let p = &plans[i];
        // With prompt logprobs or proposals every row came back; otherwise only the last one.
        let last = if p.pl_rows > 0 || !p.drafts.is_empty() {
            p.first_row + p.num_rows - 1
        } else {
            p.first_row
        };
        let first = last - p.drafts.len();
        let job = SampleJob {
            sampler: &mut st.sampler,
            rows: &logits[first * vocab..(last + 1) * vocab],
            drafts: &p.drafts,
            draft_probs: &p.draft_probs,
            result: None,
        };
        jobs.push((i, Mutex::new(job)));
    }
    // The lock is uncontended: job `t` is only ever touched by the task `t`.
    pagoda_kernels::parallel::run(jobs.len(), &|t| {
        if let Ok(mut job) = jobs[t].1.lock() {
            let job = &mut *job;
            job.result = Some(verify(
                job.sampler,
                job.rows,
                job.drafts,
                job.draft_probs,
                vocab,
            ));
        }
    });
    let mut results: Vec<_> = plans.iter().map(|_| None).collect();
    for (i, job) in jobs {
        results[i] = job.into_inner().ok().and_then(|j| j.result);
    }
    results
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use pagoda_core::SamplingParams;

    const V: usize = 6;

    fn softmax(row: &[f32]) -> Vec<f64> {
        let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let e: Vec<f64> = row.iter().map(|&l| f64::from(l - m).exp()).collect();
        let z: f64 = e.iter().sum();
        e.into_iter().map(|x| x / z).collect()
    }

    /// Pearson's statistic of `counts` against `probs`.
    fn chi_square(counts: &[u64], probs: &[f64]) -> f64 {
        let n: u64 = counts.iter().sum();
        counts
            .iter()
            .zip(probs)
            .map(|(&c, &p)| {
                let e = p * n as f64;
                (c as f64 - e).powi(2) / e
            })
            .sum()
    }

    /// 99.9th percentile of chi-square with 5 degrees of freedom.
    const CRITICAL_DF5: f64 = 20.52;

    /// Over many seeds, the verified run's first token is distributed as the target's softmax
    /// whatever was proposed, and its second token (given the first proposal was accepted) as
    /// the next row's: acceptance and the residual draw are both right. A verifier that always
    /// accepted, or that drew the residual from the full distribution, fails the same test.
    #[test]
    fn verification_keeps_the_target_distribution() {
        let row0 = [1.0f32, 0.2, -0.5, 2.0, 0.0, 0.7];
        let row1 = [0.3f32, 1.5, 0.1, -1.0, 0.9, 0.0];
        let rows: Vec<f32> = row0.iter().chain(&row1).chain(&row1).copied().collect();
        let drafts = [3u32, 4];
        let (p0, p1) = (softmax(&row0), softmax(&row1));
        let mut first = [0u64; V];
        let mut second = [0u64; V];
        let mut accepted_first = 0u64;
        let n = 40_000;
        for seed in 0..n {
            let params = SamplingParams {
                temperature: 1.0,
                seed: Some(seed),
                ..Default::default()
            };
            let mut sampler = Sampler::new(params, 0);
            let run = verify(&mut sampler, &rows, &drafts, &[], V).unwrap();
            assert!(!run.is_empty() && run.len() <= 3);
            first[run[0].token_id as usize] += 1;
            if run[0].token_id == drafts[0] {
                accepted_first += 1;
                second[run[1].token_id as usize] += 1;
            }
            // The run stops at the first token that differs from its proposal.
            for (i, s) in run.iter().enumerate().take(run.len() - 1) {
                assert_eq!(s.token_id, drafts[i]);
            }
        }
        assert!(chi_square(&first, &p0) < CRITICAL_DF5, "{first:?}");
        assert!(chi_square(&second, &p1) < CRITICAL_DF5, "{second:?}");
        // Acceptance of the first proposal happens with probability p(x).
        let rate = accepted_first as f64 / n as f64;
        assert!((rate - p0[3]).abs() < 0.01, "{rate} vs {}", p0[3]);
        // The test has power: accepting every proposal would put all mass on token 3.
        let mut always = [0u64; V];
        always[3] = n;
        assert!(chi_square(&always, &p0) > 1000.0);
    }
}
