//! Hugging Face tensor names onto GGUF's (as llama.cpp's convert_hf_to_gguf.py and
//! gguf-py's tensor_mapping.py map them), and the two value changes that conversion makes:
//! Llama's Q/K rows are permuted from HF's half-split RoPE pairing to GGUF's interleaved one,
//! and Gemma's RMSNorm weights are stored as `1 + w` (HF computes `x * (1 + w)`).

use crate::config::Arch;

/// A change to a tensor's values on the way to GGUF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transform {
    None,
    /// Permute the rows of each of `heads` heads from HF's pairing to GGUF's.
    RopePermute {
        heads: usize,
    },
    /// Add 1 to every value (Gemma norms).
    AddOne,
}

/// The GGUF name of HF tensor `name` and how its values change, `None` for a tensor pagoda
/// does not use (e.g. `rotary_emb.inv_freq`, vision towers).
pub fn gguf_name(
    arch: Arch,
    name: &str,
    n_heads: usize,
    n_kv_heads: usize,
) -> Option<(String, Transform)> {
    if arch == Arch::Bert {
        return bert_name(name).map(|n| (n, Transform::None));
    }
    if arch == Arch::BertCrossEncoder {
        // The head under llama.cpp's reranker names (`cls` then `cls.output`, as its RANK
        // pooling reads them); a plain BertModel's pooler is not used, so not converted.
        let head = match name.rsplit_once('.') {
            Some(("bert.pooler.dense" | "pooler.dense", suffix)) => Some(format!("cls.{suffix}")),
            Some(("classifier", suffix)) => Some(format!("cls.output.{suffix}")),
            _ => None,
        };
        return head
            .or_else(|| bert_name(name))
            .map(|n| (n, Transform::None));
    }
    // EmbeddingGemma's tensors are Gemma 3's.
    let arch = if arch == Arch::GemmaEmbedding {
        Arch::Gemma3
    } else {
        arch
    };
    let name = ["language_model.model.", "language_model.", "model."]
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .unwrap_or(name);
    let norm = if arch == Arch::Gemma3 {
        Transform::AddOne
    } else {
        Transform::None
    };
    match name {
        "embed_tokens.weight" => return Some(("token_embd.weight".into(), Transform::None)),
        "norm.weight" => return Some(("output_norm.weight".into(), norm)),
        "lm_head.weight" => return Some(("output.weight".into(), Transform::None)),
        _ => {}
    }
    let rest = name.strip_prefix("layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, suffix) = rest.rsplit_once('.')?;
    let (gguf, transform) = match (module, arch) {
        ("input_layernorm", _) => ("attn_norm", norm),
        ("post_attention_layernorm", Arch::Gemma3) => ("post_attention_norm", norm),
        ("post_attention_layernorm", _) => ("ffn_norm", norm),
        ("pre_feedforward_layernorm", Arch::Gemma3) => ("ffn_norm", norm),
        ("post_feedforward_layernorm", Arch::Gemma3) => ("post_ffw_norm", norm),
        ("self_attn.q_norm", Arch::Gemma3) => ("attn_q_norm", norm),
        ("self_attn.k_norm", Arch::Gemma3) => ("attn_k_norm", norm),
        ("self_attn.q_norm", Arch::Qwen3) => ("attn_q_norm", Transform::None),
        ("self_attn.k_norm", Arch::Qwen3) => ("attn_k_norm", Transform::None),
        ("self_attn.q_proj", Arch::Llama) => ("attn_q", Transform::RopePermute { heads: n_heads }),
        ("self_attn.k_proj", Arch::Llama) => {
            ("attn_k", Transform::RopePermute { heads: n_kv_heads })
        }
        ("self_attn.q_proj", _) => ("attn_q", Transform::None),
        ("self_attn.k_proj", _) => ("attn_k", Transform::None),
        ("self_attn.v_proj", _) => ("attn_v", Transform::None),
        ("self_attn.o_proj", _) => ("attn_output", Transform::None),
        ("mlp.gate_proj", _) => ("ffn_gate", Transform::None),
        ("mlp.up_proj", _) => ("ffn_up", Transform::None),
        ("mlp.down_proj", _) => ("ffn_down", Transform::None),
        _ => return None,
    };
    // A bias (Qwen2's q/k/v) is permuted like its rows.
    Some((format!("blk.{layer}.{gguf}.{suffix}"), transform))
}

/// BERT's names as llama.cpp's `bert` architecture has them (gguf-py tensor_mapping.py).
fn bert_name(name: &str) -> Option<String> {
    let name = name.strip_prefix("bert.").unwrap_or(name);
    let (module, suffix) = name.rsplit_once('.')?;
    let fixed = match module {
        "embeddings.word_embeddings" => Some("token_embd"),
        "embeddings.position_embeddings" => Some("position_embd"),
        "embeddings.token_type_embeddings" => Some("token_types"),
        "embeddings.LayerNorm" => Some("token_embd_norm"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(format!("{f}.{suffix}"));
    }
    let rest = module.strip_prefix("encoder.layer.")?;
    let (layer, module) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let gguf = match module {
        "attention.self.query" => "attn_q",
        "attention.self.key" => "attn_k",
        "attention.self.value" => "attn_v",
        "attention.output.dense" => "attn_output",
        "attention.output.LayerNorm" => "attn_output_norm",
        "intermediate.dense" => "ffn_up",
        "output.dense" => "ffn_down",
        "output.LayerNorm" => "layer_output_norm",
        _ => return None,
    };
    Some(format!("blk.{layer}.{gguf}.{suffix}"))
}

/// GGUF row of HF row `r` for a tensor of `heads` heads of `head_dim` rows each: HF keeps the
/// two halves of each RoPE pair `head_dim / 2` rows apart, GGUF keeps them adjacent
/// (convert_hf_to_gguf.py LlamaModel.permute).
fn permuted_row(r: usize, head_dim: usize) -> usize {
    let (h, within) = (r / head_dim, r % head_dim);
    let half = head_dim / 2;
    let (j, i) = (within / half, within % half);
    h * head_dim + 2 * i + j
}

/// Reorders the rows (`cols` values each) of a Q or K projection from HF's layout to GGUF's.
pub fn rope_permute_rows(values: &[f32], heads: usize, cols: usize) -> Vec<f32> {
    let rows = values.len() / cols.max(1);
    let head_dim = rows / heads.max(1);
    let mut out = vec![0.0; values.len()];
    for r in 0..rows {
        let dst = permuted_row(r, head_dim);
        out[dst * cols..(dst + 1) * cols].copy_from_slice(&values[r * cols..(r + 1) * cols]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_interleaves_the_halves() {
        // One head of 4 rows: HF [a0 a1 b0 b1] (pairs (a0,b0), (a1,b1)) -> GGUF [a0 b0 a1 b1].
        let hf = [0.0, 1.0, 2.0, 3.0];
        assert_eq!(rope_permute_rows(&hf, 1, 1), [0.0, 2.0, 1.0, 3.0]);
        // Two heads of 4 rows of 2 columns: each head on its own, rows moved whole.
        let hf: Vec<f32> = (0..16).map(|i| i as f32).collect();
        let want = [
            0., 1., 4., 5., 2., 3., 6., 7., 8., 9., 12., 13., 10., 11., 14., 15.,
        ];
        assert_eq!(rope_permute_rows(&hf, 2, 2), want);
    }

    #[test]
    fn names_map_per_architecture() {
        let g = |arch, n| gguf_name(arch, n, 4, 2);
        assert_eq!(
            g(Arch::Llama, "model.layers.3.self_attn.k_proj.weight"),
            Some((
                "blk.3.attn_k.weight".into(),
                Transform::RopePermute { heads: 2 }
            ))
        );
        assert_eq!(
            g(Arch::Qwen2, "model.layers.0.self_attn.q_proj.bias"),
            Some(("blk.0.attn_q.bias".into(), Transform::None))
        );
        assert_eq!(
            g(
                Arch::Gemma3,
                "model.layers.1.pre_feedforward_layernorm.weight"
            ),
            Some(("blk.1.ffn_norm.weight".into(), Transform::AddOne))
        );
        assert_eq!(
            g(
                Arch::Llama,
                "model.layers.1.post_attention_layernorm.weight"
            ),
            Some(("blk.1.ffn_norm.weight".into(), Transform::None))
        );
        assert_eq!(
            g(Arch::Llama, "model.layers.0.self_attn.rotary_emb.inv_freq"),
            None
        );
        // A cross-encoder's head under llama.cpp's reranker names; a BertModel's pooler unused.
        let ce = |n| g(Arch::BertCrossEncoder, n).map(|(n, _)| n);
        assert_eq!(
            ce("bert.pooler.dense.weight").as_deref(),
            Some("cls.weight")
        );
        assert_eq!(ce("classifier.bias").as_deref(), Some("cls.output.bias"));
        assert_eq!(
            ce("bert.encoder.layer.1.attention.self.query.weight").as_deref(),
            Some("blk.1.attn_q.weight")
        );
        assert_eq!(g(Arch::Bert, "pooler.dense.weight"), None);
    }
}
