//! The projections every block runs, over the weights and the shape alone (no KV cache, no
//! batch), so that the decoder's attention and the encoders run the same code: q/k/v with the
//! per-head norms and RoPE, the attention output, and the gated FFN.

use pagoda_kernels::ops::{self, Rope};
use pagoda_kernels::parallel;

use super::{Activation, Attention, Ffn, ForwardScratch, ensure, rows};
use crate::config::ModelConfig;
use crate::lora::LoraTarget;
use crate::weights::Weights;

/// `s.q`, `s.k`, `s.v` = the projections of `h` (`t` rows) for layer `il`, adapters added,
/// q and k normed per head (Gemma 3, Qwen3) and rotated by `rope` at the angles in
/// `s.rope_angles` (the sliding-window base's on a sliding-window layer).
#[allow(clippy::too_many_arguments)]
pub(crate) fn qkv(
    w: &Weights,
    c: &ModelConfig,
    rope: &Rope,
    il: usize,
    a: &Attention,
    h: &[f32],
    t: usize,
    s: &mut ForwardScratch,
) {
    let (qd, kvd) = (c.q_dim(), c.kv_dim());
    if let Some(qkv) = &a.qkv {
        let (q, k) = (ensure(&mut s.q, t * qd), ensure(&mut s.k, t * kvd));
        let v = ensure(&mut s.v, t * kvd);
        let (outs, m, tmp) = (&mut [q, k, v], &mut s.matmul, &mut s.stacked);
        w.forward_split(qkv, h, t, outs, m, tmp);
    } else {
        let q = ensure(&mut s.q, t * qd);
        w.forward(&a.q, h, t, q, &mut s.matmul);
        let k = ensure(&mut s.k, t * kvd);
        w.forward(&a.k, h, t, k, &mut s.matmul);
        let v = ensure(&mut s.v, t * kvd);
        w.forward(&a.v, h, t, v, &mut s.matmul);
    }
    let h = &h[..t * c.d_model];
    s.lora.add(il, LoraTarget::Q, h, &mut s.q[..t * qd], t);
    s.lora.add(il, LoraTarget::K, h, &mut s.k[..t * kvd], t);
    s.lora.add(il, LoraTarget::V, h, &mut s.v[..t * kvd], t);
    let angles = &s.rope_angles[usize::from(c.is_swa_layer(il))];
    let pairs = rope.pairs();
    let (q, k) = (&mut s.q[..t * qd], &mut s.k[..t * kvd]);
    // One pass per run of rows: the per-head norms, RoPE.
    parallel::for_rows(t, [q, k], &|r, [q, k]| {
        if let Some(w) = &a.q_norm {
            ops::rms_norm_rows(q, w, c.rms_eps);
        }
        if let Some(w) = &a.k_norm {
            ops::rms_norm_rows(k, w, c.rms_eps);
        }
        for (j, i) in r.enumerate() {
            let (qj, kj) = (&mut q[j * qd..][..qd], &mut k[j * kvd..][..kvd]);
            let (cos, sin) = (
                &angles.cos[i * pairs..][..pairs],
                &angles.sin[i * pairs..][..pairs],
            );
            rope.apply_qk_at(qj, c.n_heads, kj, c.n_kv_heads, cos, sin);
        }
    });
}

/// `out[t][d] = Wo . s.attn` (adapters added) over the first `t` rows of `s.attn`.
pub(crate) fn output(
    w: &Weights,
    c: &ModelConfig,
    il: usize,
    a: &Attention,
    t: usize,
    out: &mut [f32],
    s: &mut ForwardScratch,
) {
    let qd = c.q_dim();
    let out = &mut out[..t * c.d_model];
    w.forward(&a.o, &s.attn[..t * qd], t, out, &mut s.matmul);
    s.lora.add(il, LoraTarget::O, &s.attn[..t * qd], out, t);
}

/// `out[t][d] = down(act(gate h) * up h)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn ffn(
    w: &Weights,
    c: &ModelConfig,
    il: usize,
    f: &Ffn,
    act: Activation,
    h: &[f32],
    t: usize,
    out: &mut [f32],
    s: &mut ForwardScratch,
) {
    let n = c.ffn_dim;
    let gated = |g: &mut [f32], u: &[f32]| match act {
        Activation::Silu => ops::silu_mul(g, u),
        Activation::GeluTanh => ops::gelu_tanh_mul(g, u),
    };
    let (gate, up) = (ensure(&mut s.gate, t * n), ensure(&mut s.up, t * n));
    if let Some(gate_up) = &f.gate_up {
        let (outs, m, tmp) = (&mut [gate, up], &mut s.matmul, &mut s.stacked);
        w.forward_split(gate_up, h, t, outs, m, tmp);
    } else {
        w.forward(&f.gate, h, t, gate, &mut s.matmul);
        w.forward(&f.up, h, t, up, &mut s.matmul);
    }
    let h = &h[..t * c.d_model];
    s.lora.add(il, LoraTarget::Gate, h, &mut s.gate[..t * n], t);
    s.lora.add(il, LoraTarget::Up, h, &mut s.up[..t * n], t);
    rows::gated_rows(&mut s.gate[..t * n], &s.up[..t * n], n, &gated);
    w.forward(&f.down, &s.gate[..t * n], t, out, &mut s.matmul);
    let out = &mut out[..t * c.d_model];
    s.lora.add(il, LoraTarget::Down, &s.gate[..t * n], out, t);
}
