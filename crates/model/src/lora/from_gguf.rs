//! A GGUF LoRA adapter as llama.cpp's `convert_lora_to_gguf.py` writes it: `general.type =
//! adapter`, `adapter.type = lora`, `adapter.lora.alpha`, and per changed projection
//! `<base tensor>.lora_a` (ne `[in, rank]`) and `.lora_b` (ne `[rank, out]`), f32/f16/bf16/q8_0.
//! Every tensor is checked against the model before any is kept, so an error leaves nothing.

use std::collections::BTreeMap;
use std::path::Path;

use pagoda_gguf::{GgufFile, TensorInfo};
use pagoda_kernels::lora::MAX_RANK;
use pagoda_kernels::quant::{self, GgmlType};

use super::{LoraAdapter, LoraError, LoraTarget, LoraWeights};
use crate::config::ModelConfig;

/// How an adapter is applied and what is accepted.
#[derive(Clone, Copy, Debug)]
pub struct LoraOptions {
    /// Multiplies alpha / rank (llama.cpp's `--lora-scaled`, `pagoda generate --lora-scale`).
    pub scale: f32,
    /// Highest rank accepted (`--max-lora-rank`).
    pub max_rank: usize,
}

impl Default for LoraOptions {
    fn default() -> Self {
        Self {
            scale: 1.0,
            max_rank: MAX_RANK,
        }
    }
}

/// The two tensors of one projection, found by name.
#[derive(Default)]
struct Pair<'a> {
    a: Option<&'a TensorInfo>,
    b: Option<&'a TensorInfo>,
}

impl LoraAdapter {
    /// Opens the GGUF adapter at `path` for a model of `config`.
    pub fn open(path: &Path, config: &ModelConfig, opts: &LoraOptions) -> Result<Self, LoraError> {
        Self::from_gguf(&GgufFile::open(path)?, config, opts)
    }

    /// Reads the adapter in `file` for a model of `config`.
    pub fn from_gguf(
        file: &GgufFile,
        config: &ModelConfig,
        opts: &LoraOptions,
    ) -> Result<Self, LoraError> {
        let general_type = file.get_str("general.type")?;
        if general_type != Some("adapter") {
            return Err(LoraError::NotAnAdapter(general_type.map(str::to_owned)));
        }
        let adapter_type = file.get_str("adapter.type")?;
        if adapter_type != Some("lora") {
            return Err(LoraError::NotLora(adapter_type.map(str::to_owned)));
        }
        let arch = file.architecture()?;
        if arch != config.architecture.name() {
            return Err(LoraError::Architecture {
                adapter: arch.to_owned(),
                model: config.architecture.name().to_owned(),
            });
        }
        let alpha = file.get_f32("adapter.lora.alpha")?.unwrap_or(0.0);
        if !alpha.is_finite() {
            return Err(LoraError::BadAlpha(alpha));
        }
        let mut pairs: BTreeMap<(usize, usize), (LoraTarget, Pair)> = BTreeMap::new();
        for t in file.tensors() {
            let (base, is_a) = match (
                t.name.strip_suffix(".lora_a"),
                t.name.strip_suffix(".lora_b"),
            ) {
                (Some(base), _) => (base, true),
                (_, Some(base)) => (base, false),
                _ => return Err(LoraError::UnknownTensor(t.name.clone())),
            };
            let (il, target) = parse_base(base, config, &t.name)?;
            let entry = pairs
                .entry((il, target as usize))
                .or_insert_with(|| (target, Pair::default()));
            let slot = if is_a { &mut entry.1.a } else { &mut entry.1.b };
            *slot = Some(t);
        }
        if pairs.is_empty() {
            return Err(LoraError::Empty);
        }
        let max_rank = opts.max_rank.min(MAX_RANK);
        let mut parts = Vec::with_capacity(pairs.len());
        for ((il, _), (target, pair)) in pairs {
            let (a, b) = match (pair.a, pair.b) {
                (Some(a), Some(b)) => (a, b),
                (Some(a), None) => return Err(missing(&a.name, "lora_a", "lora_b")),
                (None, Some(b)) => return Err(missing(&b.name, "lora_b", "lora_a")),
                (None, None) => continue,
            };
            let (d_out, d_in) = target.shape(config);
            let rank = a.dims.get(1).copied().unwrap_or(0) as usize;
            check_shape(a, &[d_in as u64, rank as u64])?;
            check_shape(b, &[rank as u64, d_out as u64])?;
            if rank == 0 {
                return Err(LoraError::Shape {
                    name: a.name.clone(),
                    got: a.dims.clone(),
                    expected: vec![d_in as u64, 1],
                });
            }
            if rank > max_rank {
                return Err(LoraError::RankTooLarge {
                    name: a.name.clone(),
                    rank,
                    max: max_rank,
                });
            }
            let a_values = read_f32(file, a, d_in, rank)?;
            let b_values = read_f32(file, b, rank, d_out)?;
            // llama.cpp (llama-adapter.cpp): alpha 0 means "no alpha": the scale alone.
            let scale = if alpha != 0.0 {
                opts.scale * alpha / rank as f32
            } else {
                opts.scale
            };
            let w = LoraWeights::new(rank, d_in, d_out, a_values, &b_values, scale);
            parts.push((il, target, w));
        }
        Ok(LoraAdapter::from_parts(config.n_layers, parts))
    }
}

fn missing(name: &str, have: &str, want: &str) -> LoraError {
    let other = format!("{}{want}", &name[..name.len() - have.len()]);
    LoraError::MissingPair(name.to_owned(), other)
}

/// `blk.N.<stem>.weight` to its layer and projection.
fn parse_base(base: &str, c: &ModelConfig, name: &str) -> Result<(usize, LoraTarget), LoraError> {
    if base.starts_with("token_embd") || base.starts_with("output") {
        return Err(LoraError::UnsupportedTarget(name.to_owned()));
    }
    let unknown = || LoraError::UnknownTensor(name.to_owned());
    let rest = base.strip_prefix("blk.").ok_or_else(unknown)?;
    let (layer, rest) = rest.split_once('.').ok_or_else(unknown)?;
    let stem = rest.strip_suffix(".weight").ok_or_else(unknown)?;
    let il: usize = layer.parse().map_err(|_| unknown())?;
    let target = LoraTarget::from_gguf_stem(stem).ok_or_else(unknown)?;
    if il >= c.n_layers {
        return Err(unknown());
    }
    Ok((il, target))
}

fn check_shape(t: &TensorInfo, expected: &[u64]) -> Result<(), LoraError> {
    if t.dims != expected {
        return Err(LoraError::Shape {
            name: t.name.clone(),
            got: t.dims.clone(),
            expected: expected.to_vec(),
        });
    }
    Ok(())
}

/// The `rows x cols` tensor `t` dequantized to f32, every value finite.
fn read_f32(
    file: &GgufFile,
    t: &TensorInfo,
    cols: usize,
    rows: usize,
) -> Result<Vec<f32>, LoraError> {
    let bad_type = || LoraError::TensorType {
        name: t.name.clone(),
        ty: t.ty,
    };
    if !matches!(
        t.ty,
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::Q8_0
    ) {
        return Err(bad_type());
    }
    let row_bytes = t.ty.row_bytes(cols).ok_or_else(bad_type)?;
    let data = file.tensor_data(t);
    if data.len() != row_bytes * rows {
        return Err(LoraError::TensorSize {
            name: t.name.clone(),
            got: data.len(),
            expected: row_bytes * rows,
        });
    }
    let mut out = vec![0f32; rows * cols];
    for (src, dst) in data.chunks_exact(row_bytes).zip(out.chunks_exact_mut(cols)) {
        quant::dequantize_row(t.ty, src, dst);
    }
    if out.iter().any(|v| !v.is_finite()) {
        return Err(LoraError::NotFinite(t.name.clone()));
    }
    Ok(out)
}
