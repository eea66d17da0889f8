//! `ForwardBatch`: the flat, data-only description of one executor step (vLLM V1's
//! `InputBatch` vocabulary). `validate` checks every index against the vocabulary, the KV arena
//! and the other fields, so a bad batch is an error instead of an out-of-bounds panic.

use pagoda_core::kv::KvGroup;

use crate::ModelError;

/// One step of work: T tokens from S requests laid end to end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForwardBatch {
    /// `[T]` token ids.
    pub token_ids: Vec<u32>,
    /// `[T]` position of each token in its request.
    pub positions: Vec<u32>,
    /// `[G][T]` KV slot each token's K and V go to in each KV group's table:
    /// `block_id * block_size + offset`.
    pub slot_mapping: Vec<u32>,
    /// `[S + 1]` offset of each request's first token in the flat batch; last = T.
    pub query_start_loc: Vec<u32>,
    /// `[S]` each request's context length after this step (cached + new tokens).
    pub seq_lens: Vec<u32>,
    /// `[G][S][max_blocks_per_seq]` block ids of each request in each KV group, row-major;
    /// unused tail entries are ignored, and so are entries before a sliding group's window.
    pub block_tables: Vec<u32>,
    pub max_blocks_per_seq: usize,
    /// KV groups G (one table per group and request).
    pub num_groups: usize,
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

    /// `[S][max_blocks_per_seq]` tables of group `g`.
    pub fn group_block_tables(&self, g: usize) -> &[u32] {
        let n = self.num_seqs() * self.max_blocks_per_seq;
        &self.block_tables[g * n..][..n]
    }

    /// `[T]` slots of group `g`.
    pub fn group_slot_mapping(&self, g: usize) -> &[u32] {
        let t = self.num_tokens();
        &self.slot_mapping[g * t..][..t]
    }

    /// Checks the batch against a vocabulary of `vocab_size` and an arena of `num_blocks` blocks
    /// of `block_size` slots whose tables are split into `groups`.
    pub fn validate(
        &self,
        vocab_size: usize,
        num_blocks: usize,
        block_size: usize,
        groups: &[KvGroup],
    ) -> Result<(), ModelError> {
        let err = |m: String| Err(ModelError::InvalidBatch(m));
        let t = self.token_ids.len();
        let s = self.seq_lens.len();
        let g_n = self.num_groups;
        if t == 0 {
            return err("no tokens".into());
        }
        if g_n != groups.len() {
            return err(format!(
                "the batch has {g_n} KV groups but the arena {}",
                groups.len()
            ));
        }
        if self.positions.len() != t || self.slot_mapping.len() != g_n * t {
            return err(format!(
                "{t} token_ids but {} positions and {} slot_mapping entries for {g_n} groups",
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
        if self.max_blocks_per_seq == 0
            || self.block_tables.len() != g_n * s * self.max_blocks_per_seq
        {
            return err(format!(
                "block_tables has {} entries for {g_n} groups x {s} sequences x {} max_blocks_per_seq",
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
            for i in start..end {
                let pos = (seq_len - q_len + i - start) as u32;
                if self.positions[i] != pos {
                    return err(format!(
                        "positions[{i}] = {} but sequence {r} puts that token at {pos}",
                        self.positions[i]
                    ));
                }
            }
            for (g, group) in groups.iter().enumerate() {
                let tables = self.group_block_tables(g);
                let table = &tables[r * self.max_blocks_per_seq..][..blocks_needed];
                // Entries before the window of the step's first query are never read (a
                // sliding group gave those blocks back).
                let first = group.first_needed_block(seq_len - q_len, block_size);
                if let Some((j, &b)) = table
                    .iter()
                    .enumerate()
                    .skip(first)
                    .find(|(_, b)| **b as usize >= num_blocks)
                {
                    return err(format!(
                        "block_tables[{g}][{r}][{j}] = {b} is past the arena of {num_blocks} blocks"
                    ));
                }
                let slots = self.group_slot_mapping(g);
                for (i, &slot) in slots.iter().enumerate().take(end).skip(start) {
                    let pos = self.positions[i] as usize;
                    let slot = slot as usize;
                    if slot >= num_blocks * block_size {
                        return err(format!(
                            "slot_mapping[{g}][{i}] = {slot} is past the arena of {} slots",
                            num_blocks * block_size
                        ));
                    }
                    let expected = table[pos / block_size] as usize * block_size + pos % block_size;
                    if slot != expected {
                        return err(format!(
                            "slot_mapping[{g}][{i}] = {slot} but block_tables puts position {pos} of sequence {r} at {expected}"
                        ));
                    }
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
    /// block, with as many KV groups as the first sequence has tables. Slots of positions past
    /// a sequence's table (or a missing table) become `u32::MAX` (which `validate` rejects).
    pub fn from_seqs(seqs: &[SeqChunk<'_>], block_size: usize) -> Self {
        let num_groups = seqs.first().map_or(1, |s| s.block_tables.len()).max(1);
        let max_blocks = seqs
            .iter()
            .flat_map(|s| s.block_tables.iter().map(Vec::len))
            .max()
            .unwrap_or(0)
            .max(1);
        let mut b = Self {
            max_blocks_per_seq: max_blocks,
            num_groups,
            query_start_loc: vec![0],
            ..Self::default()
        };
        for seq in seqs {
            let t0 = b.token_ids.len();
            for (j, &tok) in seq.tokens.iter().enumerate() {
                b.token_ids.push(tok);
                b.positions.push((seq.start + j) as u32);
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
        }
        let slot = |table: &[u32], pos: usize| {
            table
                .get(pos / block_size)
                .and_then(|&blk| blk.checked_mul(block_size as u32))
                .and_then(|s| s.checked_add((pos % block_size) as u32))
                .unwrap_or(u32::MAX)
        };
        for g in 0..num_groups {
            for seq in seqs {
                let table = seq.block_tables.get(g).map_or(&[][..], Vec::as_slice);
                b.slot_mapping
                    .extend((0..seq.tokens.len()).map(|j| slot(table, seq.start + j)));
            }
            for seq in seqs {
                let table = seq.block_tables.get(g).map_or(&[][..], Vec::as_slice);
                let row = b.block_tables.len();
                b.block_tables.extend_from_slice(table);
                b.block_tables.resize(row + max_blocks, 0);
            }
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

/// One request's share of a step: `tokens` at positions `start..`, K/V in `block_tables`
/// (one table per KV group).
#[derive(Clone, Copy, Debug)]
pub struct SeqChunk<'a> {
    pub tokens: &'a [u32],
    pub start: usize,
    pub block_tables: &'a [Vec<u32>],
    pub logits: Logits,
}
