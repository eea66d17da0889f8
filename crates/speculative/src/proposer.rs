//! The one interface the engine codes against: every proposer (n-gram, suffix index, later a
//! draft model) takes a batch of sequences and fills one draft per sequence, so the engine
//! never knows which method it runs.

/// One sequence asking for proposals this step.
#[derive(Clone, Copy, Debug)]
pub struct ProposeRequest<'a> {
    /// The engine's sequence id (stable for the sequence's life).
    pub seq_id: u64,
    /// Every known token: the prompt, then the generated tokens (the last one is the newest).
    pub tokens: &'a [u32],
    /// How many of `tokens` are the prompt.
    pub prompt_len: usize,
    /// Propose at most this many tokens (>= 1).
    pub max_tokens: usize,
}

/// Proposes tokens that likely follow each sequence; the target model verifies them.
pub trait Proposer: Send {
    /// For each request, up to `max_tokens` proposed tokens (possibly none), `out[i]` for
    /// `reqs[i]`. `out` is cleared and refilled.
    fn propose(&mut self, reqs: &[ProposeRequest<'_>], out: &mut Vec<Vec<u32>>);
    /// The sequence ended: `tokens` are all its tokens (prompt, then output). The suffix index
    /// adds the output to its cross-request store; stateless proposers ignore it.
    fn finished(&mut self, seq_id: u64, tokens: &[u32], prompt_len: usize);
}

/// `out` reset to one draft per request, then `draft(req, &mut out[i])` for each: the loop of
/// every proposer that drafts for each request on its own.
pub(crate) fn each_request(
    reqs: &[ProposeRequest<'_>],
    out: &mut Vec<Vec<u32>>,
    mut draft: impl FnMut(&ProposeRequest<'_>, &mut Vec<u32>),
) {
    reset_out(out, reqs.len());
    for (req, d) in reqs.iter().zip(out.iter_mut()) {
        draft(req, d);
    }
}

/// Resizes `out` to `n` drafts, each empty, keeping the inner vectors' capacity so that a
/// steady-state step allocates nothing.
pub(crate) fn reset_out(out: &mut Vec<Vec<u32>>, n: usize) {
    out.truncate(n);
    for draft in out.iter_mut() {
        draft.clear();
    }
    out.resize_with(n, Vec::new);
}
