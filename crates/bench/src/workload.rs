//! What is sent: prompts and output lengths for the `random`, `shared-prefix`, `multi-turn` and
//! `file` (JSON lines or ShareGPT) workloads, reproducible from `--seed`.
//!
//! Random prompts are words drawn from [`crate::words::WORDS`], grown or trimmed until the
//! target's tokenizer counts exactly the requested length (a few `/tokenize` calls per prompt).
//! Each prompt draws its own words, so two prompts share a full KV block only by chance
//! (probability about 274^-16): no accidental prefix-cache hits.

use std::path::PathBuf;
use std::str::FromStr;

use futures_util::{StreamExt, stream};
use pagoda_protocol::{ChatMessage, Role};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::arrival::sample_standard_normal;
use crate::input::Input;
use crate::tokens::TokenCounter;
use crate::words::WORDS;

/// A length distribution: `128` (fixed), `64..256` (uniform, inclusive) or `128+-32` (normal
/// with mean and standard deviation, rounded, at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LengthDist {
    /// Always `n`.
    Fixed {
        /// The length.
        n: u32,
    },
    /// Uniform over `min..=max`.
    Uniform {
        /// Smallest length.
        min: u32,
        /// Largest length.
        max: u32,
    },
    /// Normal, rounded and clamped to at least 1.
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
    },
}

impl LengthDist {
    /// Draw one length.
    pub fn sample(&self, rng: &mut ChaCha8Rng) -> u32 {
        match *self {
            LengthDist::Fixed { n } => n,
            LengthDist::Uniform { min, max } => rng.random_range(min..=max),
            LengthDist::Normal { mean, std } => {
                (mean + std * sample_standard_normal(rng)).round().max(1.0) as u32
            }
        }
    }
}

impl FromStr for LengthDist {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let num = |x: &str| {
            x.trim()
                .parse::<u32>()
                .map_err(|_| format!("`{x}` is not a token count"))
        };
        let float = |x: &str| {
            x.trim()
                .parse::<f64>()
                .map_err(|_| format!("`{x}` is not a number"))
        };
        let s = s.trim();
        let dist = if let Some((a, b)) = s.split_once("..") {
            let (min, max) = (num(a)?, num(b)?);
            if min > max {
                return Err(format!("empty range `{s}`"));
            }
            LengthDist::Uniform { min, max }
        } else if let Some((a, b)) = s.split_once("+-") {
            let (mean, std) = (float(a)?, float(b)?);
            if mean < 1.0 || std < 0.0 {
                return Err(format!("`{s}` needs mean >= 1 and std >= 0"));
            }
            LengthDist::Normal { mean, std }
        } else {
            LengthDist::Fixed { n: num(s)? }
        };
        if matches!(
            dist,
            LengthDist::Fixed { n: 0 } | LengthDist::Uniform { min: 0, .. }
        ) {
            return Err(format!("`{s}`: lengths must be at least 1"));
        }
        Ok(dist)
    }
}

/// The kind of workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// Independent random prompts.
    Random,
    /// G groups sharing a system prompt of P tokens, then distinct questions.
    SharedPrefix,
    /// Conversations whose next turn carries the previous turns and answers.
    MultiTurn,
    /// Prompts from `--dataset-path` (JSON lines or ShareGPT).
    File,
}

/// Everything that defines a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// Which generator.
    pub kind: WorkloadKind,
    /// Prompt (or question, or turn) length.
    pub input_len: LengthDist,
    /// `max_tokens` per request; for `file`, `None` takes the dataset's answer lengths.
    pub output_len: Option<LengthDist>,
    /// Shared-prefix: number of groups.
    pub num_groups: usize,
    /// Shared-prefix: system prompt length in tokens.
    pub prefix_len: u32,
    /// Multi-turn: turns per conversation.
    pub num_turns: usize,
    /// File: path of the dataset.
    pub dataset_path: Option<PathBuf>,
    /// Seed of every random choice.
    pub seed: u64,
    /// With `--prefix-warmup`, the seed of the shared-prefix workload's system prompts instead
    /// of `seed`: the run's `--seed`, kept while load points, rounds, sweep probes and the
    /// warm-up take fresh questions (another `seed`), so the groups' prompts stay those of one
    /// deployment and the warm-up caches them.
    #[serde(default)]
    pub prefix_seed: Option<u64>,
}

/// Output length when neither `--output-len` nor the dataset gives one.
pub const DEFAULT_OUTPUT_LEN: u32 = 128;

/// One turn of a work item: one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// The user text.
    pub user: String,
    /// Its token count (measured, or approximate).
    pub input_tokens: u32,
    /// `max_tokens` to send.
    pub output_tokens: u32,
}

/// A unit of work: a single request, or a conversation of several turns that run in order.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkItem {
    /// Shared system prompt (shared-prefix workload).
    pub system: Option<String>,
    /// Its token count.
    pub system_tokens: u32,
    /// Turns, sent one after another; turn k carries turns 0..k and their answers.
    pub turns: Vec<Turn>,
}

impl WorkItem {
    /// The input of turn `k`, given the answers to turns `0..k`.
    pub fn input(&self, k: usize, answers: &[String]) -> Input {
        debug_assert!(k < self.turns.len() && answers.len() >= k);
        if self.system.is_none() && k == 0 {
            return Input::Prompt(self.turns[0].user.clone());
        }
        let mut messages = Vec::with_capacity(2 * k + 2);
        if let Some(system) = &self.system {
            messages.push(ChatMessage::new(Role::System, system.clone()));
        }
        for (turn, answer) in self.turns[..k].iter().zip(answers) {
            messages.push(ChatMessage::new(Role::User, turn.user.clone()));
            messages.push(ChatMessage::new(Role::Assistant, answer.clone()));
        }
        messages.push(ChatMessage::new(Role::User, self.turns[k].user.clone()));
        Input::Messages(messages)
    }

    /// Prompt tokens the workload knows about for turn `k` (answers excluded).
    pub fn expected_input_tokens(&self, k: usize) -> u32 {
        self.system_tokens + self.turns[..=k].iter().map(|t| t.input_tokens).sum::<u32>()
    }
}

/// Errors building a workload.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// `--workload file` without `--dataset-path`.
    #[error("--workload file needs --dataset-path")]
    MissingDataset,
    /// The dataset could not be read.
    #[error("cannot read dataset {path}: {source}")]
    Read {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The dataset is not JSON lines or ShareGPT.
    #[error("dataset {path}: {message}")]
    Format {
        /// The path.
        path: PathBuf,
        /// What is wrong, with the line number when known.
        message: String,
    },
}

/// A per-item random stream derived from the run seed, so items can be built concurrently and
/// still reproducibly (SplitMix64 finalizer over seed and index).
fn item_rng(seed: u64, stream: u64, index: usize) -> ChaCha8Rng {
    let mut z = seed
        ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03)
        ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ChaCha8Rng::seed_from_u64(z ^ (z >> 31))
}

/// Random words whose token count is `target`, as close as the tokenizer allows. Returns the
/// text and the count the counter reports for it.
pub async fn random_text(
    counter: &TokenCounter,
    rng: &mut ChaCha8Rng,
    target: u32,
) -> (String, u32) {
    let pick = |rng: &mut ChaCha8Rng| WORDS[rng.random_range(0..WORDS.len())];
    let mut words: Vec<&str> = (0..target).map(|_| pick(rng)).collect();
    let mut best: Option<(u32, String, u32)> = None; // (distance, text, count)
    for _ in 0..12 {
        let text = words.join(" ");
        let count = counter.count(&text).await;
        let distance = count.abs_diff(target);
        if best.as_ref().is_none_or(|b| distance < b.0) {
            best = Some((distance, text, count));
        }
        if count == target {
            break;
        }
        if count < target {
            words.extend((0..target - count).map(|_| pick(rng)));
        } else {
            // Each word is at least one token: dropping `excess` words may undershoot, which
            // the next round refills with fresh words.
            let drop = ((count - target) as usize)
                .min(words.len().saturating_sub(1))
                .max(1);
            words.truncate(words.len().saturating_sub(drop).max(1));
        }
    }
    match best {
        Some((_, text, count)) => (text, count),
        None => (String::new(), 0),
    }
}

/// Build `num_requests` requests' worth of work items for `spec`.
pub async fn build(
    spec: &WorkloadSpec,
    num_requests: usize,
    counter: &TokenCounter,
) -> Result<Vec<WorkItem>, WorkloadError> {
    let out_len = |rng: &mut ChaCha8Rng| {
        spec.output_len
            .map_or(DEFAULT_OUTPUT_LEN, |d| d.sample(rng))
            .max(1)
    };
    // Prompt building is bounded by /tokenize round trips, so run a few items at once.
    const PARALLEL: usize = 8;
    match spec.kind {
        WorkloadKind::Random => {
            let items = stream::iter(0..num_requests)
                .map(|i| async move {
                    let mut rng = item_rng(spec.seed, 1, i);
                    let len = spec.input_len.sample(&mut rng).max(1);
                    let output_tokens = out_len(&mut rng);
                    let (user, input_tokens) = random_text(counter, &mut rng, len).await;
                    WorkItem {
                        system: None,
                        system_tokens: 0,
                        turns: vec![Turn {
                            user,
                            input_tokens,
                            output_tokens,
                        }],
                    }
                })
                .buffered(PARALLEL)
                .collect()
                .await;
            Ok(items)
        }
        WorkloadKind::SharedPrefix => {
            let groups = spec.num_groups.max(1);
            let prefixes: Vec<(String, u32)> = stream::iter(0..groups)
                .map(|g| async move {
                    let mut rng = item_rng(spec.prefix_seed.unwrap_or(spec.seed), 2, g);
                    random_text(counter, &mut rng, spec.prefix_len.max(1)).await
                })
                .buffered(PARALLEL)
                .collect()
                .await;
            let prefixes = &prefixes;
            let items = stream::iter(0..num_requests)
                .map(|i| async move {
                    let mut rng = item_rng(spec.seed, 3, i);
                    // Round-robin over groups so every group sees the same load.
                    let (system, system_tokens) = prefixes[i % groups].clone();
                    let len = spec.input_len.sample(&mut rng).max(1);
                    let output_tokens = out_len(&mut rng);
                    let (user, input_tokens) = random_text(counter, &mut rng, len).await;
                    WorkItem {
                        system: Some(system),
                        system_tokens,
                        turns: vec![Turn {
                            user,
                            input_tokens,
                            output_tokens,
                        }],
                    }
                })
                .buffered(PARALLEL)
                .collect()
                .await;
            Ok(items)
        }
        WorkloadKind::MultiTurn => {
            let turns = spec.num_turns.max(1);
            let conversations = num_requests.div_ceil(turns);
            let items = stream::iter(0..conversations)
                .map(|c| async move {
                    let mut rng = item_rng(spec.seed, 4, c);
                    // The last conversation may be shorter so the total is exactly num_requests.
                    let n = turns.min(num_requests - c * turns);
                    let mut list = Vec::with_capacity(n);
                    for _ in 0..n {
                        let len = spec.input_len.sample(&mut rng).max(1);
                        let output_tokens = out_len(&mut rng);
                        let (user, input_tokens) = random_text(counter, &mut rng, len).await;
                        list.push(Turn {
                            user,
                            input_tokens,
                            output_tokens,
                        });
                    }
                    WorkItem {
                        system: None,
                        system_tokens: 0,
                        turns: list,
                    }
                })
                .buffered(PARALLEL)
                .collect()
                .await;
            Ok(items)
        }
        WorkloadKind::File => {
            let path = spec
                .dataset_path
                .as_ref()
                .ok_or(WorkloadError::MissingDataset)?;
            let text = std::fs::read_to_string(path).map_err(|source| WorkloadError::Read {
                path: path.clone(),
                source,
            })?;
            let entries =
                crate::dataset::parse(&text).map_err(|message| WorkloadError::Format {
                    path: path.clone(),
                    message,
                })?;
            if entries.is_empty() {
                return Err(WorkloadError::Format {
                    path: path.clone(),
                    message: "no usable prompts".into(),
                });
            }
            let mut rng = item_rng(spec.seed, 5, 0);
            let mut order: Vec<usize> = (0..entries.len()).collect();
            // Fisher–Yates with the run seed: a reproducible sample of the file.
            for i in (1..order.len()).rev() {
                order.swap(i, rng.random_range(0..=i));
            }
            let entries = &entries;
            let order = &order;
            let items = stream::iter(0..num_requests)
                .map(|i| async move {
                    let mut rng = item_rng(spec.seed, 6, i);
                    let e = &entries[order[i % order.len()]];
                    let input_tokens = counter.count(&e.prompt).await;
                    let output_tokens =
                        match (spec.output_len, e.output_len, &e.reference_answer) {
                            (Some(d), _, _) => d.sample(&mut rng),
                            (None, Some(n), _) => n,
                            (None, None, Some(answer)) => counter.count(answer).await,
                            (None, None, None) => DEFAULT_OUTPUT_LEN,
                        }
                        .max(1);
                    WorkItem {
                        system: None,
                        system_tokens: 0,
                        turns: vec![Turn {
                            user: e.prompt.clone(),
                            input_tokens,
                            output_tokens,
                        }],
                    }
                })
                .buffered(PARALLEL)
                .collect()
                .await;
            Ok(items)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::client::Target;
    use crate::input::flatten_messages;
    use pagoda_protocol::MessageContent;

    fn approx_counter() -> TokenCounter {
        let target = Target {
            base_url: "http://127.0.0.1:9".into(),
            api_key: None,
            model: "m".into(),
        };
        TokenCounter::approximate(reqwest::Client::new(), target)
    }

    #[test]
    fn length_specs_parse() {
        assert_eq!("128".parse(), Ok(LengthDist::Fixed { n: 128 }));
        assert_eq!(
            "64..256".parse(),
            Ok(LengthDist::Uniform { min: 64, max: 256 })
        );
        assert_eq!(
            "128+-32".parse(),
            Ok(LengthDist::Normal {
                mean: 128.0,
                std: 32.0
            })
        );
        for bad in ["0", "x", "9..3", "-5+-1", "1..", ""] {
            assert!(bad.parse::<LengthDist>().is_err(), "{bad}");
        }
    }

    #[test]
    fn length_samples_follow_their_distribution() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let u = LengthDist::Uniform { min: 10, max: 20 };
        let xs: Vec<u32> = (0..10_000).map(|_| u.sample(&mut rng)).collect();
        assert!(xs.iter().all(|x| (10..=20).contains(x)));
        assert!(xs.contains(&10) && xs.contains(&20));
        let n = LengthDist::Normal {
            mean: 100.0,
            std: 10.0,
        };
        let ys: Vec<f64> = (0..10_000).map(|_| f64::from(n.sample(&mut rng))).collect();
        let mean = ys.iter().sum::<f64>() / ys.len() as f64;
        assert!((mean - 100.0).abs() < 0.5, "{mean}");
    }

    #[tokio::test]
    async fn random_prompts_hit_the_length_and_are_distinct_and_reproducible() {
        let counter = approx_counter();
        let spec = WorkloadSpec {
            kind: WorkloadKind::Random,
            input_len: LengthDist::Fixed { n: 40 },
            output_len: Some(LengthDist::Fixed { n: 8 }),
            num_groups: 1,
            prefix_len: 0,
            num_turns: 1,
            dataset_path: None,
            seed: 5,
            prefix_seed: None,
        };
        let a = build(&spec, 20, &counter).await.unwrap();
        let b = build(&spec, 20, &counter).await.unwrap();
        assert_eq!(a, b);
        for item in &a {
            assert_eq!(item.turns[0].input_tokens, 40);
            assert_eq!(crate::tokens::approximate_count(&item.turns[0].user), 40);
        }
        // No two prompts share their first 16 words.
        let mut heads: Vec<String> = a
            .iter()
            .map(|i| {
                i.turns[0]
                    .user
                    .split(' ')
                    .take(16)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        heads.sort();
        heads.dedup();
        assert_eq!(heads.len(), 20);
    }

    #[tokio::test]
    async fn shared_prefix_and_multi_turn_shapes() {
        let counter = approx_counter();
        let mut spec = WorkloadSpec {
            kind: WorkloadKind::SharedPrefix,
            input_len: LengthDist::Fixed { n: 5 },
            output_len: None,
            num_groups: 3,
            prefix_len: 30,
            num_turns: 3,
            dataset_path: None,
            seed: 1,
            prefix_seed: None,
        };
        let items = build(&spec, 9, &counter).await.unwrap();
        assert_eq!(items[0].system, items[3].system);
        assert_ne!(items[0].system, items[1].system);
        // Another point's (or the warm-up's) seed: new system prompts and questions, unless
        // the prompts' seed is pinned (`--prefix-warmup`).
        let other = |seed, prefix_seed| WorkloadSpec {
            seed,
            prefix_seed,
            ..spec.clone()
        };
        let fresh = build(&other(2, None), 9, &counter).await.unwrap();
        assert_ne!(items[0].system, fresh[0].system);
        let pinned = build(&other(1, Some(1)), 9, &counter).await.unwrap();
        assert_eq!(items, pinned);
        let next = build(&other(2, Some(1)), 9, &counter).await.unwrap();
        for (a, b) in items.iter().zip(&next) {
            assert_eq!(a.system, b.system);
            assert_ne!(a.turns[0].user, b.turns[0].user);
        }
        assert_eq!(items[0].expected_input_tokens(0), 35);
        assert_eq!(items[0].turns[0].output_tokens, DEFAULT_OUTPUT_LEN);
        let Input::Messages(m) = items[0].input(0, &[]) else {
            panic!()
        };
        assert_eq!(m.len(), 2);
        assert!(flatten_messages(&m).starts_with(&format!(
            "System: {}\n\nUser: ",
            items[0].system.as_deref().unwrap()
        )));

        spec.kind = WorkloadKind::MultiTurn;
        let items = build(&spec, 7, &counter).await.unwrap();
        assert_eq!(
            items.iter().map(|i| i.turns.len()).collect::<Vec<_>>(),
            vec![3, 3, 1]
        );
        let answers = vec!["A0".to_owned(), "A1".to_owned()];
        let Input::Messages(m) = items[0].input(2, &answers) else {
            panic!()
        };
        let roles: Vec<Role> = m.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            vec![
                Role::User,
                Role::Assistant,
                Role::User,
                Role::Assistant,
                Role::User
            ]
        );
        assert_eq!(m[3].content, Some(MessageContent::Text("A1".into())));
        assert!(matches!(items[0].input(0, &[]), Input::Prompt(_)));
    }
}
