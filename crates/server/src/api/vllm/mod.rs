//! vLLM's endpoints beyond the OpenAI API: `/tokenize`, `/detokenize` (llama.cpp's `content`
//! accepted too), runtime LoRA loading, and reranking and scoring (`/v1/rerank`, `/v1/score`).

pub mod lora;
pub mod rerank;
pub mod score;
pub mod tokenize;
