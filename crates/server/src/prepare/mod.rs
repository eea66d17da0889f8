//! Stage 3, an API request -> a `ValidRequest`: the shared fields checked into engine
//! parameters, chat messages through the template, tools, constraints, the LoRA adapter, KV
//! transfer and the request's speculative decoding, all refused with a `ValidationError` naming the field, before any compute.

pub mod blocking;
pub mod chat_prompt;
pub mod constraints;
pub mod embed;
pub mod field_policy;
pub mod kv_peers;
pub mod kv_transfer;
pub mod score_pairs;
pub mod speculative;
pub mod tools;
pub mod valid_request;
pub mod validate;
pub mod validation_error;
