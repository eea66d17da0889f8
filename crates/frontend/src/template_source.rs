//! Where a chat template's text came from (`TemplateSource`): the user, the GGUF file, or a
//! built-in fallback; named in logs and in template errors.

use std::fmt;

/// Where the template text came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateSource {
    /// Given by the user (command line or configuration).
    User,
    /// `tokenizer.chat_template` in the GGUF file.
    Gguf,
    /// Built-in Gemma `<start_of_turn>` template, for `gemma*` architectures without a template.
    BuiltinGemma,
    /// Built-in ChatML, the last resort (llama.cpp falls back to it too).
    ChatMl,
}

impl fmt::Display for TemplateSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::User => "user-supplied",
            Self::Gguf => "from the GGUF file",
            Self::BuiltinGemma => "built-in Gemma",
            Self::ChatMl => "built-in ChatML",
        })
    }
}
