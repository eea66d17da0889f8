//! Engine logprobs -> the two OpenAI wire forms: the legacy completions arrays
//! (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`) and the chat list
//! (`content: [{token, logprob, bytes, top_logprobs}]`).

use pagoda_core::PositionLogprobs;
use pagoda_frontend::Tokenizer;
use pagoda_protocol::{
    ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, PromptLogprob, PromptLogprobs, TopLogprob,
    TopLogprobMap,
};

use crate::generate::generation::token_text;

/// Appends positions to a completions logprobs object; `offset` is the character offset of
/// the first token in the choice's text and advances past each token.
pub fn extend_completion(
    out: &mut CompletionLogprobs,
    tokenizer: &Tokenizer,
    positions: &[PositionLogprobs],
    offset: &mut u32,
) {
    for p in positions {
        let (text, _) = token_text(tokenizer, p.token_id);
        out.text_offset.push(*offset);
        *offset += text.chars().count() as u32;
        out.tokens.push(text);
        out.token_logprobs.push(Some(p.logprob));
        let top = p
            .top
            .iter()
            .map(|t| (token_text(tokenizer, t.token_id).0, t.logprob))
            .collect();
        out.top_logprobs.push(Some(TopLogprobMap(top)));
    }
}

/// The echoed prompt's entries: the first token has no logprob (nothing precedes it), the
/// others come from the engine's prompt logprobs (positions 1 onward).
pub fn echo_completion(
    out: &mut CompletionLogprobs,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    prompt_logprobs: &[PositionLogprobs],
    offset: &mut u32,
) {
    let Some(&first) = prompt.first() else { return };
    let (text, _) = token_text(tokenizer, first);
    out.text_offset.push(*offset);
    *offset += text.chars().count() as u32;
    out.tokens.push(text);
    out.token_logprobs.push(None);
    out.top_logprobs.push(None);
    extend_completion(out, tokenizer, prompt_logprobs, offset);
}

/// vLLM's `prompt_logprobs` of a prompt: `null` for the first token (nothing precedes it),
/// then per position the prompt's token (its logprob and rank) and the top alternatives.
pub fn prompt(
    tokenizer: &Tokenizer,
    positions: &[PositionLogprobs],
) -> Vec<Option<PromptLogprobs>> {
    let mut out = Vec::with_capacity(positions.len() + 1);
    out.push(None);
    for p in positions {
        let mut map = PromptLogprobs::new();
        for (rank, t) in p.top.iter().enumerate() {
            map.insert(
                t.token_id.to_string(),
                PromptLogprob {
                    logprob: t.logprob,
                    rank: rank as u32 + 1,
                    decoded_token: token_text(tokenizer, t.token_id).0,
                },
            );
        }
        map.insert(
            p.token_id.to_string(),
            PromptLogprob {
                logprob: p.logprob,
                rank: p.rank,
                decoded_token: token_text(tokenizer, p.token_id).0,
            },
        );
        out.push(Some(map));
    }
    out
}

/// Chat-form logprobs of `positions`.
pub fn chat(tokenizer: &Tokenizer, positions: &[PositionLogprobs]) -> ChatLogprobs {
    let content = positions
        .iter()
        .map(|p| {
            let (token, bytes) = token_text(tokenizer, p.token_id);
            ChatTokenLogprob {
                token,
                logprob: p.logprob,
                bytes,
                top_logprobs: p
                    .top
                    .iter()
                    .map(|t| {
                        let (token, bytes) = token_text(tokenizer, t.token_id);
                        TopLogprob {
                            token,
                            logprob: t.logprob,
                            bytes,
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    ChatLogprobs {
        content: Some(content),
    }
}
