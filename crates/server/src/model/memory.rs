//! What a model costs in memory, counted against `--models-memory`: its weights, its KV pool
//! and a scratch allowance for activations. Estimated from the files before a load (to make
//! room first), then taken from the engine's own sizing once loaded.

use std::path::Path;

use pagoda_hf::Quantization;
use pagoda_model::EngineSetup;

/// Activations, sampling buffers and the like, per model: small next to weights and KV on
/// the models served here, so a flat allowance.
pub const SCRATCH_BYTES: u64 = 64 << 20;

/// Left to the rest of the machine when the budget is the default.
const MARGIN_BYTES: u64 = 2 << 30;

/// `--models-memory`'s default: the memory available at start-up minus a margin.
pub fn default_budget() -> u64 {
    pagoda_core::config::available_memory()
        .map_or(8 << 30, |m| m.saturating_sub(MARGIN_BYTES).max(1 << 30))
}

/// The bytes of a model's weights as loaded: a GGUF file's size, or a checkpoint directory's
/// safetensors scaled to the type its matrices are converted to.
pub fn weights_bytes(path: &Path, quantization: Quantization) -> u64 {
    if !path.is_dir() {
        return std::fs::metadata(path).map_or(0, |m| m.len());
    }
    let stored: u64 = std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    // Counted as if stored in f32 (the larger case): q8_0 keeps 34 bytes of 128, the 4-bit
    // types 18; a 16-bit checkpoint is overestimated, which only makes room early.
    match quantization {
        Quantization::Q8_0 => stored * 34 / 128,
        Quantization::Q4K | Quantization::Q4_0 => stored * 18 / 128,
        Quantization::None => stored,
    }
}

/// The KV pool a generation model gets under `setup` (the engine's own default when unset).
pub fn kv_bytes(setup: &EngineSetup) -> u64 {
    setup
        .kv_cache_memory
        .unwrap_or_else(pagoda_core::config::default_kv_budget)
}

/// A model's cost before it loads.
pub fn estimate(path: &Path, quantization: Quantization, setup: &EngineSetup) -> u64 {
    let kv = if pagoda_hf::is_encoder_dir(path) {
        0
    } else {
        kv_bytes(setup)
    };
    weights_bytes(path, quantization) + kv + SCRATCH_BYTES
}
