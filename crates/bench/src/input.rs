//! What one request sends (`Input`: a completions prompt or a chat conversation), and the
//! plain-text rendering of a conversation for the completions API.

use pagoda_protocol::{ChatMessage, MessageContent, Role};

/// What one request asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A completions prompt.
    Prompt(String),
    /// A chat conversation.
    Messages(Vec<ChatMessage>),
}

/// Plain-text rendering of messages for the completions API: `System:`/`User:`/`Assistant:`
/// paragraphs ending with an open `Assistant:` turn; the system text comes first, so a shared
/// system prompt stays a shared prefix.
pub fn flatten_messages(messages: &[ChatMessage]) -> String {
    let mut out = String::new();
    for m in messages {
        let text = match &m.content {
            Some(MessageContent::Text(t)) => t.clone(),
            Some(MessageContent::Parts(parts)) => parts
                .iter()
                .filter_map(|p| p.text.as_deref())
                .collect::<Vec<_>>()
                .join(""),
            None => String::new(),
        };
        let label = match m.role {
            Role::System | Role::Developer => "System",
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::Tool => "Tool",
        };
        out.push_str(&format!("{label}: {text}\n\n"));
    }
    out.push_str("Assistant:");
    out
}
