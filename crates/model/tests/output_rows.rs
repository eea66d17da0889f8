//! A last layer that carries only the rows whose logits are wanted (`OutputRows`) returns the
//! very logits of one that carries every row, and writes the same K and V for all of them: the
//! steps after it agree bit for bit too.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{prompt, tiny};
use pagoda_model::{CpuExecutor, ForwardBatch, Logits, Model, SeqChunk};
use pagoda_testkit::tiny_model::TinyModel;

const BLOCK: usize = 4;

/// Three prompts (one of them a middle chunk that wants no logits) and then one decode step
/// each, on a fresh executor; every step's logits, flat. With `all`, every row of every step
/// wants logits (nothing is dropped) and only the rows the pruned run returns are kept.
fn run(model: Model, all: bool) -> Vec<Vec<f32>> {
    let vocab = model.config().vocab_size;
    let mut exec = CpuExecutor::new(model, 64, BLOCK).unwrap();
    let prompts: Vec<Vec<u32>> = [9usize, 6, 13]
        .iter()
        .enumerate()
        .map(|(i, &n)| prompt(n, 1, vocab as u32, 5 + i as u32))
        .collect();
    let tables: Vec<Vec<u32>> = (0..3u32)
        .map(|s| (0..4).map(|b| 4 * s + b).collect())
        .collect();
    let want = [Logits::Last, Logits::None, Logits::Last];
    let mut steps = Vec::new();

    let seqs: Vec<SeqChunk> = (0..3)
        .map(|s| SeqChunk {
            tokens: &prompts[s],
            start: 0,
            block_tables: std::slice::from_ref(&tables[s]),
            logits: if all { Logits::All } else { want[s] },
        })
        .collect();
    let logits = exec
        .forward(&ForwardBatch::from_seqs(&seqs, BLOCK))
        .unwrap();
    if all {
        // Keep the rows the pruned run returns: the last of prompts 0 and 2.
        let total: usize = prompts.iter().map(Vec::len).sum();
        let rows = [prompts[0].len() - 1, total - 1];
        steps.push(
            rows.iter()
                .flat_map(|&r| logits[r * vocab..(r + 1) * vocab].to_vec())
                .collect(),
        );
    } else {
        steps.push(logits.to_vec());
    }

    // One decode step each, reading every K and V the prompts' last layer wrote.
    let next: Vec<[u32; 1]> = (0..3).map(|s| [prompts[s][0]]).collect();
    let seqs: Vec<SeqChunk> = (0..3)
        .map(|s| SeqChunk {
            tokens: &next[s],
            start: prompts[s].len(),
            block_tables: std::slice::from_ref(&tables[s]),
            logits: Logits::Last,
        })
        .collect();
    steps.push(
        exec.forward(&ForwardBatch::from_seqs(&seqs, BLOCK))
            .unwrap()
            .to_vec(),
    );
    steps
}

fn check(spec: TinyModel) {
    let pruned = run(tiny(&spec), false);
    let whole = run(tiny(&spec), true);
    for (step, (p, w)) in pruned.iter().zip(&whole).enumerate() {
        assert_eq!(p.len(), w.len(), "{:?} step {step}", spec.arch);
        let same = p.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(
            same,
            "{:?} step {step}: pruned and whole logits differ",
            spec.arch
        );
    }
}

#[test]
fn llama_last_layer_pruning_changes_no_bit() {
    check(TinyModel::llama());
}

#[test]
fn gemma3_last_layer_pruning_changes_no_bit() {
    check(TinyModel::gemma3());
}
