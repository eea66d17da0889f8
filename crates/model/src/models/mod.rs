//! The model: its weights, the layers both architectures share (attention over the paged KV
//! arena, gated FFN, embedding, LM head), and the forward pass over a flat batch. The per-block
//! graphs live in `llama.rs` and `gemma3.rs`.

mod forward;
pub(crate) mod gemma3;
mod head_rows;
mod llama;
mod output_rows;
pub(crate) mod projections;
pub(crate) mod rows;
mod weight_bytes;

use std::ops::Range;
use std::sync::Arc;

use pagoda_gguf::GgufFile;
use pagoda_kernels::attention::{self, AttnBatch, KvScales, KvScalesMut};
use pagoda_kernels::matmul::MatmulScratch;
use pagoda_kernels::ops::Rope;
use pagoda_kernels::parallel;

use crate::config::{Architecture, KvCacheDtype, ModelConfig};
use crate::kv::cache::Arenas;
use crate::lora::LoraRows;
use crate::pack_cache::{PackCache, PackCacheStatus, PackSession};
use crate::pipeline_parallel::PpStage;
use crate::tensor_parallel::{Shard, TpRank};
use crate::weights::{Linear, Matrix, Weights};
use crate::{ForwardBatch, KvCache, KvGroupPlan, ModelError};
use output_rows::OutputRows;

/// A loaded model: configuration, weights (in the mmap) and RoPE tables. Stateless: the KV
/// arena and scratch buffers are passed in.
pub struct Model {
    config: ModelConfig,
    weights: Weights,
    /// What the pack cache did while loading.
    pack_cache: PackCacheStatus,
    token_embd: Matrix,
    output_norm: Vec<f32>,
    /// The output projection: `output.weight`, or the token embedding when tied (`None` on a
    /// pipeline stage before the last).
    lm_head: Option<Linear>,
    /// The layers held (all of them but on a pipeline stage); `blocks[i]` is layer
    /// `layers.start + i`.
    layers: Range<usize>,
    blocks: Blocks,
    rope: Rope,
    rope_swa: Rope,
    /// The part of the model this rank holds (the whole of it without tensor parallelism).
    shard: Shard,
    /// The whole model's configuration (`config` is this rank's part of it).
    full_config: ModelConfig,
    /// The rank's group, with tensor parallelism: partial sums are all-reduced after each
    /// attention output and FFN, and the LM head's vocabulary slices gathered.
    tp: Option<TpRank>,
    /// The model's pipeline, when this is one of its stages.
    stage: Option<PpStage>,
}

enum Blocks {
    Llama(Vec<llama::Block>),
    Gemma3(Vec<gemma3::Block>),
}

/// The attention projections of one block.
pub(crate) struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    /// q, k and v stacked (`[q_dim + 2 kv_dim]` rows) when their types allow: one matmul.
    qkv: Option<Linear>,
    o: Linear,
    /// Per-head RMSNorm weights of q and k (Gemma 3).
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
}

/// The gated FFN of one block: `down(act(gate x) * up x)`.
pub(crate) struct Ffn {
    gate: Linear,
    up: Linear,
    /// gate and up stacked (`[2 ffn_dim]` rows) when their types allow: one matmul.
    gate_up: Option<Linear>,
    down: Linear,
}

/// Which gating nonlinearity an FFN uses.
#[derive(Clone, Copy)]
pub(crate) enum Activation {
    Silu,
    GeluTanh,
}

/// Reusable buffers of one forward pass; grown on demand, never shrunk.
#[derive(Default)]
pub struct ForwardScratch {
    pub(crate) x: Vec<f32>,
    pub(crate) h: Vec<f32>,
    pub(crate) out: Vec<f32>,
    pub(crate) q: Vec<f32>,
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
    pub(crate) attn: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    selected: Vec<f32>,
    /// A stacked projection's `[t][rows]` output when it cannot be written in parts
    /// (`Weights::forward_split` on a matrix without packed kernels).
    pub(crate) stacked: Vec<f32>,
    /// RoPE angles of the batch's positions, `[t][pairs]` cos then sin, for the global and
    /// (Gemma 3) sliding-window bases: computed once per step, used by every layer.
    pub(crate) rope_angles: [RopeAngles; 2],
    /// The last layer's surviving rows, when it can drop the others.
    output_rows: OutputRows,
    pub(crate) logits: Vec<f32>,
    /// This rank's vocabulary slice of the logits, and every rank's slices in rank order.
    local_logits: Vec<f32>,
    gathered: Vec<f32>,
    pub(crate) matmul: MatmulScratch,
    /// The step's adapters and which rows use them.
    lora: LoraRows,
}

/// One RoPE base's angles for a batch: `cos` and `sin`, `[t][pairs]` each.
#[derive(Default)]
pub(crate) struct RopeAngles {
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeAngles {
    /// Fills the angles of `positions` (rows split over the pool for a prompt).
    pub(crate) fn fill(&mut self, rope: &Rope, positions: &[u32]) {
        let len = positions.len() * rope.pairs();
        let (cos, sin) = (ensure(&mut self.cos, len), ensure(&mut self.sin, len));
        if len == 0 {
            return;
        }
        let pairs = rope.pairs();
        parallel::for_rows(positions.len(), [cos, sin], &|r, [cos, sin]| {
            let rows = cos.chunks_exact_mut(pairs).zip(sin.chunks_exact_mut(pairs));
            for ((c, s), &pos) in rows.zip(&positions[r]) {
                rope.angles(pos, c, s);
            }
        });
    }
}

pub(crate) fn ensure(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buf.len() < len {
        buf.resize(len, 0.0);
    }
    &mut buf[..len]
}

impl Model {
    /// Builds the model from an open GGUF file, checking every tensor's shape and type; packs
    /// the weights with no cache (the file's path is unknown: see [`Model::load_cached`]).
    pub fn load(file: Arc<GgufFile>) -> Result<Self, ModelError> {
        Self::load_with(file, PackSession::off(), None, None)
    }

    /// Rank `tp.rank`'s part of the model in `file` (`ffn_align` from
    /// [`crate::tensor_parallel::ffn_alignment`]). Packed without the cache: its layouts are
    /// the whole model's.
    pub(crate) fn load_rank(file: Arc<GgufFile>, tp: TpRank) -> Result<Self, ModelError> {
        Self::load_with(file, PackSession::off(), Some(tp), None)
    }

    /// Pipeline stage `stage.stage`'s layers of the model in `file` (embeddings on the first,
    /// the LM head on the last). Packed without the cache, as a tensor-parallel rank.
    pub(crate) fn load_stage(file: Arc<GgufFile>, stage: PpStage) -> Result<Self, ModelError> {
        Self::load_with(file, PackSession::off(), None, Some(stage))
    }

    /// [`Model::load`] for the file opened from `path`, with the packed weights cached where
    /// `cache` says: mapped from a valid cache file, else packed and written to one.
    pub fn load_cached(
        file: Arc<GgufFile>,
        path: &std::path::Path,
        cache: &PackCache,
    ) -> Result<Self, ModelError> {
        let session = PackSession::open(path, &file, cache);
        Self::load_with(file, session, None, None)
    }

    fn load_with(
        file: Arc<GgufFile>,
        pack: PackSession,
        tp: Option<TpRank>,
        mut stage: Option<PpStage>,
    ) -> Result<Self, ModelError> {
        let config = ModelConfig::from_gguf(&file)?;
        if !config.causal {
            // An encoder has no LM head to generate with: it is served for embeddings.
            return Err(ModelError::UnsupportedArchitecture(format!(
                "{} with bidirectional attention (an encoder: pagoda serves it for embeddings)",
                config.architecture.name()
            )));
        }
        let shard = match &tp {
            Some(tp) => {
                let align = crate::tensor_parallel::ffn_alignment(&file, &config);
                Shard::plan(&config, tp.rank, tp.size(), align)?
            }
            None => Shard::whole(&config),
        };
        let layers = match &mut stage {
            Some(st) => {
                st.plan_layers(config.n_layers)?;
                st.layers.clone()
            }
            None => 0..config.n_layers,
        };
        let holds_head = stage.as_ref().is_none_or(PpStage::is_last);
        let mut weights = Weights::with_pack_session(file, pack);
        let c = &config;
        let token_embd = weights.matrix("token_embd.weight", c.vocab_size, c.d_model)?;
        let output_norm = weights.vector("output_norm.weight", c.d_model)?;
        // Tied embeddings when the file has no output.weight (llama.cpp: "output" falls back
        // to "token_embd" with TENSOR_DUPLICATED in load_tensors).
        let lm_head = if !holds_head {
            None
        } else if weights.has("output.weight") {
            Some(weights.linear("output", c.vocab_size, c.d_model, false)?)
        } else {
            Some(Linear {
                weight: token_embd.clone(),
                bias: None,
            })
        };
        let lm_head = match lm_head {
            Some(l) => Some(weights.packed(weights.slice(l, shard.vocab.clone(), 0..c.d_model)?)),
            None => None,
        };
        let blocks = match c.architecture {
            Architecture::Llama | Architecture::Qwen2 | Architecture::Qwen3 => Blocks::Llama(
                layers
                    .clone()
                    .map(|il| llama::Block::load(&weights, c, il, &shard))
                    .collect::<Result<_, _>>()?,
            ),
            Architecture::Gemma3 => Blocks::Gemma3(
                layers
                    .clone()
                    .map(|il| gemma3::Block::load_shard(&weights, c, il, &shard))
                    .collect::<Result<_, _>>()?,
            ),
        };
        let rope = Rope::new(c.head_dim, c.n_rot, c.rope_base, c.rope_style);
        let rope_swa = Rope::new(c.head_dim, c.n_rot, c.rope_base_swa, c.rope_style);
        let pack_cache = weights.finish_packing();
        let full_config = config.clone();
        let config = shard.local_config(&config);
        Ok(Self {
            config,
            full_config,
            weights,
            pack_cache,
            token_embd,
            output_norm,
            lm_head,
            layers,
            blocks,
            rope,
            rope_swa,
            shard,
            tp,
            stage,
        })
    }

    /// The layers this instance holds (all but on a pipeline stage).
    pub fn layer_range(&self) -> Range<usize> {
        self.layers.clone()
    }

    /// The pipeline stage this instance is, if any.
    pub fn stage(&self) -> Option<&PpStage> {
        self.stage.as_ref()
    }

    /// `plan` as this instance's KV cache lays it out: a pipeline stage keeps arenas for its
    /// own layers only.
    pub fn kv_plan(&self, plan: &KvGroupPlan) -> KvGroupPlan {
        plan.for_layers(self.layers.clone())
    }

    /// The part of the model this instance holds.
    pub fn shard(&self) -> &Shard {
        &self.shard
    }

    /// The file the weights live in, shared (tensor-parallel ranks load from it).
    pub(crate) fn file_arc(&self) -> Arc<GgufFile> {
        self.weights.file_arc()
    }

    /// `x` summed over the tensor-parallel ranks (a row-parallel product's partial sums);
    /// nothing without tensor parallelism.
    pub(crate) fn all_reduce(&self, x: &mut [f32]) {
        if let Some(tp) = &self.tp {
            tp.all_reduce(x);
        }
    }

    /// Opens `path` and loads the model in it, with the pack cache the environment chooses
    /// ([`PackCache::from_env`]).
    pub fn open(path: &std::path::Path) -> Result<Self, ModelError> {
        Self::open_with(path, &PackCache::from_env())
    }

    /// Opens `path` and loads the model in it, with the packed weights cached as `cache` says.
    pub fn open_with(path: &std::path::Path, cache: &PackCache) -> Result<Self, ModelError> {
        Self::load_cached(Arc::new(GgufFile::open(path)?), path, cache)
    }

    /// What the pack cache did while this model loaded.
    pub fn pack_cache_status(&self) -> &PackCacheStatus {
        &self.pack_cache
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The whole model's configuration, which a tensor-parallel rank's [`Model::config`] is
    /// its part of (what adapters and requests are checked against).
    pub fn full_config(&self) -> &ModelConfig {
        &self.full_config
    }

    /// Chooses what KV caches built for this model store (before the executor is built).
    /// The RoPE layer `il` rotates its keys with (Gemma 3's sliding-window layers have their
    /// own base).
    pub(crate) fn layer_rope(&self, il: usize) -> &Rope {
        if self.config.is_swa_layer(il) {
            &self.rope_swa
        } else {
            &self.rope
        }
    }

    pub fn set_kv_cache_dtype(&mut self, dtype: KvCacheDtype) {
        self.config.kv_cache_dtype = dtype;
    }

    /// The GGUF the weights live in (tokenizer metadata is read from here too).
    pub fn gguf(&self) -> &GgufFile {
        self.weights.file()
    }

    /// `out[t][d] = Wo . attention(h)`: q/k/v projections, optional per-head norms, RoPE, KV
    /// write and paged attention for layer `il`. With `keep`, every row's K and V are written but
    /// only the kept rows are attended and projected: `out` gets `keep.len()` rows.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention(
        &self,
        il: usize,
        a: &Attention,
        h: &[f32],
        out: &mut [f32],
        batch: &ForwardBatch,
        kv: &mut KvCache,
        s: &mut ForwardScratch,
        keep: Option<&OutputRows>,
    ) {
        let c = &self.config;
        let t = batch.num_tokens();
        let (qd, kvd) = (c.q_dim(), c.kv_dim());
        projections::qkv(&self.weights, c, self.layer_rope(il), il, a, h, t, s);
        let swa = c.is_swa_layer(il);
        let t_out = keep.map_or(t, |o| o.len());
        if let Some(o) = keep {
            o.compact(&mut s.q[..t * qd], qd);
        }
        let (q, k, v) = (&s.q[..t_out * qd], &s.k[..t * kvd], &s.v[..t * kvd]);
        let layout = *kv.layout();
        // The layer's KV group decides its block table; its slot, the arena it lives in.
        let (group, arena) = (kv.plan().group(il), kv.plan().slot(il));
        let attn_batch = AttnBatch {
            query_start_loc: keep.map_or(&batch.query_start_loc, |o| o.query_start_loc()),
            seq_lens: &batch.seq_lens,
            block_tables: batch.group_block_tables(group),
            max_blocks_per_seq: batch.max_blocks_per_seq,
        };
        let window = if swa { c.sliding_window } else { None };
        let attn = ensure(&mut s.attn, t_out * qd);
        let (nh, scale, slots) = (c.n_heads, c.attn_scale, batch.group_slot_mapping(group));
        // One body for every element type: the generic kernels take the arena's slices as they are.
        #[allow(clippy::too_many_arguments)]
        fn write_and_attend<T: attention::KvElement>(
            kc: &mut [T],
            vc: &mut [T],
            (ks, vs): (&mut [f32], &mut [f32]),
            layout: &attention::KvLayout,
            slots: &[u32],
            (k, v): (&[f32], &[f32]),
            attn_batch: &AttnBatch<'_>,
            q: &[f32],
            (nh, scale, window): (usize, f32, Option<u32>),
            attn: &mut [f32],
        ) {
            let scales = KvScalesMut { k: ks, v: vs };
            attention::write_kv(layout, kc, vc, scales, slots, k, v);
            let scales = KvScales { k: ks, v: vs };
            attention::paged_attention(
                layout, kc, vc, scales, attn_batch, q, nh, scale, window, attn,
            );
        }
        let head = (nh, scale, window);
        let none = || (&mut [][..], &mut [][..]);
        match kv.arenas_mut() {
            Arenas::F32 { k: kc, v: vc } => write_and_attend(
                &mut kc[arena],
                &mut vc[arena],
                none(),
                &layout,
                slots,
                (k, v),
                &attn_batch,
                q,
                head,
                attn,
            ),
            Arenas::F16 { k: kc, v: vc } => write_and_attend(
                &mut kc[arena],
                &mut vc[arena],
                none(),
                &layout,
                slots,
                (k, v),
                &attn_batch,
                q,
                head,
                attn,
            ),
            Arenas::Int8 {
                k: kc,
                v: vc,
                k_scales,
                v_scales,
            } => write_and_attend(
                &mut kc[arena],
                &mut vc[arena],
                (&mut k_scales[arena], &mut v_scales[arena]),
                &layout,
                slots,
                (k, v),
                &attn_batch,
                q,
                head,
                attn,
            ),
        }
        projections::output(&self.weights, c, il, a, t_out, out, s);
    }
}

impl Attention {
    /// Loads `blk.{il}.attn_{q,k,v,output}` (with biases when `qkv_bias`) and, when `qk_norm`,
    /// `attn_{q,k}_norm`.
    /// With tensor parallelism, `shard`'s heads only: q/k/v by rows, the output by columns.
    pub(crate) fn load(
        w: &Weights,
        c: &ModelConfig,
        il: usize,
        (qkv_bias, qk_norm): (bool, bool),
        shard: &Shard,
    ) -> Result<Self, ModelError> {
        let p = format!("blk.{il}");
        let (qd, kvd, d) = (c.q_dim(), c.kv_dim(), c.d_model);
        let q_rows = Shard::rows(&shard.heads, c.head_dim);
        let kv_rows = Shard::rows(&shard.kv_heads, c.head_dim);
        let (q_norm, k_norm) = if qk_norm {
            (
                Some(w.vector(&format!("{p}.attn_q_norm.weight"), c.head_dim)?),
                Some(w.vector(&format!("{p}.attn_k_norm.weight"), c.head_dim)?),
            )
        } else {
            (None, None)
        };
        let q = w.linear(&format!("{p}.attn_q"), qd, d, qkv_bias)?;
        let q = w.slice(q, q_rows.clone(), 0..d)?;
        let k = w.linear(&format!("{p}.attn_k"), kvd, d, qkv_bias)?;
        let k = w.slice(k, kv_rows.clone(), 0..d)?;
        let v = w.linear(&format!("{p}.attn_v"), kvd, d, qkv_bias)?;
        let v = w.slice(v, kv_rows, 0..d)?;
        let o = w.linear(&format!("{p}.attn_output"), d, qd, false)?;
        let o = w.slice(o, 0..d, q_rows)?;
        // Only the matrices the forward pass multiplies by are packed: the stack, or the parts.
        let qkv = w.stacked(&[&q, &k, &v]).map(|l| w.packed(l));
        let (q, k, v) = match qkv {
            Some(_) => (q, k, v),
            None => (w.packed(q), w.packed(k), w.packed(v)),
        };
        Ok(Self {
            qkv,
            q,
            k,
            v,
            o: w.packed(o),
            q_norm,
            k_norm,
        })
    }
}

impl Ffn {
    /// Loads `blk.{il}.ffn_{gate,up,down}`; with tensor parallelism `shard`'s columns of
    /// the intermediate size only (gate and up by rows, down by columns).
    pub(crate) fn load(
        w: &Weights,
        c: &ModelConfig,
        il: usize,
        shard: &Shard,
    ) -> Result<Self, ModelError> {
        let p = format!("blk.{il}");
        let (f, d) = (c.ffn_dim, c.d_model);
        let gate = w.linear(&format!("{p}.ffn_gate"), f, d, false)?;
        let gate = w.slice(gate, shard.ffn.clone(), 0..d)?;
        let up = w.linear(&format!("{p}.ffn_up"), f, d, false)?;
        let up = w.slice(up, shard.ffn.clone(), 0..d)?;
        let down = w.linear(&format!("{p}.ffn_down"), d, f, false)?;
        let down = w.slice(down, 0..d, shard.ffn.clone())?;
        let gate_up = w.stacked(&[&gate, &up]).map(|l| w.packed(l));
        let (gate, up) = match gate_up {
            Some(_) => (gate, up),
            None => (w.packed(gate), w.packed(up)),
        };
        Ok(Self {
            gate_up,
            gate,
            up,
            down: w.packed(down),
        })
    }
}
