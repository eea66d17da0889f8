//! A malformed `ForwardBatch` is an `InvalidBatch` error naming the problem, never a panic, and
//! the executor is still usable afterwards.
#![allow(clippy::unwrap_used)]

use crate::common;

use pagoda_model::{CpuExecutor, ForwardBatch, Logits, ModelError, SeqChunk};
use pagoda_testkit::tiny_model::TinyModel;

fn good() -> ForwardBatch {
    ForwardBatch::from_seqs(
        &[SeqChunk {
            tokens: &[5, 6, 7],
            start: 0,
            block_tables: &[vec![1]],
            logits: Logits::Last,
        }],
        4,
    )
}

fn expect_invalid(exec: &mut CpuExecutor, batch: &ForwardBatch, needle: &str) {
    match exec.forward(batch) {
        Err(ModelError::InvalidBatch(msg)) => {
            assert!(msg.contains(needle), "message {msg:?} lacks {needle:?}")
        }
        Err(e) => panic!("expected InvalidBatch({needle}), got {e}"),
        Ok(_) => panic!("expected InvalidBatch({needle}), got logits"),
    }
}

#[test]
fn bad_batches_are_errors() {
    let mut exec = CpuExecutor::new(common::tiny(&TinyModel::llama()), 4, 4).unwrap();
    let vocab = exec.vocab_size();
    assert_eq!(exec.forward(&good()).unwrap().len(), vocab);

    let mut b = good();
    b.token_ids[1] = vocab as u32;
    expect_invalid(&mut exec, &b, "outside the vocabulary");

    let mut b = good();
    b.block_tables[0] = 4;
    expect_invalid(&mut exec, &b, "past the arena");

    let mut b = good();
    b.slot_mapping[2] = 16;
    expect_invalid(&mut exec, &b, "past the arena");

    let mut b = good();
    b.slot_mapping[2] = 3; // in range, but block_tables puts position 2 at slot 6
    expect_invalid(&mut exec, &b, "slot_mapping[0][2]");

    let mut b = good();
    b.positions.pop();
    expect_invalid(&mut exec, &b, "positions");

    let mut b = good();
    b.positions[0] = 9;
    expect_invalid(&mut exec, &b, "positions[0]");

    let mut b = good();
    b.seq_lens[0] = 2; // fewer than the 3 new tokens
    expect_invalid(&mut exec, &b, "new tokens");

    let mut b = good();
    b.seq_lens[0] = 9; // needs 3 blocks, table has 1
    expect_invalid(&mut exec, &b, "max_blocks_per_seq");

    let mut b = good();
    b.query_start_loc = vec![0, 2];
    expect_invalid(&mut exec, &b, "query_start_loc");

    let mut b = good();
    b.block_tables.push(0);
    expect_invalid(&mut exec, &b, "block_tables");

    let mut b = good();
    b.logits_indices = vec![3];
    expect_invalid(&mut exec, &b, "logits_indices[0]");

    expect_invalid(&mut exec, &ForwardBatch::default(), "no tokens");

    // A request that runs past its block table gets sentinel slots, which are rejected.
    let b = ForwardBatch::from_seqs(
        &[SeqChunk {
            tokens: &[5; 6],
            start: 0,
            block_tables: &[vec![0]],
            logits: Logits::Last,
        }],
        4,
    );
    expect_invalid(&mut exec, &b, "");

    // Still usable.
    assert_eq!(exec.forward(&good()).unwrap().len(), vocab);
}
