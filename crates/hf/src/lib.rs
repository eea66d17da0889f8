//! Hugging Face checkpoint directories: `config.json`, `*.safetensors` (one file or sharded by
//! `model.safetensors.index.json`), `tokenizer.json` and `tokenizer_config.json`. [`convert`]
//! maps them onto GGUF's tensor names, layouts and metadata keys and quantizes the matrices in
//! situ, giving an in-memory [`pagoda_gguf::GgufFile`] that the rest of pagoda loads as it
//! loads any GGUF.

mod checkpoint;
mod config;
mod convert;
mod cross_encoder;
mod error;
mod matrix_bytes;
mod peft;
mod prompts;
mod quantization;
mod read_text;
mod safetensors;
mod sentence_transformers;
mod tensor_names;
mod tokenizer_json;

pub use checkpoint::{Checkpoint, is_checkpoint_dir, is_cross_encoder_dir, is_encoder_dir};
pub use config::HfConfig;
pub use convert::convert;
pub use cross_encoder::POOLING_RANK;
pub use error::HfError;
pub use peft::{LoraBase, convert_lora, is_peft_dir};
pub use quantization::Quantization;
pub use safetensors::{Dtype, SafetensorsFile, TensorView};
pub use sentence_transformers::{POOLING_CLS, POOLING_LAST, POOLING_MEAN};
