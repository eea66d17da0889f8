//! Every weight type runs end to end: a tiny llama whose layer matrices are all of one type
//! loads and gives the logits of the same weights stored as F32 (the file's values after a
//! round trip through the type), up to the activation quantization the type's dot products use.
#![allow(clippy::unwrap_used)]

use crate::common;

use pagoda_kernels::quant::GgmlType;
use pagoda_model::CpuExecutor;
use pagoda_testkit::tiny_model::TinyModel;

fn logits(spec: &TinyModel, tokens: &[u32]) -> Vec<f32> {
    let mut exec = CpuExecutor::new(common::tiny(spec), 8, 16).unwrap();
    let table: Vec<u32> = (0..8).collect();
    // Two chunks: a prompt-sized product (several activation rows) and then single rows.
    common::logits_in_chunks(&mut exec, tokens, &[9, 1], &table)
}

#[test]
fn every_weight_type_matches_its_f32_round_trip() {
    let tokens = common::prompt(14, 3, 250, 7);
    for ty in [
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
    ] {
        let spec = TinyModel {
            matrix_type: Some(ty),
            ..TinyModel::llama()
        };
        let quantized = logits(&spec, &tokens);
        let f32_copy = logits(
            &TinyModel {
                dequantized: true,
                ..spec
            },
            &tokens,
        );
        let (diff, mag) = common::max_diff(&quantized, &f32_copy);
        println!("{ty}: max logit diff {diff} of {mag}");
        // 8-bit activations give about 1% relative error per product; float weights none.
        let bound = if ty.vec_dot_type() == Some(GgmlType::F32) {
            1e-4
        } else {
            0.05
        };
        assert!(diff <= bound * mag, "{ty}: max logit diff {diff} of {mag}");
        let vocab = quantized.len() / tokens.len();
        let argmax = |row: &[f32]| {
            (0..row.len())
                .max_by(|&a, &b| row[a].total_cmp(&row[b]))
                .unwrap()
        };
        let same = quantized
            .chunks_exact(vocab)
            .zip(f32_copy.chunks_exact(vocab))
            .filter(|(a, b)| argmax(a) == argmax(b))
            .count();
        assert!(
            same * 10 >= tokens.len() * 9,
            "{ty}: top token agrees at {same} of {}",
            tokens.len()
        );
    }
}
