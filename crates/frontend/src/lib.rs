//! Text to tokens and back for GGUF models: tokenizers built from `tokenizer.ggml.*` metadata
//! (byte-level BPE and SentencePiece-style), incremental detokenization with stop strings, chat
//! templates, the tool-call and reasoning parsers of generated text, and the model catalog with
//! each model's recommended sampling.

mod bpe;
mod byte_level;
pub mod catalog;
pub mod chat_prompt;
pub mod chat_template;
mod decode_stream;
mod error;
pub mod generation_config;
mod gguf_vocab;
mod hf_tokenizer;
pub mod reasoning;
pub mod sampling_choice;
mod special;
mod spm;
mod strftime;
mod template_source;
mod text_stream;
mod tokenizer;
pub mod tool_calls;
mod vocab;

pub use catalog::Catalog;
pub use chat_template::{ChatMessage, ChatTemplate};
pub use decode_stream::DecodeStream;
pub use error::{TemplateError, TokenizerError};
pub use generation_config::{DefaultsSource, GenerationConfigError, SamplingDefaults};
pub use hf_tokenizer::HfTokenizer;
pub use reasoning::{ReasoningDelta, ReasoningParser, ReasoningStream};
pub use sampling_choice::GenerationConfigChoice;
pub use template_source::TemplateSource;
pub use text_stream::{StopMatch, TextDelta, TextStream, TextStreamError, TextStreamOptions};
pub use tokenizer::Tokenizer;
pub use tool_calls::{ParsedToolCall, ToolCallFormat, ToolCallStream, ToolEvent, ToolParserChoice};
pub use vocab::{GgufVocab, TokenType};
