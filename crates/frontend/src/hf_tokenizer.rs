//! A Hugging Face `tokenizer.json` run by the `tokenizers` crate itself, for the models whose
//! vocabulary has no GGUF form in pagoda (the WordPiece of BERT encoders). Its own truncation
//! and padding settings are turned off: the server decides what is too long.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::TokenizerError;

/// Helper threads of [`HfTokenizer::encode_many`] running now, in the whole process.
static HELPERS: AtomicUsize = AtomicUsize::new(0);

/// A reservation of helper threads, returned when dropped.
struct Helpers(usize);

impl Helpers {
    /// Up to `want` helpers, while the process runs fewer than `cap` in all.
    fn reserve(want: usize, cap: usize) -> Self {
        let mut running = HELPERS.load(Ordering::Relaxed);
        loop {
            let n = want.min(cap.saturating_sub(running));
            if n == 0 {
                return Self(0);
            }
            match HELPERS.compare_exchange_weak(
                running,
                running + n,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Self(n),
                Err(now) => running = now,
            }
        }
    }
}

impl Drop for Helpers {
    fn drop(&mut self) {
        HELPERS.fetch_sub(self.0, Ordering::AcqRel);
    }
}

pub struct HfTokenizer {
    inner: tokenizers::Tokenizer,
}

impl HfTokenizer {
    /// Reads `path`, refusing a file over 256 MiB before reading it (the largest
    /// tokenizer.json files are about 30 MB; a model directory is untrusted input).
    pub fn from_file(path: &Path) -> Result<Self, TokenizerError> {
        const MAX_BYTES: u64 = 256 << 20;
        let bad = |e: String| TokenizerError::Json(format!("{}: {e}", path.display()));
        let len = std::fs::metadata(path)
            .map_err(|e| bad(e.to_string()))?
            .len();
        if len > MAX_BYTES {
            return Err(bad(format!("{len} bytes, over the {MAX_BYTES}-byte limit")));
        }
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        Self::from_json(&text)
    }

    pub fn from_json(text: &str) -> Result<Self, TokenizerError> {
        // The tokenizers crate (0.21) panics instead of erring on some malformed parts (a
        // `decoder` that is not a JSON value: `expect("Helper")`, found by fuzzing): caught
        // here, so a bad tokenizer.json is an error naming the file, not a dead loader.
        let parsed =
            std::panic::catch_unwind(|| text.parse::<tokenizers::Tokenizer>()).map_err(|_| {
                TokenizerError::Json("tokenizer.json: malformed (the parser panicked)".into())
            })?;
        let mut inner = parsed.map_err(|e| TokenizerError::Json(format!("tokenizer.json: {e}")))?;
        inner
            .with_truncation(None)
            .map_err(|e| TokenizerError::Json(e.to_string()))?;
        inner.with_padding(None);
        Ok(Self { inner })
    }

    /// The ids of `text` with the tokenizer's special tokens around it ([CLS] ... [SEP]).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        // `encode_fast`: the same ids without the offsets, which no caller reads.
        self.inner
            .encode_fast(text, true)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizerError::Json(e.to_string()))
    }

    /// [`HfTokenizer::encode`] of each of `texts`, in order, on up to `threads` threads when
    /// the texts are long enough to pay for them (a batch of documents tokenizes at a few MB/s
    /// a core: one thread would leave the others idle before the model runs). Each text's ids
    /// are the same whichever thread tokenizes it.
    pub fn encode_many(
        &self,
        texts: &[&str],
        threads: usize,
    ) -> Vec<Result<Vec<u32>, TokenizerError>> {
        // Below this many bytes in all a thread's start (tens of us) is not worth it.
        const MIN_BYTES_PER_THREAD: usize = 8 << 10;
        let bytes: usize = texts.iter().map(|t| t.len()).sum();
        let wanted = threads
            .min(texts.len())
            .min(bytes / MIN_BYTES_PER_THREAD)
            .max(1);
        // Concurrent requests share one set of helpers: without the budget, n requests at
        // once would start n x (threads - 1) threads on `threads` cores.
        let helpers = Helpers::reserve(wanted - 1, threads.saturating_sub(1));
        let threads = 1 + helpers.0;
        if threads == 1 {
            return texts.iter().map(|t| self.encode(t)).collect();
        }
        // Contiguous runs of texts of about equal bytes, one per thread, joined in order.
        let mut runs = Vec::with_capacity(threads);
        let (mut start, mut acc) = (0, 0);
        for (i, t) in texts.iter().enumerate() {
            acc += t.len();
            if acc * threads >= bytes * (runs.len() + 1) && runs.len() + 1 < threads {
                runs.push(start..i + 1);
                start = i + 1;
            }
        }
        runs.push(start..texts.len());
        // A panic inside the tokenizers crate is one error per text of its run, so the
        // results still line up and the request gets an error, not a dead handler.
        let encode_run = |r: std::ops::Range<usize>| -> Vec<Result<Vec<u32>, TokenizerError>> {
            let n = r.len();
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                texts[r].iter().map(|t| self.encode(t)).collect()
            }))
            .unwrap_or_else(|_| {
                (0..n)
                    .map(|_| Err(TokenizerError::Json("the tokenizer panicked".into())))
                    .collect()
            })
        };
        std::thread::scope(|s| {
            let mut runs = runs.into_iter();
            let own = runs.next().unwrap_or(0..0);
            let handles: Vec<_> = runs.map(|r| s.spawn(move || encode_run(r))).collect();
            // The calling thread takes the first run rather than waiting idle.
            let mut out = encode_run(own);
            for h in handles {
                // `encode_run` catches its panics: a join cannot fail.
                out.extend(h.join().unwrap_or_default());
            }
            out
        })
    }

    /// The ids of the pair (`first`, `second`) as the tokenizer's post-processor joins them
    /// (BERT's `[CLS] first [SEP] second [SEP]`), and where the second segment starts: the
    /// first token of token type 1 (the length when the template gives none).
    pub fn encode_pair(
        &self,
        first: &str,
        second: &str,
    ) -> Result<(Vec<u32>, usize), TokenizerError> {
        let e = self
            .inner
            .encode((first, second), true)
            .map_err(|e| TokenizerError::Json(e.to_string()))?;
        let ids = e.get_ids().to_vec();
        let from = e
            .get_type_ids()
            .iter()
            .position(|&t| t != 0)
            .unwrap_or(ids.len());
        Ok((ids, from))
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, true)
            .map_err(|e| TokenizerError::Json(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_calls_share_one_budget_of_helpers() {
        let first = Helpers::reserve(3, 2);
        assert_eq!(first.0, 2, "no more than the cap");
        assert_eq!(Helpers::reserve(1, 2).0, 0, "the budget is spent");
        drop(first);
        let again = Helpers::reserve(1, 2);
        assert_eq!(again.0, 1, "returned when dropped");
    }
}
