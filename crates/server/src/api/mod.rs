//! Stage 2, each API's dialect: its endpoints, how its request joins the chat path (messages,
//! tools, constraints) and how a generation's outputs become its wire shape. OpenAI's Chat,
//! Completions and Embeddings, Anthropic's Messages, OpenAI's Responses, vLLM's extras (rerank
//! and score among them), text-embeddings-inference's `/embed` and `/rerank`, and the models'
//! lifecycle (`/models/load`, `/models/unload`).

pub mod anthropic;
pub mod encoder_request;
pub mod ids;
pub mod lifecycle;
pub mod openai;
pub mod responses;
pub mod tei;
pub mod vllm;
