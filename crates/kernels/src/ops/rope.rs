//! Rotary position embedding with ggml's semantics (`ggml_compute_forward_rope_f32`): pair `i`
//! (`0 <= i < n_rot/2`) is rotated by `theta_i = pos * base^(-2i/n_rot)`. NORM pairs adjacent
//! values `(x[2i], x[2i+1])`; NEOX pairs `(x[i], x[i + n_rot/2])`. Dimensions at and past
//! `n_rot` pass through unchanged. Angles and their sines are computed in f64 and rounded once,
//! so long positions lose no accuracy (ggml multiplies the angle up in f32).

use super::use_avx2;
use crate::cpu::{SimdLevel, simd_level};

/// How RoPE pairs up the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i+1)`: ggml `LLAMA_ROPE_TYPE_NORM` (llama GGUF, whose Q/K were permuted).
    Norm,
    /// Half-split pairs `(i, i + n_rot/2)`: ggml `LLAMA_ROPE_TYPE_NEOX` (gemma3, qwen2, HF llama).
    Neox,
}

/// Pairs handled per batch of angles; bounds the stack tables.
const CHUNK: usize = 64;

/// Precomputed inverse frequencies for one RoPE configuration.
#[derive(Clone, Debug)]
pub struct Rope {
    head_dim: usize,
    n_rot: usize,
    style: RopeStyle,
    /// `base^(-2i/n_rot)` for `i in 0..n_rot/2`.
    inv_freq: Vec<f64>,
}

impl Rope {
    /// A RoPE over the first `n_rot` (even, `<= head_dim`) dimensions of each head.
    pub fn new(head_dim: usize, n_rot: usize, base: f32, style: RopeStyle) -> Self {
        debug_assert!(
            n_rot.is_multiple_of(2) && n_rot <= head_dim,
            "rope: bad n_rot {n_rot}"
        );
        let n_rot = n_rot.min(head_dim) & !1;
        let inv_freq = (0..n_rot / 2)
            .map(|i| f64::from(base).powf(-2.0 * i as f64 / n_rot as f64))
            .collect();
        Rope {
            head_dim,
            n_rot,
            style,
            inv_freq,
        }
    }

    /// Rotates one token's `n_heads * head_dim` values for position `pos`.
    pub fn apply(&self, x: &mut [f32], n_heads: usize, pos: u32) {
        self.apply_with(simd_level(), x, n_heads, pos);
    }

    /// Rotates a token's q (`n_q` heads) and k (`n_k` heads) for position `pos`, computing the
    /// angles once for both (they are the same per pair).
    pub fn apply_qk(&self, q: &mut [f32], n_q: usize, k: &mut [f32], n_k: usize, pos: u32) {
        self.rotate(simd_level(), &mut [(q, n_q), (k, n_k)], pos);
    }

    /// [`Rope::apply`] on an explicit SIMD level.
    pub fn apply_with(&self, level: SimdLevel, x: &mut [f32], n_heads: usize, pos: u32) {
        self.rotate(level, &mut [(x, n_heads)], pos);
    }

    /// Pairs rotated per head (`n_rot / 2`): the length of one position's angle rows.
    pub fn pairs(&self) -> usize {
        self.n_rot / 2
    }

    /// `cos[i]`, `sin[i]` of pair `i`'s angle at position `pos`, for `i < self.pairs()`. A batch
    /// computes these once per position and step and hands them to every layer
    /// ([`Rope::apply_qk_at`]) instead of recomputing the sines in each.
    pub fn angles(&self, pos: u32, cos: &mut [f32], sin: &mut [f32]) {
        assert!(
            cos.len() == self.pairs() && sin.len() == self.pairs(),
            "rope: angle rows are not n_rot / 2 long"
        );
        self.fill_angles(pos, 0, cos, sin);
    }

    /// [`Rope::apply_qk`] with the position's angles from [`Rope::angles`]: the same values, so
    /// the same result bit for bit.
    pub fn apply_qk_at(
        &self,
        q: &mut [f32],
        n_q: usize,
        k: &mut [f32],
        n_k: usize,
        cos: &[f32],
        sin: &[f32],
    ) {
        assert!(
            cos.len() == self.pairs() && sin.len() == self.pairs(),
            "rope: angle rows are not n_rot / 2 long"
        );
        self.rotate_pairs(simd_level(), &mut [(q, n_q), (k, n_k)], 0, cos, sin);
    }

    /// Angles of pairs `start..start + cos.len()` at position `pos`.
    fn fill_angles(&self, pos: u32, start: usize, cos: &mut [f32], sin: &mut [f32]) {
        let freqs = &self.inv_freq[start..start + cos.len()];
        for ((c, s), &f) in cos.iter_mut().zip(sin.iter_mut()).zip(freqs) {
            let (sv, cv) = (f64::from(pos) * f).sin_cos();
            *c = cv as f32;
            *s = sv as f32;
        }
    }

    /// Rotates every `(values, n_heads)` part for position `pos`.
    fn rotate(&self, level: SimdLevel, parts: &mut [(&mut [f32], usize)], pos: u32) {
        let half = self.pairs();
        let mut cos = [0.0f32; CHUNK];
        let mut sin = [0.0f32; CHUNK];
        let mut start = 0;
        while start < half {
            let n = CHUNK.min(half - start);
            self.fill_angles(pos, start, &mut cos[..n], &mut sin[..n]);
            self.rotate_pairs(level, parts, start, &cos[..n], &sin[..n]);
            start += n;
        }
    }

    /// Rotates pairs `start..start + cos.len()` of every head of every part. The SIMD loops
    /// take 4 or 8 pairs at a time from `start`, and `start` is a multiple of `CHUNK` (64), so
    /// the pairs left to the scalar tail are the same whether angles come in chunks or whole.
    fn rotate_pairs(
        &self,
        level: SimdLevel,
        parts: &mut [(&mut [f32], usize)],
        start: usize,
        cos: &[f32],
        sin: &[f32],
    ) {
        for (x, n_heads) in parts.iter() {
            assert_eq!(
                x.len(),
                n_heads * self.head_dim,
                "rope: x is not n_heads * head_dim"
            );
        }
        let (half, n) = (self.pairs(), cos.len());
        let avx2 = use_avx2(level);
        let heads = parts
            .iter_mut()
            .flat_map(|(x, _)| x.chunks_exact_mut(self.head_dim));
        for head in heads {
            // Pair p of this batch touches (lo[p], hi[p]).
            let (lo, hi, stride) = match self.style {
                RopeStyle::Norm => (2 * start, 2 * start + 1, 2),
                RopeStyle::Neox => (start, start + half, 1),
            };
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: AVX2+FMA checked; indices stay below n_rot <= head_dim.
                unsafe {
                    match self.style {
                        RopeStyle::Norm => {
                            avx2::rotate_adjacent(&mut head[lo..lo + 2 * n], cos, sin)
                        }
                        RopeStyle::Neox => avx2::rotate_split(head, lo, hi, cos, sin),
                    }
                }
                continue;
            }
            let _ = avx2;
            for k in 0..n {
                let (i, j) = (lo + k * stride, hi + k * stride);
                let (a, b) = (head[i], head[j]);
                head[i] = a * cos[k] - b * sin[k];
                head[j] = a * sin[k] + b * cos[k];
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Rotates adjacent pairs of `x` (`2 * cos.len()` values): with `c` = cos duplicated per pair
    /// and `s` = (-sin, +sin) per pair, `x' = x * c + swap_pairs(x) * s`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn rotate_adjacent(x: &mut [f32], cos: &[f32], sin: &[f32]) {
        let n = cos.len();
        let sign = _mm256_setr_ps(-1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0);
        let mut k = 0;
        while k + 4 <= n {
            // SAFETY: pairs k..k+4 exist: cos/sin have n >= k+4 entries, x has 2n values.
            unsafe {
                let c4 = _mm_loadu_ps(cos.as_ptr().add(k));
                let s4 = _mm_loadu_ps(sin.as_ptr().add(k));
                // (c0,c0,c1,c1 | c2,c2,c3,c3)
                let c = _mm256_set_m128(_mm_unpackhi_ps(c4, c4), _mm_unpacklo_ps(c4, c4));
                let s = _mm256_mul_ps(
                    _mm256_set_m128(_mm_unpackhi_ps(s4, s4), _mm_unpacklo_ps(s4, s4)),
                    sign,
                );
                let p = x.as_mut_ptr().add(2 * k);
                let v = _mm256_loadu_ps(p);
                let swapped = _mm256_permute_ps::<0b10_11_00_01>(v);
                _mm256_storeu_ps(p, _mm256_fmadd_ps(swapped, s, _mm256_mul_ps(v, c)));
            }
            k += 4;
        }
        for k in k..n {
            let (a, b) = (x[2 * k], x[2 * k + 1]);
            x[2 * k] = a * cos[k] - b * sin[k];
            x[2 * k + 1] = a * sin[k] + b * cos[k];
        }
    }

    /// Rotates pairs `(x[lo + k], x[hi + k])` for `k < cos.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn rotate_split(
        x: &mut [f32],
        lo: usize,
        hi: usize,
        cos: &[f32],
        sin: &[f32],
    ) {
        let n = cos.len();
        debug_assert!(lo + n <= hi && hi + n <= x.len());
        let mut k = 0;
        while k + 8 <= n {
            // SAFETY: lo + k + 8 <= lo + n <= hi and hi + k + 8 <= hi + n <= x.len().
            unsafe {
                let c = _mm256_loadu_ps(cos.as_ptr().add(k));
                let s = _mm256_loadu_ps(sin.as_ptr().add(k));
                let pa = x.as_mut_ptr().add(lo + k);
                let pb = x.as_mut_ptr().add(hi + k);
                let a = _mm256_loadu_ps(pa);
                let b = _mm256_loadu_ps(pb);
                _mm256_storeu_ps(pa, _mm256_fnmadd_ps(b, s, _mm256_mul_ps(a, c)));
                _mm256_storeu_ps(pb, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
            }
            k += 8;
        }
        for k in k..n {
            let (a, b) = (x[lo + k], x[hi + k]);
            x[lo + k] = a * cos[k] - b * sin[k];
            x[hi + k] = a * sin[k] + b * cos[k];
        }
    }
}
