//! Speculative sampling's rejection rule for a proposal drawn from a known distribution q:
//! accept x with probability min(1, p(x) / q(x)), else draw from max(p - q, 0) renormalised.
//! Whatever q is, the token that comes out is distributed as p (Leviathan et al., 2023).

/// Checks proposal `x` (drawn from `q`) against the target's `p`, both one probability per
/// id: `u_accept` and `u_resample` are uniform in [0, 1). Returns the token that comes out
/// and whether it is `x` accepted. `u_resample` is only read on a rejection.
pub(crate) fn accept_or_resample(
    p: &[f32],
    q: &[f32],
    x: u32,
    u_accept: f64,
    u_resample: impl FnOnce() -> f64,
) -> (u32, bool) {
    if u_accept < acceptance_probability(p, q, x) {
        return (x, true);
    }
    let residual = residual(p, q);
    // p == q up to rounding leaves no residual mass; then p itself is the right law.
    let from = if residual.iter().any(|&r| r > 0.0) {
        &residual
    } else {
        p
    };
    (super::distribution::draw_from(from, u_resample()), false)
}

/// min(1, p(x) / q(x)); 0 for a proposal outside either distribution.
pub(crate) fn acceptance_probability(p: &[f32], q: &[f32], x: u32) -> f64 {
    let (px, qx) = match (p.get(x as usize), q.get(x as usize)) {
        (Some(&px), Some(&qx)) => (f64::from(px), f64::from(qx)),
        _ => return 0.0,
    };
    if qx <= 0.0 {
        // The draft could not have drawn it; never accept what q does not explain.
        return 0.0;
    }
    (px / qx).min(1.0)
}

/// max(p - q, 0) per id, unnormalised (the draw normalises).
pub(crate) fn residual(p: &[f32], q: &[f32]) -> Vec<f32> {
    p.iter()
        .enumerate()
        .map(|(i, &pi)| (pi - q.get(i).copied().unwrap_or(0.0)).max(0.0))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The exact law of the output: sum over x of q(x) * [accept x, or reject then residual].
    fn output_law(p: &[f32], q: &[f32], wrong_residual: bool) -> Vec<f64> {
        let res = match residual(p, q) {
            r if wrong_residual || r.iter().all(|&x| x == 0.0) => {
                let _ = r;
                p.to_vec()
            }
            r => r,
        };
        let z: f64 = res.iter().map(|&r| f64::from(r)).sum();
        let mut law = vec![0.0; p.len()];
        for (x, &qx) in q.iter().enumerate() {
            let a = acceptance_probability(p, q, x as u32);
            law[x] += f64::from(qx) * a;
            for (y, &r) in res.iter().enumerate() {
                law[y] += f64::from(qx) * (1.0 - a) * f64::from(r) / z;
            }
        }
        law
    }

    fn chi_square(counts: &[u64], probs: &[f64]) -> f64 {
        let n: u64 = counts.iter().sum();
        counts
            .iter()
            .zip(probs)
            .filter(|(_, p)| **p > 0.0)
            .map(|(&c, &p)| {
                let e = p * n as f64;
                (c as f64 - e).powi(2) / e
            })
            .sum()
    }

    /// Hand-made pairs, including q with mass where p has none and p with mass where q has
    /// none: the rule's exact output law is p, and the acceptance rate is 1 - TV(p, q).
    #[test]
    fn the_rule_outputs_exactly_the_target_law() {
        let cases: [([f32; 4], [f32; 4]); 4] = [
            ([0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]),
            ([0.5, 0.5, 0.0, 0.0], [0.0, 0.2, 0.3, 0.5]),
            ([0.0, 0.0, 0.0, 1.0], [0.25, 0.25, 0.25, 0.25]),
            ([0.3, 0.3, 0.2, 0.2], [0.3, 0.3, 0.2, 0.2]),
        ];
        for (p, q) in cases {
            let law = output_law(&p, &q, false);
            for (l, &pi) in law.iter().zip(&p) {
                assert!((l - f64::from(pi)).abs() < 1e-6, "{p:?} {q:?}: {law:?}");
            }
            let accept: f64 = (0..4)
                .map(|x| f64::from(q[x]) * acceptance_probability(&p, &q, x as u32))
                .sum();
            let tv: f64 = p
                .iter()
                .zip(&q)
                .map(|(a, b)| f64::from((a - b).abs()))
                .sum::<f64>()
                / 2.0;
            assert!((accept - (1.0 - tv)).abs() < 1e-6);
        }
        // Sanity: resampling from p instead of the residual biases the law towards q.
        let (p, q) = cases[0];
        let wrong = output_law(&p, &q, true);
        assert!((wrong[0] - 0.1).abs() > 0.03, "{wrong:?}");
    }

    /// A draft whose output head keeps only the first ids (`Model::keep_head_rows`) gives a q
    /// shorter than p: it has no mass past its end, where p may have some. The law is still p,
    /// and a proposal past q's end (which such a draft cannot make) is never accepted.
    #[test]
    fn a_q_shorter_than_p_still_gives_the_target_law() {
        let p = [0.1f32, 0.2, 0.3, 0.25, 0.15];
        let q = [0.5f32, 0.3, 0.2];
        let law = output_law(&p, &q, false);
        assert_eq!(law.len(), p.len());
        for (l, &pi) in law.iter().zip(&p) {
            assert!((l - f64::from(pi)).abs() < 1e-6, "{law:?}");
        }
        assert_eq!(acceptance_probability(&p, &q, 4), 0.0);
    }

    /// The function itself, driven by seeded uniforms with x drawn from q, lands on p by a
    /// chi-square test (99.9% critical value for 3 degrees of freedom); the same test rejects
    /// the wrong residual's counts.
    #[test]
    fn seeded_draws_pass_a_chi_square_test_against_p() {
        let p = [0.1f32, 0.2, 0.3, 0.4];
        let q = [0.4f32, 0.3, 0.2, 0.1];
        let critical = 16.27;
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let (mut right, mut wrong) = ([0u64; 4], [0u64; 4]);
        for _ in 0..20_000 {
            let x = super::super::distribution::draw_from(&q, rng.random::<f64>());
            let (ua, ur) = (rng.random::<f64>(), rng.random::<f64>());
            let (y, accepted) = accept_or_resample(&p, &q, x, ua, || ur);
            assert_eq!(accepted, y == x && ua < acceptance_probability(&p, &q, x));
            right[y as usize] += 1;
            let bad = if ua < acceptance_probability(&p, &q, x) {
                x
            } else {
                super::super::distribution::draw_from(&p, ur)
            };
            wrong[bad as usize] += 1;
        }
        let law: Vec<f64> = p.iter().map(|&x| f64::from(x)).collect();
        assert!(chi_square(&right, &law) < critical, "{right:?}");
        assert!(chi_square(&wrong, &law) > critical, "{wrong:?}");
    }
}
