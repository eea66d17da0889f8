//! vLLM's endpoints beyond the OpenAI API: `/tokenize`, `/detokenize` (llama.cpp's `content`
//! accepted too) and runtime LoRA loading.

pub mod lora;
pub mod tokenize;
