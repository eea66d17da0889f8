//! Chat messages -> prompt tokens for a loaded model: `pagoda_frontend::chat_prompt` holds the
//! rule (checks, template, BOS); this applies it with the model's template and tokenizer and
//! turns its refusals into `ValidationError`s. Shared by every chat-shaped API and `/tokenize`.

use pagoda_frontend::chat_prompt::{self, TemplateTools};
pub use pagoda_frontend::chat_prompt::{PromptError, PromptOptions, content_text};
use pagoda_protocol::ChatMessage;

use crate::prepare::tools::ToolSetup;
use crate::prepare::validation_error::ValidationError;
use crate::state::Loaded;

/// The rendered prompt's tokens.
pub fn tokenize(loaded: &Loaded, text: &str, add_special_tokens: Option<bool>) -> Vec<u32> {
    chat_prompt::tokenize(&loaded.tokenizer, text, add_special_tokens)
}

/// The rendered prompt text.
pub fn render(
    loaded: &Loaded,
    messages: &[ChatMessage],
    opts: &PromptOptions<'_>,
    tools: Option<&ToolSetup>,
) -> Result<String, ValidationError> {
    let tools = tools.map(|t| t as &dyn TemplateTools);
    Ok(chat_prompt::render(
        &loaded.template,
        messages,
        opts,
        tools,
    )?)
}
