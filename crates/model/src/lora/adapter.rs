//! The in-memory adapter: per layer and projection, A as `[rank][in]` and B transposed as
//! `[rank][out]` (both products of `kernels::lora` read contiguous rows), the scale folded from
//! alpha / rank and the user's scale, and a digest of all of it that keys the prefix cache.

use sha2::{Digest, Sha256};

use crate::config::ModelConfig;

/// A linear layer an adapter may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LoraTarget {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl LoraTarget {
    pub const ALL: [LoraTarget; 7] = [
        Self::Q,
        Self::K,
        Self::V,
        Self::O,
        Self::Gate,
        Self::Up,
        Self::Down,
    ];

    /// The GGUF tensor stem: `blk.N.{stem}.weight`.
    pub fn gguf_stem(self) -> &'static str {
        match self {
            Self::Q => "attn_q",
            Self::K => "attn_k",
            Self::V => "attn_v",
            Self::O => "attn_output",
            Self::Gate => "ffn_gate",
            Self::Up => "ffn_up",
            Self::Down => "ffn_down",
        }
    }

    pub(crate) fn from_gguf_stem(stem: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.gguf_stem() == stem)
    }

    /// `(out, in)` of the layer in a model of `c`.
    pub fn shape(self, c: &ModelConfig) -> (usize, usize) {
        match self {
            Self::Q => (c.q_dim(), c.d_model),
            Self::K | Self::V => (c.kv_dim(), c.d_model),
            Self::O => (c.d_model, c.q_dim()),
            Self::Gate | Self::Up => (c.ffn_dim, c.d_model),
            Self::Down => (c.d_model, c.ffn_dim),
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One projection's low-rank update `scale * B A`.
#[derive(Clone, Debug)]
pub struct LoraWeights {
    pub(super) rank: usize,
    pub(super) d_in: usize,
    pub(super) d_out: usize,
    /// `[rank][in]`.
    pub(super) a: Vec<f32>,
    /// B transposed: `[rank][out]`.
    pub(super) bt: Vec<f32>,
    pub(super) scale: f32,
}

impl LoraWeights {
    /// From A (`[rank][in]`) and B as stored (`[out][rank]`).
    pub fn new(rank: usize, d_in: usize, d_out: usize, a: Vec<f32>, b: &[f32], scale: f32) -> Self {
        debug_assert!(a.len() == rank * d_in && b.len() == rank * d_out);
        let mut bt = vec![0f32; rank * d_out];
        for (o, row) in b.chunks_exact(rank).enumerate() {
            for (j, &v) in row.iter().enumerate() {
                bt[j * d_out + o] = v;
            }
        }
        Self {
            rank,
            d_in,
            d_out,
            a,
            bt,
            scale,
        }
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// The matrices as the kernels take them.
    pub fn mats(&self) -> pagoda_kernels::lora::LoraMats<'_> {
        pagoda_kernels::lora::LoraMats {
            a: &self.a,
            bt: &self.bt,
            rank: self.rank,
            scale: self.scale,
        }
    }

    /// The dense update `scale * B A` as `[out][in]`, summed in f64 (for merging and tests).
    pub fn delta(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.d_out * self.d_in];
        for (o, row) in out.chunks_exact_mut(self.d_in).enumerate() {
            for (i, v) in row.iter_mut().enumerate() {
                let s: f64 = (0..self.rank)
                    .map(|j| self.bt[j * self.d_out + o] as f64 * self.a[j * self.d_in + i] as f64)
                    .sum();
                *v = (self.scale as f64 * s) as f32;
            }
        }
        out
    }

    fn bytes(&self) -> usize {
        4 * (self.a.len() + self.bt.len())
    }

    /// Shapes, scale and weights as little-endian bytes: a layout fixed by this code, not by
    /// the compiler, so the digest is the same in every build.
    fn hash_into(&self, h: &mut Sha256) {
        for n in [self.rank, self.d_in, self.d_out] {
            h.update((n as u64).to_le_bytes());
        }
        h.update(self.scale.to_bits().to_le_bytes());
        for v in self.a.iter().chain(&self.bt) {
            h.update(v.to_bits().to_le_bytes());
        }
    }
}

/// An adapter over every layer of one base model.
#[derive(Debug)]
pub struct LoraAdapter {
    layers: Vec<[Option<LoraWeights>; 7]>,
    digest: u64,
}

impl LoraAdapter {
    /// An adapter over `n_layers` layers from `(layer, target, weights)` parts (shapes already
    /// checked against the model). Two adapters with equal parts have equal digests.
    pub(crate) fn from_parts(
        n_layers: usize,
        parts: impl IntoIterator<Item = (usize, LoraTarget, LoraWeights)>,
    ) -> Self {
        let mut adapter = Self::with_digest(n_layers, parts, 0);
        let mut h = Sha256::new();
        h.update(b"pagoda-lora-v1");
        for (il, layer) in adapter.layers.iter().enumerate() {
            for (t, w) in layer.iter().enumerate() {
                if let Some(w) = w {
                    h.update((il as u64).to_le_bytes());
                    h.update((t as u64).to_le_bytes());
                    w.hash_into(&mut h);
                }
            }
        }
        // The first 8 bytes of SHA-256: pinned across builds (so a KV event or a disk-tier block
        // keyed by it means the same adapter everywhere) and wide enough for an identity.
        let sum = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&sum[..8]);
        adapter.digest = u64::from_le_bytes(first);
        adapter
    }

    /// The adapter of `parts` under a digest given (a tensor-parallel rank's part keeps the
    /// whole adapter's).
    pub(super) fn with_digest(
        n_layers: usize,
        parts: impl IntoIterator<Item = (usize, LoraTarget, LoraWeights)>,
        digest: u64,
    ) -> Self {
        let mut layers: Vec<[Option<LoraWeights>; 7]> =
            (0..n_layers).map(|_| Default::default()).collect();
        for (il, t, w) in parts {
            layers[il][t.index()] = Some(w);
        }
        Self { layers, digest }
    }

    /// The update of `target` in layer `il`, if the adapter has one.
    pub fn get(&self, il: usize, target: LoraTarget) -> Option<&LoraWeights> {
        self.layers.get(il)?[target.index()].as_ref()
    }

    /// A digest of every weight, shape and scale: the adapter's identity in the prefix cache.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// Layers the adapter was built for.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// The largest rank of its updates.
    pub fn max_rank(&self) -> usize {
        self.parts().map(|(_, _, w)| w.rank).max().unwrap_or(0)
    }

    /// Bytes its weights take in memory.
    pub fn memory_bytes(&self) -> usize {
        self.parts().map(|(_, _, w)| w.bytes()).sum()
    }

    /// Whether every update has the shape of its projection in a model of `c`.
    pub fn fits(&self, c: &ModelConfig) -> bool {
        self.layers.len() == c.n_layers
            && self
                .parts()
                .all(|(_, t, w)| t.shape(c) == (w.d_out, w.d_in))
    }

    /// Every `(layer, target, update)` it holds.
    pub fn parts(&self) -> impl Iterator<Item = (usize, LoraTarget, &LoraWeights)> {
        self.layers.iter().enumerate().flat_map(|(il, l)| {
            LoraTarget::ALL
                .into_iter()
                .filter_map(move |t| l[t.index()].as_ref().map(|w| (il, t, w)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The digest is part of the pinned block hash (KV events, the disk tier): it must not move
    /// between builds or toolchains. A change to this value is a format change.
    #[test]
    fn the_digest_is_pinned() {
        let w = LoraWeights::new(
            2,
            3,
            2,
            vec![0.5, -1.0, 2.0, 0.25, 0.0, 1.5],
            &[1.0, 2.0, 3.0, 4.0],
            0.5,
        );
        let a = LoraAdapter::from_parts(2, [(1, LoraTarget::V, w.clone())]);
        let b = LoraAdapter::from_parts(2, [(1, LoraTarget::K, w)]);
        assert_ne!(a.digest(), b.digest(), "the target is part of the identity");
        assert_eq!(a.digest(), PINNED, "{:#018x}", a.digest());
    }

    const PINNED: u64 = 0x9451_274b_4263_2466;
}
