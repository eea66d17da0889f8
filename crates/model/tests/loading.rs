//! Loading a GGUF checks the metadata and every tensor: a missing key or tensor, or a tensor of
//! the wrong shape, is an error that names it.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use pagoda_gguf::GgufFile;
use pagoda_model::{Model, ModelError};
use pagoda_testkit::tiny_model::TinyModel;

fn load(bytes: Vec<u8>) -> Result<Model, ModelError> {
    Model::load(Arc::new(GgufFile::from_bytes(bytes).unwrap()))
}

#[test]
fn missing_tensor_and_key_are_named() {
    // Drop one tensor by renaming it.
    let spec = TinyModel::llama();
    let bytes = spec.to_bytes();
    let needle = b"blk.1.ffn_up.weight";
    let mut broken = bytes.clone();
    let at = broken
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    broken[at] = b'X';
    let err = Model::load(Arc::new(GgufFile::from_bytes(broken).unwrap()))
        .err()
        .unwrap();
    assert!(
        matches!(&err, ModelError::MissingTensor(n) if n == "blk.1.ffn_up.weight"),
        "{err}"
    );

    let key = b"llama.block_count";
    let mut broken = bytes;
    let at = broken.windows(key.len()).position(|w| w == key).unwrap();
    broken[at] = b'X';
    let err = Model::load(Arc::new(GgufFile::from_bytes(broken).unwrap()))
        .err()
        .unwrap();
    assert!(
        matches!(&err, ModelError::MissingKey(k) if k == "llama.block_count"),
        "{err}"
    );
}

fn find(bytes: &[u8], needle: &[u8]) -> usize {
    bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
}

#[test]
fn wrong_shape_and_architecture_are_named() {
    let bytes = TinyModel::llama().to_bytes();
    // Swap the names of blk.0.attn_q (256 x 256) and blk.0.attn_k (128 x 256).
    let mut swapped = bytes.clone();
    let q = find(&swapped, b"blk.0.attn_q.weight");
    let k = find(&swapped, b"blk.0.attn_k.weight");
    swapped[q + 11] = b'k';
    swapped[k + 11] = b'q';
    match load(swapped).err().unwrap() {
        ModelError::TensorShape {
            name,
            got,
            expected,
        } => {
            assert_eq!(name, "blk.0.attn_q.weight");
            assert_eq!((got, expected), (vec![256, 128], vec![256, 256]));
        }
        e => panic!("expected TensorShape, got {e}"),
    }

    let mut other = bytes.clone();
    let at = find(&other, b"general.architecture") + "general.architecture".len() + 4 + 8;
    other[at..at + 5].copy_from_slice(b"mamba");
    let err = load(other).err().unwrap();
    assert!(
        matches!(&err, ModelError::UnsupportedArchitecture(a) if a == "mamba"),
        "{err}"
    );

    let tiny = load(bytes).unwrap();
    assert_eq!(tiny.config().n_layers, 2);
    // eos <|im_end|> = 2 and <|endoftext|> = 0 both end generation, as in llama.cpp.
    assert_eq!(tiny.config().eog_token_ids, vec![0, 2]);
}
