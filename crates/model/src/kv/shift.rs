//! The executor's half of a context shift: KV blocks copied to fresh blocks with their keys
//! re-rotated to positions `delta` lower (RoPE by `-delta`, per layer with that layer's RoPE),
//! for every element type. Values do not depend on position and are copied as stored.

use pagoda_kernels::attention::{KvElement, KvLayout};
use pagoda_kernels::cpu::simd_level;
use pagoda_kernels::ops::Rope;

use crate::kv::cache::{Arenas, KvCache};
use crate::models::Model;

/// Copies each `(src, dst)` block of every layer, keys rotated back by `delta` positions. The
/// cache has one KV group here (shifts are refused at start-up with sliding-window groups), so
/// each layer has an arena slot of its own.
pub fn shift_blocks(kv: &mut KvCache, model: &Model, copies: &[(u32, u32)], delta: u32) {
    if copies.is_empty() {
        return;
    }
    let layout = *kv.layout();
    let n_layers = model.config().n_layers;
    for il in 0..n_layers {
        let rope = model.layer_rope(il);
        let pairs = rope.pairs();
        let (mut cos, mut sin) = (vec![0.0f32; pairs], vec![0.0f32; pairs]);
        rope.angles(delta, &mut cos, &mut sin);
        // A rotation by -delta: the same cosines, negated sines.
        sin.iter_mut().for_each(|s| *s = -*s);
        let slot = kv.plan().slot(il);
        let turn = Turn {
            rope,
            cos: &cos,
            sin: &sin,
        };
        match kv.arenas_mut() {
            Arenas::F32 { k, v } => copy_layer(
                &layout,
                &mut k[slot],
                &mut v[slot],
                &mut [],
                &mut [],
                copies,
                &turn,
            ),
            Arenas::F16 { k, v } => copy_layer(
                &layout,
                &mut k[slot],
                &mut v[slot],
                &mut [],
                &mut [],
                copies,
                &turn,
            ),
            Arenas::Int8 {
                k,
                v,
                k_scales,
                v_scales,
            } => copy_layer(
                &layout,
                &mut k[slot],
                &mut v[slot],
                &mut k_scales[slot],
                &mut v_scales[slot],
                copies,
                &turn,
            ),
        }
    }
}

/// One layer's rotation back by the shift.
struct Turn<'a> {
    rope: &'a Rope,
    cos: &'a [f32],
    sin: &'a [f32],
}

/// Copies the blocks of one layer: every (kv head, slot) key row widened, rotated and stored
/// again (with a new scale for int8), every value row (and its scale) copied as is.
fn copy_layer<T: KvElement>(
    layout: &KvLayout,
    k: &mut [T],
    v: &mut [T],
    k_scales: &mut [f32],
    v_scales: &mut [f32],
    copies: &[(u32, u32)],
    turn: &Turn,
) {
    let (bs, nkv, hd) = (layout.block_size, layout.num_kv_heads, layout.head_dim);
    let rows = nkv * bs;
    let simd = T::simd(simd_level());
    let mut row = vec![0.0f32; hd];
    for &(src, dst) in copies {
        let (src, dst) = (src as usize * rows, dst as usize * rows);
        v.copy_within(src * hd..(src + rows) * hd, dst * hd);
        if T::SCALED {
            v_scales.copy_within(src..src + rows, dst);
        }
        for r in 0..rows {
            let (from, to) = ((src + r) * hd, (dst + r) * hd);
            let scale = if T::SCALED {
                &k_scales[src + r..src + r + 1]
            } else {
                &[][..]
            };
            T::widen_rows(&k[from..from + hd], scale, &mut row, simd);
            turn.rope
                .apply_qk_at(&mut [], 0, &mut row, 1, turn.cos, turn.sin);
            let s = T::narrow_row(&row, &mut k[to..to + hd], simd);
            if T::SCALED {
                k_scales[dst + r] = s;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use std::sync::Arc;

    use pagoda_gguf::GgufFile;
    use pagoda_kernels::attention::{KvScalesMut, write_kv};
    use pagoda_testkit::tiny_model::TinyModel;

    use super::*;
    use crate::KvCacheDtype;

    /// Reads the K row of (block, kv head, slot) of layer `il` as f32.
    fn key_row(kv: &mut KvCache, il: usize, block: usize, h: usize, slot: usize) -> Vec<f32> {
        let l = *kv.layout();
        let r = (block * l.num_kv_heads + h) * l.block_size + slot;
        let mut out = vec![0.0; l.head_dim];
        let at = r * l.head_dim..(r + 1) * l.head_dim;
        match kv.arenas_mut() {
            Arenas::F32 { k, .. } => out.copy_from_slice(&k[il][at]),
            Arenas::F16 { k, .. } => f16_row(&k[il][at], &mut out),
            Arenas::Int8 { k, k_scales, .. } => {
                i8::widen_rows(&k[il][at], &k_scales[il][r..r + 1], &mut out, false)
            }
        }
        out
    }

    fn f16_row(src: &[half::f16], dst: &mut [f32]) {
        <half::f16 as KvElement>::widen_rows(src, &[], dst, false);
    }

    /// Keys written at positions `p + delta` and shifted back equal keys written at `p`, within
    /// the element type's rounding (exact math in f32, so f32 agrees to 1e-5), for both RoPE
    /// bases of Gemma 3 (global and sliding-window layers) and for llama; values are copied.
    #[test]
    fn rerotated_keys_equal_keys_rotated_at_the_new_positions() {
        for spec in [TinyModel::llama(), TinyModel::gemma3()] {
            let mut model =
                Model::load(Arc::new(GgufFile::from_bytes(spec.to_bytes()).unwrap())).unwrap();
            for (dtype, tol) in [
                (KvCacheDtype::F32, 1e-5f32),
                (KvCacheDtype::F16, 4e-3),
                (KvCacheDtype::Int8, 2.5e-2),
            ] {
                model.set_kv_cache_dtype(dtype);
                let c = model.config().clone();
                let (bs, delta) = (4usize, 37u32);
                let mut kv = KvCache::new(&c, 6, bs).unwrap();
                let mut shifted = KvCache::new(&c, 6, bs).unwrap();
                let row = c.kv_dim();
                // Two blocks of keys: positions 100.. (block 0, 1) moved to 63.. (blocks 4, 5).
                let n = 2 * bs;
                let raw: Vec<f32> = (0..n * row)
                    .map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0)
                    .collect();
                for il in 0..c.n_layers {
                    let rope = model.layer_rope(il);
                    let rotated = |base: u32| {
                        let mut k = raw.clone();
                        for (t, k) in k.chunks_exact_mut(row).enumerate() {
                            rope.apply(k, c.n_kv_heads, base + t as u32);
                        }
                        k
                    };
                    let (old, new) = (rotated(100), rotated(100 - delta));
                    let write = |kv: &mut KvCache, slots: &[u32], k: &[f32]| {
                        let layout = *kv.layout();
                        match kv.arenas_mut() {
                            Arenas::F32 { k: kc, v: vc } => {
                                let s = KvScalesMut::none();
                                write_kv(&layout, &mut kc[il], &mut vc[il], s, slots, k, &raw)
                            }
                            Arenas::F16 { k: kc, v: vc } => {
                                let s = KvScalesMut::none();
                                write_kv(&layout, &mut kc[il], &mut vc[il], s, slots, k, &raw)
                            }
                            Arenas::Int8 {
                                k: kc,
                                v: vc,
                                k_scales,
                                v_scales,
                            } => {
                                let s = KvScalesMut {
                                    k: &mut k_scales[il],
                                    v: &mut v_scales[il],
                                };
                                write_kv(&layout, &mut kc[il], &mut vc[il], s, slots, k, &raw)
                            }
                        }
                    };
                    let slots: Vec<u32> = (0..n as u32).collect();
                    write(&mut kv, &slots, &old);
                    let want_slots: Vec<u32> = (0..n as u32).map(|s| 4 * bs as u32 + s).collect();
                    write(&mut shifted, &want_slots, &new);
                }
                shift_blocks(&mut kv, &model, &[(0, 4), (1, 5)], delta);
                for il in 0..c.n_layers {
                    for (block, slot, h) in (0..2).flat_map(|b| {
                        (0..bs).flat_map(move |s| (0..c.n_kv_heads).map(move |h| (b, s, h)))
                    }) {
                        let got = key_row(&mut kv, il, 4 + block, h, slot);
                        let want = key_row(&mut shifted, il, 4 + block, h, slot);
                        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                (g - w).abs() <= tol,
                                "{:?} {dtype:?} layer {il} block {block} slot {slot} head {h}[{i}]: {g} vs {w}",
                                c.architecture
                            );
                        }
                    }
                }
            }
        }
    }
}
