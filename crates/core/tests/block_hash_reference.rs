//! The pinned block hash agrees with an independent implementation: Python's `hashlib` and
//! `cbor2` (canonical), written as vLLM's `sha256_cbor` `hash_block_tokens`
//! (block_hash_reference.py; scripts/test.sh installs `cbor2`), over seeds, extra keys, block
//! sizes and token ids of every CBOR integer width.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::io::Write;
use std::process::{Command, Stdio};

use pagoda_core::kv::ExtraKeys;
use pagoda_core::kv::block_hash::root_hash;

struct Case {
    seed: &'static str,
    keys: ExtraKeys,
    block_size: usize,
    tokens: Vec<u32>,
}

fn ours(c: &Case) -> Vec<String> {
    let mut out = Vec::new();
    c.keys
        .chain(root_hash(c.seed))
        .extend(&mut out, &c.tokens, c.block_size);
    out.iter().map(|h| format!("{h:?}")).collect()
}

fn cases() -> Vec<Case> {
    // Token ids that cross each CBOR width: 1 byte, +1, +2, +4.
    let widths: Vec<u32> = (0..64)
        .map(|i: u32| match i % 4 {
            0 => i,
            1 => 24 + i * 7,
            2 => 300 + i * 1000,
            _ => 70_000 + i * 65_537,
        })
        .collect();
    let salt = |s: &str| ExtraKeys {
        cache_salt: Some(s.into()),
        ..Default::default()
    };
    vec![
        Case {
            seed: "0",
            keys: ExtraKeys::default(),
            block_size: 16,
            tokens: (0..16).collect(),
        },
        Case {
            seed: "0",
            keys: ExtraKeys::default(),
            block_size: 16,
            tokens: widths.clone(),
        },
        Case {
            seed: "42",
            keys: salt("tenant-a"),
            block_size: 8,
            tokens: widths.clone(),
        },
        Case {
            seed: "",
            keys: ExtraKeys {
                lora_id: Some(3),
                cache_salt: Some("ü salt with a longer text than twenty-three bytes".into()),
            },
            block_size: 4,
            tokens: widths[..30].to_vec(),
        },
        Case {
            seed: "0",
            keys: ExtraKeys {
                lora_id: Some(70_000),
                cache_salt: None,
            },
            block_size: 32,
            tokens: widths,
        },
    ]
}

#[test]
fn block_hashes_match_hashlib_and_cbor2() {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let probe = Command::new(&python)
        .args(["-c", "import cbor2"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    assert!(
        probe.status.success(),
        "the `cbor2` Python package is missing (scripts/test.sh installs it: \
         python3 -m pip install cbor2): {}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let cases = cases();
    let mut input = String::new();
    for c in &cases {
        let toks: Vec<String> = c.tokens.iter().map(u32::to_string).collect();
        input += &format!(
            "{}|{}|{}|{}|{}\n",
            c.seed,
            c.keys.lora_id.map(|l| l.to_string()).unwrap_or_default(),
            c.keys.cache_salt.clone().unwrap_or_default(),
            c.block_size,
            toks.join(",")
        );
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/block_hash_reference.py");
    let mut child = Command::new(&python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "block_hash_reference.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: Vec<Vec<String>> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect();
    assert_eq!(theirs.len(), cases.len());
    for (c, t) in cases.iter().zip(&theirs) {
        let o = ours(c);
        assert_eq!(o.len(), c.tokens.len() / c.block_size);
        assert_eq!(&o, t, "seed {:?}, keys {:?}", c.seed, c.keys);
    }
    // The test vector printed in docs/scale-out.md.
    assert_eq!(
        theirs[0][0],
        "d830de3d42c00f25a2949b5d12d98642664a44872c1614c5b0147556276afc9c"
    );
}
