//! EmbeddingGemma-300M (Gemma 3's layers, bidirectional, mean pooling, two Dense projections,
//! L2 normalisation) from its sentence-transformers directory: embeddings within 1e-4 cosine
//! distance of an independent numpy forward pass (tests/embeddinggemma_reference.py) at every
//! Matryoshka length (768, 512, 256, 128), on sentences in several languages and one input
//! longer than the sliding layers' window (where a model without the window is far off); the
//! same whether the sentences run in one batch or alone; matching sentences closer than
//! unrelated ones. The model is fetched on demand (`scripts/fetch-models.sh embeddinggemma`).
#![allow(clippy::unwrap_used)]

use crate::common;

use common::cosine;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pagoda_frontend::HfTokenizer;
use pagoda_hf::Quantization;
use pagoda_model::encoder::truncate_normalized;
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
fn embeddinggemma() -> PathBuf {
    common::fetched_dir("embeddinggemma", "embeddinggemma-300m")
}

/// The reference's vectors by Matryoshka length ("768", ..., "768_no_window").
type Reference = HashMap<String, Vec<Option<Vec<f64>>>>;

fn reference(dir: &Path, ids: &[Vec<u32>]) -> Reference {
    let v = common::python_reference("embeddinggemma_reference.py", dir, &serde_json::json!(ids));
    serde_json::from_value(v).unwrap()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A paragraph of ~320 tokens: past the sliding layers' reach of 257 (its first and last
/// tokens do not see each other; the unwindowed reference is then 5e-3 away, 5x the bound
/// below, at a little over half the cost of the ~550 tokens this used to be).
fn long_text() -> String {
    let part = "The river rose through the night, and by morning the old stone bridge stood \
                alone in a wide brown lake. Les habitants regardaient l'eau monter sans rien \
                dire. Am Nachmittag kamen die ersten Boote. ";
    (0..7).map(|i| format!("{i}. {part}")).collect()
}

#[test]
fn embeddinggemma_matches_a_numpy_forward_pass() {
    let dir = embeddinggemma();
    let tok = HfTokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
    let mut texts: Vec<String> = SENTENCES.iter().map(|s| s.to_string()).collect();
    texts.push(long_text());
    let ids: Vec<Vec<u32>> = texts.iter().map(|s| tok.encode(s).unwrap()).collect();
    assert_eq!(ids[0][0], 2, "<bos> first");
    assert_eq!(*ids[0].last().unwrap(), 1, "<eos> last");
    let long = ids.len() - 1;
    assert!(
        ids[long].len() > 257 + 32,
        "long input of {} tokens",
        ids[long].len()
    );
    let want = reference(&dir, &ids);

    let file = pagoda_hf::convert(&dir, Quantization::None).unwrap();
    let exact = Encoder::load(Arc::new(file)).unwrap();
    let c = exact.config();
    assert_eq!(c.output_dim, 768);
    assert_eq!(c.matryoshka_dimensions, [768, 512, 256, 128]);
    let seqs: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
    let mut scratch = EncoderScratch::default();
    let batch = exact.embed(&seqs, &mut scratch).unwrap();
    for dim in [768, 512, 256, 128] {
        let mut worst = 0f64;
        for (i, (got, want)) in batch.iter().zip(&want[&dim.to_string()]).enumerate() {
            let mut got = got.clone();
            truncate_normalized(&mut got, dim, c.normalize);
            let norm: f32 = dot(&got, &got).sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "input {i} at {dim}: norm {norm}");
            let dist = 1.0 - cosine(&got, want.as_ref().unwrap());
            assert!(dist <= 1e-4, "input {i} at {dim}: cosine distance {dist}");
            worst = worst.max(dist);
        }
        println!("f32 at {dim}: worst cosine distance {worst:e}");
    }
    // The window matters past 257 tokens: a model attending globally is far from both.
    let global = want["768_no_window"][long].as_ref().unwrap();
    let off = 1.0 - cosine(&batch[long], global);
    println!("long input against the unwindowed reference: cosine distance {off:e}");
    assert!(off > 1e-3, "the sliding window changed nothing ({off})");

    // Alone, an input's embedding is bit for bit the one it got packed with inputs of other
    // lengths (a short sentence and a Japanese one; the long input alone cost a fifth of the
    // test; packing is one code path for every encoder, and MiniLM's test checks it too).
    for i in [0, 6] {
        let got = &batch[i];
        let alone = exact.embed(&[seqs[i]], &mut scratch).unwrap();
        assert!(alone[0] == *got, "input {i}: f32 batch vs alone differ");
    }

    // Paraphrases and translations are closer than unrelated sentences.
    let sim = |a: usize, b: usize| dot(&batch[a], &batch[b]);
    assert!(
        sim(0, 1) > sim(0, 2) + 0.1,
        "guitar pair {} vs stock market {}",
        sim(0, 1),
        sim(0, 2)
    );
    assert!(
        sim(9, 10) > sim(9, 11) + 0.1,
        "password pair {} vs photosynthesis {}",
        sim(9, 10),
        sim(9, 11)
    );
    for (a, b) in [(3, 4), (3, 5), (6, 7), (4, 8)] {
        assert!(
            sim(a, b) > sim(a, 2) && sim(a, b) > sim(a, 11),
            "cat sentences {a}/{b}: {} vs unrelated {} / {}",
            sim(a, b),
            sim(a, 2),
            sim(a, 11)
        );
    }
    drop(exact);

    // In-situ Q8_0 (the `--quantization` default) stays close.
    let q8 = Encoder::load(Arc::new(
        pagoda_hf::convert(&dir, Quantization::Q8_0).unwrap(),
    ))
    .unwrap();
    let got = q8.embed(&seqs, &mut scratch).unwrap();
    let worst = got
        .iter()
        .zip(&want["768"])
        .map(|(g, w)| 1.0 - cosine(g, w.as_ref().unwrap()))
        .fold(0.0, f64::max);
    println!("q8_0: worst cosine distance {worst:e}");
    assert!(worst <= 5e-3, "q8_0 cosine distance {worst}");
    // The same bits alone in q8_0 too (two short inputs: the long one alone costs a second).
    for i in [0, 6] {
        let alone = q8.embed(&[seqs[i]], &mut scratch).unwrap();
        assert!(alone[0] == got[i], "input {i}: q8_0 batch vs alone differ");
    }
}
