//! `ForwardBatch`: the flat, data-only description of one executor step (vLLM V1's
//! `InputBatch` vocabulary). `validate` checks every index against the vocabulary, the KV arena
//! and the other fields, so a bad batch is an error instead of an out-of-bounds panic.

use crate::ModelError;

/// One step of work: T tokens from S requests laid end to end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForwardBatch {
    /// `[T]` token ids.
    pub token_ids: Vec<u32>,
    /// `[T]` position of each token in its request.
    pub positions: Vec<u32>,
    /// `[T]` KV slot each token's K and V go to: `block_id * block_size + offset`.
    pub slot_mapping: Vec<u32>,
    /// `[S + 1]` offset of each request's first token in the flat batch; last = T.
    pub query_start_loc: Vec<u32>,
    /// `[S]` each request's context length after this step (cached + new tokens).
    pub seq_lens: Vec<u32>,
    /// `[S][max_blocks_per_seq]` block ids of each request, row-major; unused tail entries are
    /// ignored.
    pub block_tables: Vec<u32>,
    pub max_blocks_per_seq: usize,
    /// Flat token indices whose logits the step returns, in this order.
    pub logits_indices: Vec<u32>,
    /// `[S]` which of the step's adapters each request uses (`None`: the base model), or empty
    /// when none uses one.
    pub seq_loras: Vec<Option<u32>>,
}

impl ForwardBatch {
    /// Number of tokens T.
    pub fn num_tokens(&self) -> usize {
        self.token_ids.len()
    }

    /// Number of requests S.
    pub fn num_seqs(&self) -> usize {
        self.seq_lens.len()
    }

    /// Checks the batch against a vocabulary of `vocab_size` and an arena of `num_blocks` blocks
    /// of `block_size` slots.
    pub fn validate(
        &self,
        vocab_size: usize,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<(), ModelError> {
        let err = |m: String| Err(ModelError::InvalidBatch(m));
        let t = self.token_ids.len();
        let s = self.seq_lens.len();
        if t == 0 {
            return err("no tokens".into());
        }
        if self.positions.len() != t || self.slot_mapping.len() != t {
            return err(format!(
                "{t} token_ids but {} positions and {} slot_mapping entries",
                self.positions.len(),
                self.slot_mapping.len()
            ));
        }
        if self.query_start_loc.len() != s + 1 {
            return err(format!(
                "query_start_loc has {} entries for {s} sequences (want S + 1)",
                self.query_start_loc.len()
            ));
        }
        if self.query_start_loc[0] != 0 || self.query_start_loc[s] as usize != t {
            return err(format!(
                "query_start_loc must run from 0 to {t}, got {:?}",
                self.query_start_loc
            ));
        }
        if self.max_blocks_per_seq == 0 || self.block_tables.len() != s * self.max_blocks_per_seq {
            return err(format!(
                "block_tables has {} entries for {s} sequences x {} max_blocks_per_seq",
                self.block_tables.len(),
                self.max_blocks_per_seq
            ));
        }
        if let Some((i, &id)) = self
            .token_ids
            .iter()
            .enumerate()
            .find(|(_, id)| **id as usize >= vocab_size)
        {
            return err(format!(
                "token_ids[{i}] = {id} is outside the vocabulary of {vocab_size}"
            ));
        }
        for r in 0..s {
            let (start, end) = (
                self.query_start_loc[r] as usize,
                self.query_start_loc[r + 1] as usize,
            );
            if end < start {
                return err(format!("query_start_loc decreases at sequence {r}"));
            }
            let q_len = end - start;
            let seq_len = self.seq_lens[r] as usize;
            if q_len == 0 || q_len > seq_len {
                return err(format!(
                    "sequence {r} has {q_len} new tokens but seq_len {seq_len}"
                ));
            }
            let blocks_needed = seq_len.div_ceil(block_size);
            if blocks_needed > self.max_blocks_per_seq {
                return err(format!(
                    "sequence {r} needs {blocks_needed} blocks for seq_len {seq_len}, max_blocks_per_seq is {}",
                    self.max_blocks_per_seq
                ));
            }
            let table = &self.block_tables[r * self.max_blocks_per_seq..][..blocks_needed];
            if let Some((j, &b)) = table
                .iter()
                .enumerate()
                .find(|(_, b)| **b as usize >= num_blocks)
            {
                return err(format!(
                    "block_tables[{r}][{j}] = {b} is past the arena of {num_blocks} blocks"
                ));
            }
            for i in start..end {
                let pos = (seq_len - q_len + i - start) as u32;
                if self.positions[i] != pos {
                    return err(format!(
                        "positions[{i}] = {} but sequence {r} puts that token at {pos}",
                        self.positions[i]
                    ));
                }
                let slot = self.slot_mapping[i] as usize;
                if slot >= num_blocks * block_size {
                    return err(format!(
                        "slot_mapping[{i}] = {slot} is past the arena of {} slots",
                        num_blocks * block_size
                    ));
                }
                let pos = pos as usize;
                let expected = table[pos / block_size] as usize * block_size + pos % block_size;
                if slot != expected {
                    return err(format!(
                        "slot_mapping[{i}] = {slot} but block_tables puts position {pos} of sequence {r} at {expected}"
                    ));
                }
            }
        }
        if let Some((i, &li)) = self
            .logits_indices
            .iter()
            .enumerate()
            .find(|(_, li)| **li as usize >= t)
        {
            return err(format!("logits_indices[{i}] = {li} is past the {t} tokens"));
        }
        if !self.seq_loras.is_empty() && self.seq_loras.len() != s {
            return err(format!(
                "seq_loras has {} entries for {s} sequences",
                self.seq_loras.len()
            ));
        }
        Ok(())
    }

    /// Builds the batch for `seqs`, laid out in order, for an arena of `block_size` slots per
    /// block. Slots of positions past a sequence's block table become `u32::MAX` (which
    /// `validate` rejects).
    pub fn from_seqs(seqs: &[SeqChunk<'_>], block_size: usize) -> Self {
        let max_blocks = seqs
            .iter()
            .map(|s| s.block_table.len())
            .max()
            .unwrap_or(0)
            .max(1);
        let mut b = Self {
            max_blocks_per_seq: max_blocks,
            query_start_loc: vec![0],
            ..Self::default()
        };
        for seq in seqs {
            let t0 = b.token_ids.len();
            for (j, &tok) in seq.tokens.iter().enumerate() {
                let pos = seq.start + j;
                b.token_ids.push(tok);
                b.positions.push(pos as u32);
                let slot = seq
                    .block_table
                    .get(pos / block_size)
                    .and_then(|&blk| blk.checked_mul(block_size as u32))
                    .and_then(|s| s.checked_add((pos % block_size) as u32));
                b.slot_mapping.push(slot.unwrap_or(u32::MAX));
            }
            let t1 = b.token_ids.len();
            match seq.logits {
                Logits::None => {}
                Logits::Last if t1 > t0 => b.logits_indices.push((t1 - 1) as u32),
                Logits::Last => {}
                Logits::All => b.logits_indices.extend(t0 as u32..t1 as u32),
            }
            b.query_start_loc.push(t1 as u32);
            b.seq_lens.push((seq.start + seq.tokens.len()) as u32);
            b.block_tables.extend_from_slice(seq.block_table);
            b.block_tables.resize(b.seq_lens.len() * max_blocks, 0);
        }
        b
    }
}

/// Which of a sequence's new tokens need logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    None,
    Last,
    All,
}

/// One request's share of a step: `tokens` at positions `start..`, K/V in `block_table`.
#[derive(Clone, Copy, Debug)]
pub struct SeqChunk<'a> {
    pub tokens: &'a [u32],
    pub start: usize,
    pub block_table: &'a [u32],
    pub logits: Logits,
}
