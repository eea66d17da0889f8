//! The AVX2+FMA tile: `R` rows of one adapter. Every (row, rank) dot product is one accumulator
//! over 8-wide pieces, a horizontal sum, then the scalar tail; every output is `y` plus the
//! ranks' FMAs in rank order. Only the loads are shared between a tile's rows, so a row gives the
//! same bits in a tile of four as alone.

use std::arch::x86_64::*;

use super::{LoraMats, MAX_RANK};

/// `ys[r] += m.scale * B (A xs[r])` for the tile's `R` rows; `u` is scratch for `A x`.
///
/// # Safety
/// AVX2 and FMA must be available; every `xs[r]` has `in` and every `ys[r]` `out` values of `m`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn tile<const R: usize>(
    xs: [&[f32]; R],
    mut ys: [&mut [f32]; R],
    m: LoraMats<'_>,
    u: &mut [[f32; MAX_RANK]; R],
) {
    let (d_in, d_out, rank) = (xs[0].len(), ys[0].len(), m.rank);
    let xp = xs.map(<[f32]>::as_ptr);
    // u = scale * A x: J ranks at a time, so each piece of x is loaded once for J rows of A and
    // each piece of A once for the R rows (R * J accumulators: 8 independent FMA chains).
    let mut j = 0;
    // SAFETY (all blocks below): AVX2/FMA are the caller's promise; the offsets stay within A's
    // `rank` rows of `d_in`, Bt's `rank` rows of `d_out` and the rows' lengths.
    if R == 1 {
        while j + 8 <= rank {
            unsafe { ranks::<R, 8>(&xp, m, j, d_in, u) };
            j += 8;
        }
    } else {
        while j + 2 <= rank {
            unsafe { ranks::<R, 2>(&xp, m, j, d_in, u) };
            j += 2;
        }
    }
    while j < rank {
        unsafe { ranks::<R, 1>(&xp, m, j, d_in, u) };
        j += 1;
    }
    // y += u^T Bt: W 8-wide pieces of outputs per row held in registers across every rank, so y
    // is read and written once and each piece of Bt is loaded once for the R rows.
    let yp = ys.each_mut().map(|y| y.as_mut_ptr());
    let mut o = 0;
    if R == 1 {
        while o + 32 <= d_out {
            unsafe { outputs::<R, 4>(&yp, m, o, d_out, u) };
            o += 32;
        }
    } else {
        while o + 16 <= d_out {
            unsafe { outputs::<R, 2>(&yp, m, o, d_out, u) };
            o += 16;
        }
    }
    while o + 8 <= d_out {
        unsafe { outputs::<R, 1>(&yp, m, o, d_out, u) };
        o += 8;
    }
    for (y, u) in ys.iter_mut().zip(u.iter()) {
        for (k, v) in y.iter_mut().enumerate().skip(o) {
            for (jj, &uj) in u[..rank].iter().enumerate() {
                *v += uj * m.bt[jj * d_out + k];
            }
        }
    }
}

/// `u[r][j0 + j] = scale * (A[j0 + j] . x[r])` for `j < J`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn ranks<const R: usize, const J: usize>(
    xp: &[*const f32; R],
    m: LoraMats<'_>,
    j0: usize,
    d_in: usize,
    u: &mut [[f32; MAX_RANK]; R],
) {
    let ap = m.a.as_ptr();
    let mut acc = [[_mm256_setzero_ps(); J]; R];
    let mut k = 0;
    while k + 8 <= d_in {
        // SAFETY: rows j0..j0 + J of A and every x row have d_in >= k + 8 values.
        unsafe {
            let a: [__m256; J] =
                std::array::from_fn(|j| _mm256_loadu_ps(ap.add((j0 + j) * d_in + k)));
            for (acc, &x) in acc.iter_mut().zip(xp) {
                let x = _mm256_loadu_ps(x.add(k));
                for (acc, a) in acc.iter_mut().zip(a) {
                    *acc = _mm256_fmadd_ps(a, x, *acc);
                }
            }
        }
        k += 8;
    }
    for ((acc, &x), u) in acc.iter().zip(xp).zip(u.iter_mut()) {
        for (j, &acc) in acc.iter().enumerate() {
            let mut total = hsum(acc);
            for kk in k..d_in {
                // SAFETY: kk < d_in, within A's row j0 + j and the x row.
                total += unsafe { *ap.add((j0 + j) * d_in + kk) * *x.add(kk) };
            }
            u[j0 + j] = m.scale * total;
        }
    }
}

/// `y[r][o0..o0 + 8W] += sum_j u[r][j] * Bt[j][o0..o0 + 8W]`, ranks in order.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn outputs<const R: usize, const W: usize>(
    yp: &[*mut f32; R],
    m: LoraMats<'_>,
    o0: usize,
    d_out: usize,
    u: &[[f32; MAX_RANK]; R],
) {
    let bp = m.bt.as_ptr();
    // SAFETY: every y row and Bt row has d_out >= o0 + 8W values; rank rows of Bt exist.
    unsafe {
        let mut acc: [[__m256; W]; R] = std::array::from_fn(|r| {
            std::array::from_fn(|w| _mm256_loadu_ps(yp[r].add(o0 + 8 * w)))
        });
        for j in 0..m.rank {
            let b: [__m256; W] =
                std::array::from_fn(|w| _mm256_loadu_ps(bp.add(j * d_out + o0 + 8 * w)));
            for (acc, u) in acc.iter_mut().zip(u) {
                let s = _mm256_set1_ps(u[j]);
                for (acc, b) in acc.iter_mut().zip(b) {
                    *acc = _mm256_fmadd_ps(s, b, *acc);
                }
            }
        }
        for (acc, &y) in acc.iter().zip(yp) {
            for (w, &acc) in acc.iter().enumerate() {
                _mm256_storeu_ps(y.add(o0 + 8 * w), acc);
            }
        }
    }
}

#[target_feature(enable = "avx2,fma")]
#[inline]
fn hsum(s: __m256) -> f32 {
    let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    _mm_cvtss_f32(h)
}
