//! A cross-encoder (`BertForSequenceClassification`): a tiny random checkpoint written by the
//! testkit (with all-MiniLM-L6-v2's WordPiece tokenizer, fetched on demand) gives, for a dozen
//! query/document pairs, the logits of an independent numpy forward pass
//! (tests/bert_reference.py: token types, pooler, classifier) within 1e-4, the same bits batched
//! or alone; the pair's tokens are the query's then the document's without its [CLS].
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;

use pagoda_frontend::HfTokenizer;
use pagoda_hf::Quantization;
use pagoda_model::{Encoder, EncoderScratch};

use pagoda_testkit::tiny_cross_encoder::{DOCUMENTS, QUERY};

#[test]
fn cross_encoder_matches_a_numpy_forward_pass() {
    let minilm = common::fetched_dir("minilm", "all-MiniLM-L6-v2");
    let dir = std::env::temp_dir().join(format!("pagoda-cross-encoder-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    pagoda_testkit::tiny_cross_encoder::write(&dir, &minilm.join("tokenizer.json"), 30522, 7)
        .unwrap();
    let tok = HfTokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
    let encoder = Encoder::load(Arc::new(
        pagoda_hf::convert(&dir, Quantization::None).unwrap(),
    ))
    .unwrap();
    assert!(encoder.config().cross_encoder);
    assert_eq!(encoder.config().output_dim, 1);

    let q = tok.encode(QUERY).unwrap();
    let pairs: Vec<(Vec<u32>, usize)> = DOCUMENTS
        .iter()
        .map(|d| {
            let (ids, second) = tok.encode_pair(QUERY, d).unwrap();
            // [CLS] query [SEP] document [SEP], the document's tokens of type 1.
            let doc = tok.encode(d).unwrap();
            let mut want = q.clone();
            want.extend(&doc[1..]);
            assert_eq!(ids, want, "{d}");
            assert_eq!(second, q.len(), "{d}");
            (ids, second)
        })
        .collect();
    let input: Vec<_> = pairs
        .iter()
        .map(|(ids, s)| serde_json::json!({"ids": ids, "second": s}))
        .collect();
    let want: Vec<Vec<f64>> = serde_json::from_value(common::python_reference(
        "bert_reference.py",
        &dir,
        &serde_json::json!(input),
    ))
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    let seqs: Vec<&[u32]> = pairs.iter().map(|(ids, _)| ids.as_slice()).collect();
    let second: Vec<usize> = pairs.iter().map(|(_, s)| *s).collect();
    let mut scratch = EncoderScratch::default();
    let got = encoder
        .embed_segments(&seqs, &second, &mut scratch)
        .unwrap();
    let mut worst = 0f64;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let err = (g[0] as f64 - w[0]).abs();
        worst = worst.max(err);
        assert!(err < 1e-4, "pair {i}: {} vs numpy {}", g[0], w[0]);
        let alone = encoder
            .embed_segments(&[seqs[i]], &[second[i]], &mut scratch)
            .unwrap();
        assert!(alone[0] == *g, "pair {i}: batched vs alone differ");
    }
    println!(
        "cross-encoder: worst logit error {worst:e} over {} pairs",
        got.len()
    );
    // The logits are spread (the test would pass on a constant head otherwise).
    let spread = want.iter().map(|w| w[0]).fold(f64::MIN, f64::max)
        - want.iter().map(|w| w[0]).fold(f64::MAX, f64::min);
    assert!(spread > 0.1, "logits spread {spread}");
    // Token type 1 matters: the same ids all of type 0 give another logit.
    let flat = encoder
        .embed_segments(&[seqs[0]], &[seqs[0].len()], &mut scratch)
        .unwrap();
    assert!((flat[0][0] - got[0][0]).abs() > 1e-4);
}
