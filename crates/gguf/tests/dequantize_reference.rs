//! Every tensor type pagoda reads dequantizes bit for bit as the `gguf` Python package does:
//! random blocks (scales kept finite) are written into a GGUF file with the testkit writer,
//! opened with `GgufFile`, dequantized by `pagoda_kernels::quant::dequantize_row` and compared
//! with `gguf.quants.dequantize` over the same file (scripts/test.sh installs `gguf`).

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::{Path, PathBuf};
use std::process::Command;

use pagoda_gguf::GgufFile;
use pagoda_kernels::quant::{GgmlType, dequantize_row};
use pagoda_testkit::gguf_writer::GgufWriter;

/// A small deterministic generator (xorshift64*), so the test needs no RNG crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A finite value in (-2, 2) with a random exponent down to 2^-14.
    fn value(&mut self) -> f32 {
        let m = (self.next() % 20_000) as f32 / 10_000.0 - 1.0;
        m * 2f32.powi(-((self.next() % 14) as i32))
    }
}

/// Byte offsets of the f16 scale fields of one block of `ty` (and of an f32 one for Q8_K):
/// random bits there could be NaN or infinity, which would compare unequal to themselves.
fn scale_fields(ty: GgmlType) -> (&'static [usize], &'static [usize]) {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::IQ4_NL => (&[0], &[]),
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q8_1 | GgmlType::Q4_K | GgmlType::Q5_K => {
            (&[0, 2], &[])
        }
        GgmlType::IQ4_XS => (&[0], &[]),
        GgmlType::Q2_K => (&[80, 82], &[]),
        GgmlType::Q3_K => (&[108], &[]),
        GgmlType::Q6_K => (&[208], &[]),
        GgmlType::Q8_K => (&[], &[0]),
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => (&[], &[]),
    }
}

/// `blocks` random blocks of `ty`: random quant bits, finite random scales.
fn random_blocks(ty: GgmlType, blocks: usize, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks * ty.type_size());
    for _ in 0..blocks {
        let mut b: Vec<u8> = (0..ty.type_size()).map(|_| rng.next() as u8).collect();
        match ty {
            GgmlType::F32 => b.copy_from_slice(&rng.value().to_le_bytes()),
            GgmlType::F16 => b.copy_from_slice(&half_bits(rng.value()).to_le_bytes()),
            GgmlType::BF16 => {
                b.copy_from_slice(&((rng.value().to_bits() >> 16) as u16).to_le_bytes())
            }
            _ => {
                let (f16s, f32s) = scale_fields(ty);
                for &at in f16s {
                    b[at..at + 2].copy_from_slice(&half_bits(rng.value()).to_le_bytes());
                }
                for &at in f32s {
                    b[at..at + 4].copy_from_slice(&rng.value().to_le_bytes());
                }
            }
        }
        out.extend(b);
    }
    out
}

/// f32 to IEEE half bits (truncating; any finite half will do).
fn half_bits(v: f32) -> u16 {
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xFF) as i32 - 127 + 15;
    if exp <= 0 {
        return sign;
    }
    sign | ((exp.min(30) as u16) << 10) | ((bits >> 13) & 0x3FF) as u16
}

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pagoda-dequant-ref-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn reference_values(out: &Path, name: &str) -> Vec<f32> {
    let bytes = std::fs::read(out.join(format!("{name}.f32"))).unwrap();
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// The types compared: all but Q8_1, an activation format never stored in files, for which
/// gguf-py's size table still has an older 40-byte block (ggml's block_q8_1 is 36 bytes).
fn compared_types() -> impl Iterator<Item = GgmlType> {
    GgmlType::ALL.into_iter().filter(|&ty| ty != GgmlType::Q8_1)
}

#[test]
fn every_type_dequantizes_bit_exactly_like_gguf_py() {
    let probe = Command::new(python())
        .args(["-c", "import gguf, numpy"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python()));
    assert!(
        probe.status.success(),
        "the `gguf` Python package is missing (scripts/test.sh installs it: \
         python3 -m pip install gguf): {}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut writer = GgufWriter::new();
    let rows = 3u64;
    for ty in compared_types() {
        // Two or more blocks per row, three rows: the row split is exercised too.
        let cols = (ty.block_size() * 4).max(256) as u64;
        let blocks = (cols * rows) as usize / ty.block_size();
        let data = random_blocks(ty, blocks, &mut rng);
        writer = writer.tensor(ty.name(), &[cols, rows], ty, data);
    }
    let dir = scratch_dir();
    let path = dir.join("all_types.gguf");
    writer.write_to(&path).unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("dequantize_reference.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(&path)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dequantize_reference.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let file = GgufFile::open(&path).unwrap();
    for ty in compared_types() {
        let t = file.tensor(ty.name()).unwrap();
        assert_eq!(t.ty, ty);
        let cols = t.dims[0] as usize;
        let data = file.tensor_data(t);
        let row_bytes = ty.row_bytes(cols).unwrap();
        let mut ours = vec![0f32; cols * t.dims[1] as usize];
        for (src, dst) in data
            .chunks_exact(row_bytes)
            .zip(ours.chunks_exact_mut(cols))
        {
            dequantize_row(ty, src, dst);
        }
        let want = reference_values(&dir, ty.name());
        assert_eq!(want.len(), ours.len(), "{ty}: element count");
        let nonzero = want.iter().filter(|v| **v != 0.0).count();
        assert!(
            nonzero > ours.len() / 2,
            "{ty}: the random blocks are mostly zero"
        );
        for (i, (&a, &b)) in ours.iter().zip(&want).enumerate() {
            assert!(
                a.to_bits() == b.to_bits(),
                "{ty} element {i}: pagoda {a:e} ({:#x}) vs gguf-py {b:e} ({:#x})",
                a.to_bits(),
                b.to_bits()
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
