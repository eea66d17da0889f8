//! Weight matrices repacked once at load for the AVX2 matmul: block `ib` of 8 consecutive weight
//! rows is stored as one "group block", quants interleaved 4 bytes per row, so one 32-byte load
//! holds 4 consecutive quants of each of the 8 rows. An integer multiply-add against 4 activation
//! bytes broadcast to every lane then gives 8 rows' partial sums in 8 lanes: the lanes are output
//! columns, so there is no horizontal sum and the block scales are applied 8 at a time. This is
//! the idea of ggml's CPU "repack" buffers (block_q4_0x8); the layouts and kernels are our own.
//!
//! Each type's file defines its group-block layout, a packer, AVX2 kernels for 1..=[`MAX_MR`]
//! activation rows and a scalar reference over the packed bytes that performs the same f32
//! operations in the same order, so the SIMD result equals the reference bit for bit. An
//! (activation row, output column) result depends only on that row and column: never on the
//! batch, the number of rows a kernel call takes, or the thread split.

/// Defines `$name`, a [`GemmFn`] that runs the file's `gemm_with` kernel body over group blocks
/// in the form `$source` reads (packed, or unpacked by [`Unpacked::unpack`]).
macro_rules! gemm_over {
    ($(#[$doc:meta])* $name:ident, $source:ty) => {
        $(#[$doc])*
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $name<const MR: usize>(
            w: *const u8,
            nb: usize,
            a: *const u8,
            a_row: usize,
            y: *mut f32,
            ldy: usize,
        ) {
            // SAFETY: the caller upholds the `GemmFn` contract, which `gemm_with` shares.
            unsafe { gemm_with::<$source, MR>(w, nb, a, a_row, y, ldy) }
        }
    };
}

mod fingerprint;
mod q4_1;
mod q4_k;
mod q5_0;
mod q6_k;
mod q8_0;
mod storage;

pub use fingerprint::{layout_fingerprint, layout_fingerprint_at};
use storage::PackedBytes;
pub use storage::{PACKED_ALIGN, SharedBytes};

use super::GgmlType;
use crate::cpu::{self, SimdLevel};

/// Weight rows per group (the 8 f32 lanes of a 256-bit register).
pub const GROUP_ROWS: usize = 8;

/// Most activation rows one kernel call takes (each keeps its own accumulators in registers).
pub(crate) const MAX_MR: usize = 8;

/// `y[i * ldy + j] = x_i . w_j` for `i < MR`, `j < 8`: one group's `nb` group blocks at `w`
/// against `MR` quantized activation rows at `a`, `a_row` bytes apart.
///
/// # Safety
/// The CPU has AVX2+FMA+F16C; `w` holds `nb` group blocks of the kernel's type; `a` holds `MR`
/// rows of `nb` activation blocks of the type's `vec_dot_type`; `y` is writable at
/// `i * ldy + j` for `i < MR`, `j < 8`.
pub(crate) type GemmFn =
    unsafe fn(w: *const u8, nb: usize, a: *const u8, a_row: usize, y: *mut f32, ldy: usize);

/// Weight streams a one-row product reads at once (see [`GemvFn`]).
pub(crate) const STREAMS: usize = 4;

/// `*y[s].add(j) = x . w_j` for the groups at `w[s]`, `s < STREAMS`, `j < 8`: one activation row
/// against `STREAMS` groups' `nb` group blocks, a block of each in turn. A decode product reads
/// each weight once from memory, and four sequential streams far apart draw more bandwidth than
/// one here (more of the hardware prefetcher's streams and DRAM banks busy): the Q8_0 LM head
/// GEMV went from 8.9 to 8.1 ms (Gemma 3) and 1.64 to 1.46 ms (SmolLM2), medians of interleaved
/// `decode_stream` runs; two streams gave 8.4 ms, eight 9.7. The layers' small Q4_1 products
/// gained nothing, so only Q8_0 has one. Each group's result is the one-row [`GemmFn`]'s, bit
/// for bit.
///
/// # Safety
/// As [`GemmFn`] with `MR = 1`, for each `w[s]` and `y[s]`.
pub(crate) type GemvFn =
    unsafe fn(w: [*const u8; STREAMS], nb: usize, a: *const u8, y: [*mut f32; STREAMS]);

/// A type's second form of a group block for prompt-sized products: quants unpacked to one byte
/// each (with their high bits, for Q5_0) and laid out as the kernel reads them. A product over
/// many activation rows unpacks each group once into a small buffer and then walks every row
/// over it, instead of repeating the bit manipulation for every 4 rows. The kernels perform
/// the same integer sums and f32 operations as the [`PackedKernels::gemm`] ones, so a row's
/// result does not depend on which of the two ran.
pub(crate) struct Unpacked {
    /// Bytes of one unpacked group block.
    pub block_bytes: usize,
    /// Unpacks `nb` group blocks at `w` into `dst` (`nb * block_bytes` bytes).
    ///
    /// # Safety
    /// AVX2+FMA+F16C; `w` holds `nb` group blocks of the type; `dst` is writable for
    /// `nb * block_bytes` bytes.
    pub unpack: unsafe fn(w: *const u8, nb: usize, dst: *mut u8),
    /// [`GemmFn`]s over unpacked group blocks, for 1..=`gemm.len()` activation rows.
    pub gemm: &'static [GemmFn],
    /// Most rows per call worth taking (see [`PackedKernels::max_mr`]).
    pub max_mr: usize,
}

/// One weight type's packed kernels.
pub(crate) struct PackedKernels {
    /// Bytes of one group block (block `ib` of 8 rows).
    pub group_bytes: usize,
    /// Writes the group block of 8 rows' blocks `src[r]` (GGUF layout, one block each).
    pub pack_group: fn(src: [&[u8]; GROUP_ROWS], dst: &mut [u8]),
    /// Kernels for 1..=`gemm.len()` (at most [`MAX_MR`]) activation rows, at index `mr - 1`.
    pub gemm: &'static [GemmFn],
    /// The multi-stream one-row kernel, for the types where it reads faster.
    pub gemv: Option<GemvFn>,
    /// AVX-VNNI kernels for as many rows as `gemm` (`crate::cpu::avx_vnni`), reading activation
    /// blocks whose quants [`offset_quants`] moved to unsigned; the same bits as `gemm`.
    pub vnni: Option<&'static [GemmFn]>,
    /// Most rows per call worth taking: where 4 rows' state spills out of the 16 registers
    /// (the K-quants, and Q4_1 with its rotated rows), 3 rows per call do more work per cycle.
    pub max_mr: usize,
    /// Most rows per call for a product of a few rows (`matmul`'s `FEW_ROWS`), where a type's
    /// kernels keep little state per row (one i16 and one i32 accumulator for Q4_K and Q6_K)
    /// and so take 7 or 8: the weights' bit manipulation, shared by a call's rows, is done
    /// once or twice per group instead of once per 3 rows. `None`: `max_mr` throughout.
    pub few_rows_mr: Option<usize>,
    /// The unpacked form for prompt-sized products, where its bit manipulation is worth
    /// hoisting out of the per-row loop.
    pub unpacked: Option<Unpacked>,
    /// Scalar reference: `out[j] = a . w_j` for one activation row `a` (nb blocks) against the
    /// group's `nb` group blocks `w`, with the same f32 operations as `gemm`.
    pub reference: fn(w: &[u8], a: &[u8], out: &mut [f32; GROUP_ROWS]),
}

/// The packed kernels of `ty`, if it has them.
pub(crate) fn kernels(ty: GgmlType) -> Option<&'static PackedKernels> {
    match ty {
        GgmlType::Q8_0 => Some(&q8_0::KERNELS),
        GgmlType::Q4_1 => Some(&q4_1::KERNELS),
        GgmlType::Q5_0 => Some(&q5_0::KERNELS),
        GgmlType::Q4_K => Some(&q4_k::KERNELS),
        GgmlType::Q6_K => Some(&q6_k::KERNELS),
        _ => None,
    }
}

/// Flips the sign bit of every quant of a row of Q8_0 activation blocks (34 bytes: f16 d, 32
/// i8): `q ^ 0x80 == q + 128` as u8, the unsigned operand `vpdpbusd` multiplies, and the
/// VNNI kernels take `128 * sum(w)` back off.
pub(crate) fn offset_quants(row: &mut [u8]) {
    for b in row.chunks_exact_mut(34) {
        for q in &mut b[2..] {
            *q ^= 0x80;
        }
    }
}

/// Quantizes one activation row into a kernel's activation layout.
pub(crate) type QuantizeFn = fn(&[f32], &mut [u8]);

/// How `ty`'s packed kernels want an activation row: bytes per 32- or 256-element block and the
/// quantizer (AVX2) writing them. Q4_1 and Q5_0 read their quantized blocks with the scale
/// widened to f32 and a per-block term precomputed (`q4_1::ACT_BLOCK`, `q5_0::ACT_BLOCK`): the
/// same quantized values, but the kernel broadcasts them straight from memory instead of
/// converting them per block and row (Q4_1 also keeps its quants twice, for its rotated
/// rows). The others read their `vec_dot_type` as is.
pub(crate) fn activation_format(ty: GgmlType) -> Option<(usize, QuantizeFn)> {
    let vdt = ty.vec_dot_type()?;
    match ty {
        GgmlType::Q4_1 => Some((q4_1::ACT_BLOCK, quantize_wide::<true>)),
        GgmlType::Q5_0 => Some((q5_0::ACT_BLOCK, quantize_wide::<false>)),
        _ => Some((
            vdt.type_size(),
            super::dispatch::activation_quantizer(vdt, SimdLevel::Avx2),
        )),
    }
}

/// Quantizes `src` straight into the packed Q4_1 kernels' activation blocks (`Q8_1`: f32 d,
/// f32 s, the 32 i8 twice: 72 bytes) or the Q5_0 ones' (f32 d, i32 16 * sum, 32 i8: 40 bytes).
fn quantize_wide<const Q8_1: bool>(src: &[f32], dst: &mut [u8]) {
    const { assert!(q4_1::ACT_BLOCK == 72 && q5_0::ACT_BLOCK == 40) };
    let block = if Q8_1 {
        q4_1::ACT_BLOCK
    } else {
        q5_0::ACT_BLOCK
    };
    assert!(
        src.len().is_multiple_of(32) && dst.len() == src.len() / 32 * block,
        "activation row lengths"
    );
    // SAFETY: packed matrices exist only on AVX2+FMA+F16C CPUs (`PackedMatrix::pack_at`);
    // lengths checked above.
    unsafe {
        if Q8_1 {
            super::avx2::quantize_act_q8_1_wide(src, dst)
        } else {
            super::avx2::quantize_act_q8_0_wide(src, dst)
        }
    }
}

/// Quantizes `src` 32 values at a time with the AVX2 quantizer of `vdt` (exactly as for the plain
/// kernels: packed matrices exist only on AVX2 CPUs) into a `vdt` block, which `write` then
/// stores in a kernel's own activation block layout. The reference [`quantize_wide`] is tested
/// against.
#[cfg(test)]
fn requantize<const RAW: usize>(
    vdt: GgmlType,
    src: &[f32],
    dst: &mut [u8],
    act_block: usize,
    write: impl Fn(&[u8; RAW], &mut [u8]),
) {
    let quantize = super::dispatch::activation_quantizer(vdt, SimdLevel::Avx2);
    let mut raw = [0u8; RAW];
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(act_block)) {
        quantize(x, &mut raw);
        write(&raw, b);
    }
}

/// A weight matrix of `n` rows of `k` elements in group-block layout: group `g` (rows
/// `8g..8g + 8`, the last one padded with zero rows) is `nb` group blocks from
/// `g * nb * group_bytes`.
pub struct PackedMatrix {
    ty: GgmlType,
    n: usize,
    k: usize,
    data: PackedBytes,
}

impl std::fmt::Debug for PackedMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedMatrix")
            .field("ty", &self.ty)
            .field("n", &self.n)
            .field("k", &self.k)
            .field("bytes", &self.data.len())
            .field("shared", &self.data.is_shared())
            .finish()
    }
}

impl PackedMatrix {
    /// Packs `w` (`n` rows of `k` elements of `ty`, GGUF layout) for this CPU's best SIMD level.
    /// `None` when that level has no packed kernels for `ty` (the caller keeps the plain layout).
    ///
    /// # Panics
    /// If `w.len()` is not `n` rows of `k` elements of `ty`: shapes come from tensors checked at
    /// load time, so a mismatch is a caller bug.
    pub fn pack(ty: GgmlType, n: usize, k: usize, w: &[u8]) -> Option<Self> {
        Self::pack_at(cpu::simd_level(), ty, n, k, w)
    }

    /// [`Self::pack`] for an explicit SIMD level (packed kernels exist only for AVX2).
    pub fn pack_at(level: SimdLevel, ty: GgmlType, n: usize, k: usize, w: &[u8]) -> Option<Self> {
        if level != SimdLevel::Avx2 || !super::dispatch::level_supported(level) {
            return None;
        }
        let kern = kernels(ty)?;
        let w_row = ty.row_bytes(k)?;
        assert_eq!(w.len(), n * w_row, "{ty} weight of {n} x {k}");
        let (bs, nb) = (ty.type_size(), k / ty.block_size());
        let groups = n.div_ceil(GROUP_ROWS);
        let group_len = nb * kern.group_bytes;
        let mut data = crate::huge_pages::HugeBuffer::zeroed(groups * group_len);
        let zero = vec![0u8; bs];
        let pack_groups = |first: usize, out: &mut [u8]| {
            for (gi, dst) in out.chunks_exact_mut(group_len).enumerate() {
                let g = first + gi;
                for (ib, blk) in dst.chunks_exact_mut(kern.group_bytes).enumerate() {
                    let src: [&[u8]; GROUP_ROWS] = std::array::from_fn(|r| {
                        let row = g * GROUP_ROWS + r;
                        if row < n {
                            let at = row * w_row + ib * bs;
                            &w[at..at + bs]
                        } else {
                            &zero[..]
                        }
                    });
                    (kern.pack_group)(src, blk);
                }
            }
        };
        // Packing reads the whole file once; two threads halve the start-up cost.
        let per_task = groups
            .div_ceil(crate::parallel::num_threads().max(1) * 4)
            .max(1);
        let out = crate::parallel::SharedMut::new(&mut data);
        crate::parallel::run(groups.div_ceil(per_task), &|task| {
            let g0 = task * per_task;
            let g1 = (g0 + per_task).min(groups);
            // SAFETY: tasks cover disjoint group ranges of `data`.
            let dst = unsafe { out.slice_mut(g0 * group_len, (g1 - g0) * group_len) };
            pack_groups(g0, dst);
        });
        Some(Self {
            ty,
            n,
            k,
            data: PackedBytes::Owned(data),
        })
    }

    /// Bytes [`Self::pack`] makes of `n` rows of `k` elements of `ty` on this CPU; `None` when
    /// it would not pack them.
    pub fn packed_len(ty: GgmlType, n: usize, k: usize) -> Option<usize> {
        let level = cpu::simd_level();
        if level != SimdLevel::Avx2 || !super::dispatch::level_supported(level) {
            return None;
        }
        let kern = kernels(ty)?;
        ty.row_bytes(k)?;
        n.div_ceil(GROUP_ROWS)
            .checked_mul(k / ty.block_size())?
            .checked_mul(kern.group_bytes)
    }

    /// The matrix [`Self::pack`] made of `n` x `k` of `ty`, read in place from `range` of
    /// `bytes` (which must hold exactly what `pack` wrote: only the length is checked here).
    /// `None` when this CPU would not pack `ty`, or the range is out of bounds, of another
    /// length than [`Self::packed_len`], or not [`PACKED_ALIGN`]ed in memory.
    pub fn from_shared(
        ty: GgmlType,
        n: usize,
        k: usize,
        bytes: SharedBytes,
        range: std::ops::Range<usize>,
    ) -> Option<Self> {
        if Self::packed_len(ty, n, k)? != range.len() {
            return None;
        }
        let data = PackedBytes::shared(bytes, range)?;
        Some(Self { ty, n, k, data })
    }

    /// The packed bytes, as [`Self::from_shared`] takes them back.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    /// True when the bytes are borrowed from a shared buffer ([`Self::from_shared`]).
    pub fn is_shared(&self) -> bool {
        self.data.is_shared()
    }

    /// The weight type the blocks came from.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Rows (output features).
    pub fn rows(&self) -> usize {
        self.n
    }

    /// Elements per row (input features).
    pub fn cols(&self) -> usize {
        self.k
    }

    /// Bytes of the packed data.
    pub fn len_bytes(&self) -> usize {
        self.data.len()
    }

    pub(crate) fn kernels(&self) -> &'static PackedKernels {
        match kernels(self.ty) {
            Some(k) => k,
            None => unreachable!("a PackedMatrix is only built for a type with packed kernels"),
        }
    }

    /// Group `g`'s group blocks.
    pub(crate) fn group(&self, g: usize) -> &[u8] {
        let len = self.data.len() / self.n.div_ceil(GROUP_ROWS);
        &self.data[g * len..(g + 1) * len]
    }

    /// Bytes of one activation row in the layout the kernels read.
    pub fn activation_row_bytes(&self) -> usize {
        match activation_format(self.ty) {
            Some((block, _)) => self.k / self.ty.block_size() * block,
            None => unreachable!("packed types have an activation format"),
        }
    }

    /// Quantizes activation row `x` (`k` values) into `dst` (`activation_row_bytes()`), in the
    /// layout the kernels and [`Self::reference_matmul`] read.
    pub fn quantize_activations(&self, x: &[f32], dst: &mut [u8]) {
        assert!(x.len() == self.k && dst.len() == self.activation_row_bytes());
        if let Some((_, quantize)) = activation_format(self.ty) {
            quantize(x, dst);
        }
    }

    /// Scalar reference product (tests): `y[t][n]` from activation rows quantized by
    /// [`Self::quantize_activations`].
    pub fn reference_matmul(&self, act: &[u8], t: usize, y: &mut [f32]) {
        let kern = self.kernels();
        let a_row = act.len() / t.max(1);
        for g in 0..self.n.div_ceil(GROUP_ROWS) {
            for (i, a) in act.chunks_exact(a_row).enumerate().take(t) {
                let mut out = [0.0f32; GROUP_ROWS];
                (kern.reference)(self.group(g), a, &mut out);
                for (j, &v) in out.iter().enumerate() {
                    if g * GROUP_ROWS + j < self.n {
                        y[i * self.n + g * GROUP_ROWS + j] = v;
                    }
                }
            }
        }
    }
}

/// Asks for the block at `g`'s index in the next group (`nb` blocks of `bytes` on) to be brought
/// into L2. A task walks its groups in order, so that is the block this call's rows will read a
/// group from now: ~7 KB (Qwen 1.5B's gate/up) to ~60 KB (its down) ahead, far enough for the
/// bytes to arrive from memory while this group computes. The hardware prefetcher alone, or
/// the 1 KB into L1 that the one- and two-row calls asked for before, left a verify step of
/// 5-16 rows waiting on the weights as long as it computed (Qwen 1.5B forward, median of 15,
/// interleaved, idle: 9 rows 111-123 -> 92-100 ms, 16 rows 170-185 -> 146-157, 5 rows 64-76 ->
/// 57-64; 2 rows' LM head 5.4-6.3 -> 4.6-5.3 ms; SmolLM2's Q4_1 layers, 2 / 5 / 16 rows
/// 6.4-7.6 -> 4.6-5.2, 9.0-10.9 -> 7.5-8.9, 21.5-25.0 -> 19.8-22.8 ms). Q8_0 keeps its
/// multi-stream [`GemvFn`] for one row and no prefetch for more: there it measured no gain
/// (SmolLM2's and Gemma 3's heads). A task's last group prefetches its neighbour's first, which
/// another task may read: ~3% more traffic at most. Past the last group the address runs off
/// the weights: a prefetch never faults, and `wrapping_add` keeps the arithmetic defined.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn prefetch_next_group(g: *const u8, nb: usize, bytes: usize) {
    use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
    let next = g.wrapping_add(nb * bytes);
    let mut off = 0;
    while off < bytes {
        // SAFETY: SSE is baseline on x86_64; a prefetch reads nothing architecturally.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(next.wrapping_add(off).cast()) };
        off += 64;
    }
}

/// f16 bits at `p[at..at + 2]` as f32.
#[inline]
pub(crate) fn f16_at(p: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([p[at], p[at + 1]]).to_f32()
}

/// f32 bits at `p[at..at + 4]`.
#[inline]
pub(crate) fn f32_at(p: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows with zeros, tiny and huge values, ties of the rounding and a block of one sign.
    fn rows() -> Vec<Vec<f32>> {
        let mut out = vec![
            vec![0.0f32; 96],
            (0..96).map(|i| i as f32 * 0.5 - 20.0).collect(),
        ];
        let mut x = 0x2545_f491_u32;
        out.push(
            (0..576)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    (x as f32 / u32::MAX as f32 - 0.5) * 8.0
                })
                .collect(),
        );
        out.push(
            (0..64)
                .map(|i| if i % 7 == 0 { 6.0e4 } else { 1e-6 * i as f32 })
                .collect(),
        );
        out.push((0..32).map(|i| -(i as f32) / 127.0).collect());
        out
    }

    /// `matmul` indexes `gemm[mr - 1]` for every call width a type asks for: each must exist.
    #[test]
    fn every_call_width_has_a_kernel() {
        for ty in [
            GgmlType::Q8_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
        ] {
            let Some(k) = kernels(ty) else {
                panic!("{ty} has packed kernels")
            };
            let widest = k.few_rows_mr.unwrap_or(0).max(k.max_mr);
            assert!(
                (1..=k.gemm.len()).contains(&widest) && k.gemm.len() <= MAX_MR,
                "{ty}: calls of up to {widest} rows, {} kernels",
                k.gemm.len()
            );
            if let Some(u) = &k.unpacked {
                assert!((1..=u.gemm.len()).contains(&u.max_mr), "{ty} unpacked");
            }
            if let Some(v) = k.vnni {
                assert_eq!(v.len(), k.gemm.len(), "{ty}: VNNI kernels for as many rows");
            }
        }
    }

    #[test]
    fn direct_activation_quantizers_match_the_requantized_blocks() {
        if !crate::quant::dispatch::level_supported(SimdLevel::Avx2) {
            return;
        }
        type Quantize = fn(&[f32], &mut [u8]);
        let pairs: [(&str, Quantize, Quantize); 2] = [
            (
                "q4_1",
                quantize_wide::<true>,
                q4_1::quantize_activations_via_q8_1,
            ),
            (
                "q5_0",
                quantize_wide::<false>,
                q5_0::quantize_activations_via_q8_0,
            ),
        ];
        let blocks = [q4_1::ACT_BLOCK, q5_0::ACT_BLOCK];
        for ((name, direct, reference), block) in pairs.into_iter().zip(blocks) {
            for x in rows() {
                let mut got = vec![0u8; x.len() / 32 * block];
                let mut want = vec![1u8; got.len()];
                direct(&x, &mut got);
                reference(&x, &mut want);
                assert_eq!(got, want, "{name}: row of {}", x.len());
            }
        }
    }
}
