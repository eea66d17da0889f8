//! The base file of `--kl-divergence-base`: the tokens that were scored and, for every scored
//! position, the base model's log-probabilities over the whole vocabulary as f16 (exact where it
//! matters: f16 keeps 11 significant bits, and the probable tokens' log-probs are near 0).
//!
//! Layout, little-endian: magic `PGDLOGP1`, u32 vocab, ctx, first, num_chunks; u32 tokens
//! `[num_chunks * ctx]`; then `[num_chunks][ctx - 1 - first][vocab]` f16 rows.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use half::f16;

use crate::eval::ChunkPlan;

const MAGIC: &[u8; 8] = b"PGDLOGP1";
const HEADER: u64 = 8 + 4 * 4;

/// What is wrong with a base file.
#[derive(Debug, thiserror::Error)]
pub enum LogprobFileError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a pagoda log-probability file (written by --kl-divergence-base)")]
    Foreign { path: PathBuf },
    #[error("{path} is {got} bytes, but its header describes {expected}: truncated or corrupt")]
    Size {
        path: PathBuf,
        got: u64,
        expected: u64,
    },
    #[error("{path} was written for a vocabulary of {file} tokens, this model has {model}")]
    Vocab {
        path: PathBuf,
        file: usize,
        model: usize,
    },
    #[error(
        "{path} scored other tokens: the text or the tokenizer differs (first difference at \
         token {index})"
    )]
    Tokens { path: PathBuf, index: usize },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> LogprobFileError + '_ {
    move |source| LogprobFileError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Writes the header and tokens at once, then one row per scored position.
pub struct LogprobWriter {
    out: BufWriter<File>,
    path: PathBuf,
    row: Vec<u8>,
}

impl LogprobWriter {
    pub fn create(
        path: &Path,
        vocab: usize,
        plan: &ChunkPlan,
        tokens: &[u32],
    ) -> Result<Self, LogprobFileError> {
        let file = File::create(path).map_err(io(path))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let mut head = Vec::with_capacity(HEADER as usize + tokens.len() * 4);
        head.extend_from_slice(MAGIC);
        for v in [vocab, plan.ctx, plan.first, plan.num_chunks] {
            head.extend_from_slice(&(v as u32).to_le_bytes());
        }
        for &t in &tokens[..plan.num_chunks * plan.ctx] {
            head.extend_from_slice(&t.to_le_bytes());
        }
        out.write_all(&head).map_err(io(path))?;
        Ok(Self {
            out,
            path: path.to_owned(),
            row: Vec::with_capacity(vocab * 2),
        })
    }

    pub fn write_row(&mut self, logprobs: &[f32]) -> Result<(), LogprobFileError> {
        self.row.clear();
        for &v in logprobs {
            self.row.extend_from_slice(&f16::from_f32(v).to_le_bytes());
        }
        self.out.write_all(&self.row).map_err(io(&self.path))
    }

    pub fn finish(mut self) -> Result<(), LogprobFileError> {
        self.out.flush().map_err(io(&self.path))?;
        self.out.get_ref().sync_all().map_err(io(&self.path))
    }
}

/// Reads a base file back, row by row, after checking it against the run that compares.
pub struct LogprobReader {
    input: BufReader<File>,
    path: PathBuf,
    pub plan: ChunkPlan,
    /// The tokens the base run scored; the comparing run scores the same ones.
    pub tokens: Vec<u32>,
    vocab: usize,
    bytes: Vec<u8>,
}

impl LogprobReader {
    pub fn open(path: &Path, model_vocab: usize) -> Result<Self, LogprobFileError> {
        let file = File::open(path).map_err(io(path))?;
        let len = file.metadata().map_err(io(path))?.len();
        let mut input = BufReader::with_capacity(1 << 20, file);
        let mut head = [0u8; HEADER as usize];
        let foreign = || LogprobFileError::Foreign {
            path: path.to_owned(),
        };
        input.read_exact(&mut head).map_err(|_| foreign())?;
        if &head[..8] != MAGIC {
            return Err(foreign());
        }
        let word = |i: usize| {
            let b = &head[8 + 4 * i..12 + 4 * i];
            u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
        };
        let (vocab, ctx, first, num_chunks) = (word(0), word(1), word(2), word(3));
        if ctx < 4 || first >= ctx - 1 || num_chunks == 0 {
            return Err(foreign());
        }
        let plan = ChunkPlan {
            ctx,
            num_chunks,
            first,
        };
        let rows = (num_chunks * plan.scored_per_chunk()) as u64;
        let expected = HEADER + (num_chunks * ctx) as u64 * 4 + rows * vocab as u64 * 2;
        if len != expected {
            return Err(LogprobFileError::Size {
                path: path.to_owned(),
                got: len,
                expected,
            });
        }
        if vocab != model_vocab {
            return Err(LogprobFileError::Vocab {
                path: path.to_owned(),
                file: vocab,
                model: model_vocab,
            });
        }
        let mut raw = vec![0u8; num_chunks * ctx * 4];
        input.read_exact(&mut raw).map_err(io(path))?;
        let tokens = raw
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok(Self {
            input,
            path: path.to_owned(),
            plan,
            tokens,
            vocab,
            bytes: vec![0; vocab * 2],
        })
    }

    /// Refuses a comparison over other tokens than the base run's.
    pub fn check_tokens(&self, tokens: &[u32]) -> Result<(), LogprobFileError> {
        let index = self
            .tokens
            .iter()
            .zip(tokens)
            .position(|(a, b)| a != b)
            .or((tokens.len() < self.tokens.len()).then_some(tokens.len()));
        match index {
            Some(index) => Err(LogprobFileError::Tokens {
                path: self.path.clone(),
                index,
            }),
            None => Ok(()),
        }
    }

    /// The next row, decoded into `out` (`vocab` entries) and renormalised: f16 rounding leaves
    /// the stored probabilities summing to 1 +- 1e-4, and a KL divergence against an
    /// unnormalised row would carry that error at first order (a floor of 4e-5 when SmolLM2 is
    /// compared with itself, 3e-7 once renormalised).
    pub fn read_row(&mut self, out: &mut Vec<f32>) -> Result<(), LogprobFileError> {
        self.input
            .read_exact(&mut self.bytes)
            .map_err(io(&self.path))?;
        out.clear();
        out.extend(
            self.bytes
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()),
        );
        debug_assert_eq!(out.len(), self.vocab);
        crate::eval::log_softmax(out);
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn write(path: &Path, plan: &ChunkPlan, tokens: &[u32], vocab: usize) {
        let mut w = LogprobWriter::create(path, vocab, plan, tokens).unwrap();
        for r in 0..plan.num_chunks * plan.scored_per_chunk() {
            let row: Vec<f32> = (0..vocab).map(|i| -(i as f32) * 0.25 - r as f32).collect();
            w.write_row(&row).unwrap();
        }
        w.finish().unwrap();
    }

    #[test]
    fn round_trips_and_refuses_truncated_foreign_and_mismatched_files() {
        let dir = std::env::temp_dir().join(format!("pagoda-logp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("base.logp");
        let plan = ChunkPlan::new(20, 8, None).unwrap();
        let tokens: Vec<u32> = (0..20).collect();
        write(&path, &plan, &tokens, 5);

        let mut r = LogprobReader::open(&path, 5).unwrap();
        assert_eq!(r.plan, plan);
        assert_eq!(r.tokens, tokens[..16]);
        r.check_tokens(&tokens).unwrap();
        let mut row = Vec::new();
        r.read_row(&mut row).unwrap();
        // Renormalised on reading: the same distribution up to a constant shift.
        let shift = row[0];
        for (i, v) in row.iter().enumerate() {
            assert!((v - shift + i as f32 * 0.25).abs() < 1e-6, "{row:?}");
        }
        assert!((row.iter().map(|v| v.exp()).sum::<f32>() - 1.0).abs() < 1e-6);

        let mut other = tokens.clone();
        other[3] = 99;
        assert!(matches!(
            r.check_tokens(&other),
            Err(LogprobFileError::Tokens { index: 3, .. })
        ));
        assert!(matches!(
            LogprobReader::open(&path, 6),
            Err(LogprobFileError::Vocab {
                file: 5,
                model: 6,
                ..
            })
        ));

        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert!(matches!(
            LogprobReader::open(&path, 5),
            Err(LogprobFileError::Size { .. })
        ));
        std::fs::write(&path, b"GGUF and more bytes than a header holds").unwrap();
        assert!(matches!(
            LogprobReader::open(&path, 5),
            Err(LogprobFileError::Foreign { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
