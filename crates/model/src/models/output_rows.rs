//! The rows the last layer still has to carry past its KV write. Only the rows whose logits the
//! step returns reach the LM head, and in the last layer every other row is needed only for its
//! K and V: its attention, output projection and FFN are dead work (llama.cpp drops those rows the
//! same way, `inp_out_ids`). For a prompt chunk that is most of a layer.

use crate::ForwardBatch;

/// The last layer's surviving rows and the attention batch shape they form.
#[derive(Default)]
pub(crate) struct OutputRows {
    /// Flat batch indices of the surviving rows, ascending (the batch's `logits_indices`).
    rows: Vec<u32>,
    /// `[S + 1]`: the surviving rows of each request, laid end to end.
    query_start_loc: Vec<u32>,
}

impl OutputRows {
    /// Plans the last layer of `batch`; false when it must run every row. Attention takes each
    /// request's queries as the *last* `q_len` of its context, so the surviving rows of a request
    /// must be a suffix of its rows (the last one for a prompt, a decode's only one, the draft
    /// tail of a verify step) and come in batch order: that is how the batch builder selects
    /// them. Any other selection, or one keeping every row, runs the layer whole.
    pub(crate) fn plan(&mut self, batch: &ForwardBatch) -> bool {
        let wanted = &batch.logits_indices;
        if wanted.len() >= batch.num_tokens() || !wanted.is_sorted_by(|a, b| a < b) {
            return false;
        }
        self.rows.clear();
        self.query_start_loc.clear();
        self.query_start_loc.push(0);
        let mut next = wanted.iter().copied().peekable();
        for w in batch.query_start_loc.windows(2) {
            let end = w[1];
            let first = self.rows.len();
            // Ascending indices are taken in order, so none here lies before `start`.
            while let Some(i) = next.next_if(|&i| i < end) {
                self.rows.push(i);
            }
            let kept = (self.rows.len() - first) as u32;
            if kept > 0 && self.rows[first] != end - kept {
                return false;
            }
            self.query_start_loc.push(self.rows.len() as u32);
        }
        next.peek().is_none()
    }

    /// Flat batch indices of the surviving rows.
    pub(crate) fn rows(&self) -> &[u32] {
        &self.rows
    }

    /// Number of surviving rows.
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    pub(crate) fn query_start_loc(&self) -> &[u32] {
        &self.query_start_loc
    }

    /// `x` (rows of `width`) as the rest of the layer sees it: whole without `keep`, else its
    /// surviving rows moved to the front. Returns the row count and those rows.
    pub(crate) fn narrow<'x>(
        keep: Option<&Self>,
        x: &'x mut [f32],
        width: usize,
    ) -> (usize, &'x mut [f32]) {
        match keep {
            Some(o) => {
                o.compact(x, width);
                (o.len(), &mut x[..o.len() * width])
            }
            None => (x.len() / width, x),
        }
    }

    /// Moves the surviving rows (of `width` values) of `buf` to its front, in order.
    pub(crate) fn compact(&self, buf: &mut [f32], width: usize) {
        // Ascending rows never move backwards past a row still to be read.
        for (j, &i) in self.rows.iter().enumerate() {
            let i = i as usize;
            if i != j {
                buf.copy_within(i * width..(i + 1) * width, j * width);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(query_start_loc: &[u32], logits: &[u32]) -> ForwardBatch {
        let t = *query_start_loc.last().unwrap_or(&0) as usize;
        ForwardBatch {
            token_ids: vec![0; t],
            query_start_loc: query_start_loc.to_vec(),
            logits_indices: logits.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn keeps_suffixes_in_batch_order() {
        let mut o = OutputRows::default();
        // A prompt chunk wanting its last row, one wanting none, a decode, a verify tail.
        assert!(o.plan(&batch(&[0, 5, 9, 10, 16], &[4, 9, 14, 15])));
        assert_eq!(o.rows, [4, 9, 14, 15]);
        assert_eq!(o.query_start_loc(), [0, 1, 1, 2, 4]);
        // No logits at all (a middle prompt chunk): the last layer only writes K and V.
        assert!(o.plan(&batch(&[0, 7], &[])));
        assert_eq!((o.len(), o.query_start_loc()), (0, &[0u32, 0][..]));
    }

    /// The selections the batch builder makes for sampling (`Logits::Last`, `Logits::None`) are
    /// the ones the plan prunes, next to a request wanting all its rows (prompt logprobs); a
    /// step where every row wants logits runs the layer whole.
    #[test]
    fn prunes_what_the_batch_builder_selects() {
        use crate::{Logits, SeqChunk};
        let table = [vec![0u32, 1]];
        let seq = |tokens: &'static [u32], logits| SeqChunk {
            tokens,
            start: 0,
            block_tables: &table,
            logits,
        };
        let mut o = OutputRows::default();
        let sampling = [
            seq(&[1; 6], Logits::Last),
            seq(&[2; 3], Logits::None),
            seq(&[3; 1], Logits::Last),
        ];
        assert!(o.plan(&ForwardBatch::from_seqs(&sampling, 16)));
        assert_eq!(
            (o.rows.as_slice(), o.query_start_loc()),
            (&[5u32, 9][..], &[0u32, 1, 1, 2][..])
        );
        let with_logprobs = [seq(&[1; 6], Logits::All), seq(&[2; 3], Logits::Last)];
        assert!(o.plan(&ForwardBatch::from_seqs(&with_logprobs, 16)));
        assert_eq!(o.rows, [0, 1, 2, 3, 4, 5, 8]);
        let all = [seq(&[1; 6], Logits::All), seq(&[2; 3], Logits::All)];
        assert!(!o.plan(&ForwardBatch::from_seqs(&all, 16)));
    }

    #[test]
    fn runs_whole_when_it_cannot_prune() {
        let mut o = OutputRows::default();
        // Every row wanted: nothing to drop.
        assert!(!o.plan(&batch(&[0, 1, 2], &[0, 1])));
        // Not a suffix of its request.
        assert!(!o.plan(&batch(&[0, 5, 9], &[3, 8])));
        assert!(!o.plan(&batch(&[0, 5, 9], &[2, 4])));
        // Out of order or repeated.
        assert!(!o.plan(&batch(&[0, 5, 9], &[8, 4])));
        assert!(!o.plan(&batch(&[0, 5, 9], &[4, 4])));
        // Past the batch (validation rejects it first; the plan must not accept it either).
        assert!(!o.plan(&batch(&[0, 5, 9], &[4, 12])));
    }

    #[test]
    fn compact_moves_rows_to_the_front() {
        let mut o = OutputRows::default();
        assert!(o.plan(&batch(&[0, 3, 5, 6], &[1, 2, 4, 5])));
        let mut buf: Vec<f32> = (0..12).map(|v| v as f32).collect();
        o.compact(&mut buf, 2);
        assert_eq!(&buf[..8], &[2.0, 3.0, 4.0, 5.0, 8.0, 9.0, 10.0, 11.0]);
    }
}
