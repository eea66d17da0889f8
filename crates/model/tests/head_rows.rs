//! A narrowed output head (`Model::keep_head_rows`, a draft model's) returns the first rows of
//! the whole head's logits, bit for bit, while every id of the vocabulary can still be fed.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{prompt, tiny};
use pagoda_model::{CpuExecutor, ForwardBatch, Logits, Model, SeqChunk};
use pagoda_testkit::tiny_model::TinyModel;

const BLOCK: usize = 4;

/// Every row's logits of one prompt whose ids span the whole vocabulary.
fn logits(model: Model, tokens: &[u32]) -> Vec<f32> {
    let mut exec = CpuExecutor::new(model, 16, BLOCK).unwrap();
    let table: Vec<u32> = (0..8).collect();
    let seq = SeqChunk {
        tokens,
        start: 0,
        block_tables: std::slice::from_ref(&table),
        logits: Logits::All,
    };
    exec.forward(&ForwardBatch::from_seqs(&[seq], BLOCK))
        .unwrap()
        .to_vec()
}

#[test]
fn a_narrowed_head_gives_the_first_columns_of_the_whole_one() {
    for spec in [TinyModel::qwen2(), TinyModel::llama(), TinyModel::gemma3()] {
        let whole = tiny(&spec);
        let vocab = whole.config().vocab_size;
        let tokens = prompt(11, 0, vocab as u32, 3);
        assert_eq!(whole.logits_width(), vocab);
        let full = logits(whole, &tokens);
        for rows in [vocab / 2 + 3, 8, vocab, vocab + 100] {
            let mut narrow = tiny(&spec);
            narrow.keep_head_rows(rows).unwrap();
            let kept = rows.min(vocab);
            assert_eq!(narrow.logits_width(), kept);
            let part = logits(narrow, &tokens);
            assert_eq!(part.len(), tokens.len() * kept);
            for (r, row) in part.chunks_exact(kept).enumerate() {
                assert_eq!(
                    row,
                    &full[r * vocab..r * vocab + kept],
                    "rows {rows}, row {r}"
                );
            }
        }
    }
}
