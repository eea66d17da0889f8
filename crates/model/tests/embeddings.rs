//! all-MiniLM-L6-v2 (BERT, mean pooling, L2 normalisation) from its sentence-transformers
//! directory: embeddings within 1e-4 cosine distance of an independent numpy forward pass
//! (tests/bert_reference.py) on sentences in several languages, the same bits whether the
//! sentences run in one batch or alone (f32 and q8_0), and matching sentences closer than
//! unrelated ones.
//! The model is fetched on demand (`scripts/fetch-models.sh minilm`).
#![allow(clippy::unwrap_used)]

use crate::common;

use common::cosine;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pagoda_frontend::HfTokenizer;
use pagoda_hf::Quantization;
use pagoda_model::{Encoder, EncoderScratch};

const SENTENCES: [&str; 12] = [
    "A man is playing a guitar.",
    "Someone is playing an acoustic guitar on stage.",
    "The stock market fell sharply this morning.",
    "Le chat dort sur le canapé.",
    "Die Katze schläft auf dem Sofa.",
    "El gato duerme en el sofá.",
    "猫はソファの上で寝ています。",
    "猫在沙发上睡觉。",
    "Кошка спит на диване.",
    "How do I reset my password?",
    "I forgot my password and cannot log in.",
    "Photosynthesis converts light energy into chemical energy.",
];

/// The checkpoint directory, fetched if missing.
fn minilm() -> PathBuf {
    common::fetched_dir("minilm", "all-MiniLM-L6-v2")
}

fn encoder(dir: &Path, q: Quantization) -> Encoder {
    Encoder::load(Arc::new(pagoda_hf::convert(dir, q).unwrap())).unwrap()
}

fn reference(dir: &Path, ids: &[Vec<u32>]) -> Vec<Vec<f64>> {
    let v = common::python_reference("bert_reference.py", dir, &serde_json::json!(ids));
    serde_json::from_value(v).unwrap()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn minilm_matches_a_numpy_forward_pass() {
    let dir = minilm();
    let tok = HfTokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
    let ids: Vec<Vec<u32>> = SENTENCES.iter().map(|s| tok.encode(s).unwrap()).collect();
    assert_eq!(ids[0][0], 101, "[CLS] first");
    assert_eq!(*ids[0].last().unwrap(), 102, "[SEP] last");
    let want = reference(&dir, &ids);

    let exact = encoder(&dir, Quantization::None);
    assert_eq!(exact.config().output_dim, 384);
    let seqs: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
    let mut scratch = EncoderScratch::default();
    let batch = exact.embed(&seqs, &mut scratch).unwrap();
    let worst = batch
        .iter()
        .zip(&want)
        .map(|(g, w)| 1.0 - cosine(g, w))
        .fold(0.0, f64::max);
    println!("f32: worst cosine distance {worst:e}");
    for (i, (got, want)) in batch.iter().zip(&want).enumerate() {
        let dist = 1.0 - cosine(got, want);
        assert!(
            dist <= 1e-4,
            "sentence {i} ({}): cosine distance {dist}",
            SENTENCES[i]
        );
        let norm: f32 = dot(got, got).sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "sentence {i}: norm {norm}");
        // Alone, the sentence's embedding is bit for bit the one it got packed with eleven
        // others of other lengths (batch invariance: no padding, per-row products).
        let alone = exact.embed(&[seqs[i]], &mut scratch).unwrap();
        assert!(alone[0] == *got, "sentence {i}: f32 batch vs alone differ");
    }

    // Paraphrases and translations are closer than unrelated sentences.
    let sim = |a: usize, b: usize| dot(&batch[a], &batch[b]);
    assert!(
        sim(0, 1) > sim(0, 2) + 0.2,
        "guitar pair {} vs stock market {}",
        sim(0, 1),
        sim(0, 2)
    );
    assert!(
        sim(9, 10) > sim(9, 11) + 0.2,
        "password pair {} vs photosynthesis {}",
        sim(9, 10),
        sim(9, 11)
    );
    assert!(
        sim(3, 5) > sim(3, 2),
        "French/Spanish cat {} vs stock market {}",
        sim(3, 5),
        sim(3, 2)
    );

    // In-situ Q8_0 stays close (it is what `--quantization` defaults to).
    let q8 = encoder(&dir, Quantization::Q8_0);
    let got = q8.embed(&seqs, &mut scratch).unwrap();
    let worst = got
        .iter()
        .zip(&want)
        .map(|(g, w)| 1.0 - cosine(g, w))
        .fold(0.0, f64::max);
    println!("q8_0: worst cosine distance {worst:e}");
    assert!(worst <= 2e-3, "q8_0 cosine distance {worst}");
    // Packed or alone, the same bits in q8_0 too (activations are quantized per row): an
    // English and a Japanese sentence.
    for i in [0, 6] {
        let alone = q8.embed(&[seqs[i]], &mut scratch).unwrap();
        assert!(
            alone[0] == got[i],
            "sentence {i}: q8_0 batch vs alone differ"
        );
    }
}
