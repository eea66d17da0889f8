//! Token-level stops, checked after each appended token: the model's end-of-generation ids,
//! the request's stop token ids, `max_tokens` and the context length. Stop strings are text and
//! are found at the edge (pagoda-frontend), which then aborts the sequence.

use crate::request::{FinishReason, Request};

/// Why `req` must stop after its last token, if it must.
pub fn check_stop(req: &Request, eog_ids: &[u32], max_model_len: usize) -> Option<FinishReason> {
    let last = *req.token_ids.last()?;
    if req.num_output_tokens() == 0 {
        return None;
    }
    let min_ok = req.num_output_tokens() > req.params.min_tokens as usize;
    if min_ok && !req.params.ignore_eos && eog_ids.contains(&last) {
        return Some(FinishReason::Stop(last));
    }
    if min_ok && req.params.stop_token_ids.contains(&last) {
        return Some(FinishReason::Stop(last));
    }
    if req.num_output_tokens() >= req.params.max_tokens as usize
        || req.num_tokens() >= max_model_len
    {
        return Some(FinishReason::Length);
    }
    None
}
