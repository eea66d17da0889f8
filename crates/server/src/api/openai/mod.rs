//! OpenAI's Chat Completions, Completions, Embeddings and Models endpoints, and the wire forms
//! only they use (legacy and chat logprobs, base64 embeddings).

pub mod base64;
pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod logprobs;
pub mod models;
