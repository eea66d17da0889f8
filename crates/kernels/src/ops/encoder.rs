//! The row kernels encoders (BERT) use and decoders do not: LayerNorm with a bias and the exact
//! erf GELU (transformers' `gelu`), and the two fused with the projections' bias adds (and the
//! residual add) so each is one pass over the rows. Scalar; callers split rows over the pool.

/// `x = (x - mean) / sqrt(var + eps) * w + b` for each row of `w.len()` values (statistics in
/// f64, as PyTorch's CPU LayerNorm accumulates in a wider type).
pub fn layer_norm_rows(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let n = w.len();
    debug_assert!(n > 0 && x.len().is_multiple_of(n) && b.len() == n);
    for row in x.chunks_exact_mut(n) {
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        let inv = 1.0 / (var + eps as f64).sqrt();
        for ((v, &w), &b) in row.iter_mut().zip(w).zip(b) {
            *v = ((*v as f64 - mean) * inv) as f32 * w + b;
        }
    }
}

/// `x = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))`, in place.
pub fn gelu_erf_inplace(x: &mut [f32]) {
    for v in x {
        let t = *v as f64;
        *v = (0.5 * t * (1.0 + erf(t * std::f64::consts::FRAC_1_SQRT_2))) as f32;
    }
}

/// `x = gelu_erf(x + bias)` for each row of `bias.len()` values (`None`: no bias): the up
/// projection's bias add and the GELU in one pass, in f32 (`gelu_erf.rs`; within 1e-6 of
/// [`gelu_erf_inplace`]).
pub fn bias_gelu_erf_rows(x: &mut [f32], bias: Option<&[f32]>) {
    super::bias_gelu_erf_rows_with(crate::cpu::simd_level(), x, bias);
}

/// `x = layer_norm(x + (y + bias)) * w + b` for each row of `w.len()` values (`bias: None`, no
/// bias): a projection's bias add, the residual add and BERT's post-norm in one pass over the
/// rows, with the bits of the three done apart.
pub fn bias_residual_layer_norm_rows(
    x: &mut [f32],
    y: &[f32],
    bias: Option<&[f32]>,
    w: &[f32],
    b: &[f32],
    eps: f32,
) {
    let n = w.len();
    debug_assert!(n > 0 && x.len() == y.len() && x.len().is_multiple_of(n));
    for (xr, yr) in x.chunks_exact_mut(n).zip(y.chunks_exact(n)) {
        match bias {
            Some(bias) => {
                for ((v, &p), &c) in xr.iter_mut().zip(yr).zip(bias) {
                    *v += p + c;
                }
            }
            None => {
                for (v, &p) in xr.iter_mut().zip(yr) {
                    *v += p;
                }
            }
        }
        layer_norm_rows(xr, w, b, eps);
    }
}

/// erf from the Numerical Recipes `erfc` Chebyshev fit (relative error below 1.2e-7), in f64:
/// within f32 rounding of the exact value for GELU's purposes.
fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 { 1.0 - erfc } else { erfc - 1.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        // erf(0.5), erf(1), erf(2) to 10 digits (Abramowitz & Stegun table 7.1).
        for (x, want) in [
            (0.5, 0.520_499_877_8),
            (1.0, 0.842_700_792_9),
            (2.0, 0.995_322_265_0),
        ] {
            assert!((erf(x) - want).abs() < 2e-7, "erf({x}) = {}", erf(x));
            assert!((erf(-x) + want).abs() < 2e-7);
        }
    }

    /// The fused passes give their parts' results: LayerNorm's bits, GELU's within f32 rounding.
    #[test]
    fn fused_passes_equal_their_parts() {
        let d = 8;
        let x0: Vec<f32> = (0..3 * d).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let y: Vec<f32> = (0..3 * d).map(|i| (i as f32 * 0.91).cos()).collect();
        let bias: Vec<f32> = (0..d).map(|i| i as f32 * 0.1 - 0.3).collect();
        let (w, b) = (vec![1.5f32; d], vec![0.25f32; d]);

        let mut want = x0.clone();
        for row in want.chunks_exact_mut(d) {
            row.iter_mut().zip(&bias).for_each(|(v, c)| *v += c);
        }
        gelu_erf_inplace(&mut want);
        let mut got = x0.clone();
        bias_gelu_erf_rows(&mut got, Some(&bias));
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 3e-7 * (1.0 + w.abs()), "{g} vs {w}");
        }

        let mut want = x0.clone();
        let mut yb = y.clone();
        for row in yb.chunks_exact_mut(d) {
            row.iter_mut().zip(&bias).for_each(|(v, c)| *v += c);
        }
        want.iter_mut().zip(&yb).for_each(|(v, p)| *v += p);
        layer_norm_rows(&mut want, &w, &b, 1e-12);
        let mut got = x0.clone();
        bias_residual_layer_norm_rows(&mut got, &y, Some(&bias), &w, &b, 1e-12);
        assert_eq!(got, want);
    }

    #[test]
    fn layer_norm_centres_and_scales() {
        let mut x = vec![1.0, 2.0, 3.0, 4.0];
        layer_norm_rows(&mut x, &[1.0; 4], &[0.5; 4], 0.0);
        let mean: f32 = x.iter().sum::<f32>() / 4.0;
        assert!((mean - 0.5).abs() < 1e-6);
        assert!((x[3] - x[0] - 2.0 * 1.5 / 1.25f32.sqrt()).abs() < 1e-5);
    }
}
