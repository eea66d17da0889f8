//! A PEFT LoRA directory (`adapter_config.json` + `adapter_model.safetensors`) into an in-memory
//! GGUF adapter as llama.cpp's `convert_lora_to_gguf.py` writes one: tensors renamed onto the
//! base model's GGUF names (`<base>.lora_a` / `.lora_b`), Llama's q/k `lora_B` rows permuted
//! like the q/k weights, `fan_in_fan_out` undone, and the scale (alpha / r, or alpha / sqrt(r)
//! with rsLoRA) expressed as the GGUF's `adapter.lora.alpha` over each tensor's rank.

use std::path::Path;

use pagoda_gguf::{GgmlType, GgufAssembly, GgufFile, MetaValue};
use serde::Deserialize;

use crate::HfError;
use crate::config::Arch;
use crate::safetensors::SafetensorsFile;
use crate::tensor_names::{Transform, gguf_name, rope_permute_rows};

/// The base model a PEFT adapter is converted for: what the name mapping and the RoPE row
/// permutation need.
#[derive(Clone, Copy, Debug)]
pub struct LoraBase<'a> {
    /// GGUF `general.architecture` of the base model (`llama`, `qwen2`, `gemma3`).
    pub architecture: &'a str,
    pub n_heads: usize,
    pub n_kv_heads: usize,
}

/// The fields of `adapter_config.json` pagoda reads; the ones it cannot honour are refused.
#[derive(Debug, Deserialize)]
struct AdapterConfig {
    #[serde(default)]
    peft_type: Option<String>,
    r: usize,
    #[serde(default = "default_alpha")]
    lora_alpha: f32,
    #[serde(default)]
    use_rslora: bool,
    #[serde(default)]
    fan_in_fan_out: bool,
    #[serde(default)]
    bias: Option<String>,
    #[serde(default)]
    use_dora: bool,
    #[serde(default)]
    modules_to_save: Option<serde_json::Value>,
    #[serde(default)]
    rank_pattern: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    alpha_pattern: Option<serde_json::Map<String, serde_json::Value>>,
}

fn default_alpha() -> f32 {
    8.0 // PEFT's LoraConfig default
}

/// True when `dir` looks like a PEFT adapter directory.
pub fn is_peft_dir(dir: &Path) -> bool {
    dir.join("adapter_config.json").is_file()
}

/// Reads the PEFT adapter in `dir` for `base` as a GGUF adapter file.
pub fn convert_lora(dir: &Path, base: LoraBase<'_>) -> Result<GgufFile, HfError> {
    let config_path = dir.join("adapter_config.json");
    let text = crate::read_text::read_text(&config_path)?;
    let bad = |message: String| HfError::BadFile {
        path: config_path.clone(),
        message,
    };
    let cfg: AdapterConfig = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if let Some(t) = &cfg.peft_type
        && t != "LORA"
    {
        return Err(bad(format!(
            "peft_type is {t:?}, only LORA adapters are supported"
        )));
    }
    if cfg.use_dora {
        return Err(bad("use_dora: DoRA adapters are not supported".into()));
    }
    if cfg.bias.as_deref().is_some_and(|b| b != "none") {
        return Err(bad(
            "bias: adapters that train biases are not supported".into()
        ));
    }
    if cfg
        .modules_to_save
        .as_ref()
        .is_some_and(|m| !m.is_null() && m.as_array().is_none_or(|a| !a.is_empty()))
    {
        return Err(bad("modules_to_save: adapters that replace whole modules (embeddings, LM head) are not supported".into()));
    }
    for (key, pattern) in [
        ("rank_pattern", &cfg.rank_pattern),
        ("alpha_pattern", &cfg.alpha_pattern),
    ] {
        if pattern.as_ref().is_some_and(|p| !p.is_empty()) {
            return Err(bad(format!(
                "{key}: per-module ranks or alphas are not supported"
            )));
        }
    }
    // GGUF scales by alpha / rank: pick the alpha that gives PEFT's scale. It must be finite
    // (rsLoRA's sqrt(r) can take a finite lora_alpha past f32::MAX): an infinite one would
    // turn every output of the adapter into inf or NaN.
    let r = cfg.r as f32;
    let alpha = if cfg.use_rslora {
        cfg.lora_alpha * r.sqrt()
    } else {
        cfg.lora_alpha
    };
    if cfg.r == 0 || !alpha.is_finite() {
        return Err(bad(format!(
            "r = {} and lora_alpha = {}{} do not make a finite scale",
            cfg.r,
            cfg.lora_alpha,
            if cfg.use_rslora { " (rsLoRA)" } else { "" }
        )));
    }
    let arch = match base.architecture {
        "llama" => Arch::Llama,
        "qwen2" => Arch::Qwen2,
        "gemma3" => Arch::Gemma3,
        other => return Err(HfError::UnsupportedArchitecture(other.to_owned())),
    };
    let weights = SafetensorsFile::open(&dir.join("adapter_model.safetensors"))?;
    let mut out = GgufAssembly::new();
    out.kv(
        "general.architecture",
        MetaValue::String(base.architecture.into()),
    );
    out.kv("general.type", MetaValue::String("adapter".into()));
    out.kv("adapter.type", MetaValue::String("lora".into()));
    out.kv("adapter.lora.alpha", MetaValue::F32(alpha));
    let mut names: Vec<&str> = weights.names().collect();
    names.sort_unstable();
    for name in names {
        add_tensor(&mut out, &weights, name, arch, base, &cfg)?;
    }
    Ok(out.finish())
}

/// One `lora_A` / `lora_B` tensor under its GGUF name, in GGUF's layout.
fn add_tensor(
    out: &mut GgufAssembly,
    weights: &SafetensorsFile,
    name: &str,
    arch: Arch,
    base: LoraBase<'_>,
    cfg: &AdapterConfig,
) -> Result<(), HfError> {
    let unknown = |detail: &str| HfError::BadTensor {
        name: name.to_owned(),
        detail: detail.to_owned(),
    };
    let stem = name.strip_prefix("base_model.model.").unwrap_or(name);
    let (module, is_a) = [".lora_A.weight", ".lora_A.default.weight"]
        .iter()
        .find_map(|s| stem.strip_suffix(s).map(|m| (m, true)))
        .or_else(|| {
            [".lora_B.weight", ".lora_B.default.weight"]
                .iter()
                .find_map(|s| stem.strip_suffix(s).map(|m| (m, false)))
        })
        .ok_or_else(|| unknown("not a lora_A / lora_B weight"))?;
    let (gguf, transform) = gguf_name(
        arch,
        &format!("{module}.weight"),
        base.n_heads,
        base.n_kv_heads,
    )
    .ok_or_else(|| unknown("does not adapt a projection of this model"))?;
    if gguf.starts_with("token_embd") || gguf.starts_with("output") {
        return Err(unknown(
            "adapters on the embeddings or the LM head are not supported",
        ));
    }
    let view = weights
        .tensor(name)
        .ok_or_else(|| unknown("has an unsupported dtype"))?;
    let &[d0, d1] = view.shape else {
        return Err(unknown(&format!(
            "has shape {:?}, expected two dimensions",
            view.shape
        )));
    };
    let mut values = view.to_f32();
    // PEFT stores A as [r, in] and B as [out, r]; fan_in_fan_out (Conv1D) stores them transposed.
    let (rows, cols) = if cfg.fan_in_fan_out {
        values = transpose(&values, d0, d1);
        (d1, d0)
    } else {
        (d0, d1)
    };
    let rank = if is_a { rows } else { cols };
    if rank != cfg.r {
        return Err(unknown(&format!(
            "has rank {rank} but adapter_config.json says r = {}",
            cfg.r
        )));
    }
    if !is_a && let Transform::RopePermute { heads } = transform {
        if heads == 0 || !rows.is_multiple_of(heads) {
            return Err(unknown(&format!(
                "has {rows} rows, not a whole number of {heads} heads"
            )));
        }
        values = rope_permute_rows(&values, heads, cols);
    }
    let suffix = if is_a { "lora_a" } else { "lora_b" };
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    out.tensor(
        &format!("{gguf}.{suffix}"),
        &[cols as u64, rows as u64],
        GgmlType::F32,
        &bytes,
    )?;
    Ok(())
}

/// `[rows][cols]` into `[cols][rows]`.
fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = v[r * cols + c];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `peft_config` fuzz target: a finite `lora_alpha` whose rsLoRA scale
    /// overflows f32 made an adapter of infinite alpha; it is refused now.
    #[test]
    fn an_alpha_that_overflows_is_refused() {
        let dir = std::env::temp_dir().join(format!("pagoda-peft-alpha-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let config = r#"{"r": 4, "lora_alpha": 2e38, "use_rslora": true, "modules_to_save": []}"#;
        std::fs::write(dir.join("adapter_config.json"), config).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            dir.join("adapter_model.safetensors"),
            b"\x02\x00\x00\x00\x00\x00\x00\x00{}",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let base = LoraBase {
            architecture: "llama",
            n_heads: 4,
            n_kv_heads: 2,
        };
        let err = match convert_lora(&dir, base) {
            Ok(_) => panic!("an infinite alpha was taken"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("finite scale"), "{err}");
        // Without rsLoRA the same alpha is a scale (2e38 / 4).
        let plain = r#"{"r": 4, "lora_alpha": 2e38}"#;
        std::fs::write(dir.join("adapter_config.json"), plain).unwrap_or_else(|e| panic!("{e}"));
        assert!(convert_lora(&dir, base).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
