//! `TextStream` on the real SmolLM2 (byte-level BPE) and Gemma 3 (SentencePiece, byte fallback)
//! tokenizers: every run is checked against an oracle computed from `DecodeStream` and plain
//! string search, on hand-picked texts and on random token sequences.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::{Arc, OnceLock};

use pagoda_frontend::{
    DecodeStream, StopMatch, TextDelta, TextStream, TextStreamOptions, TokenType, Tokenizer,
};

fn smollm() -> Arc<Tokenizer> {
    static T: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| Arc::new(common::tokenizer(common::SMOLLM)))
        .clone()
}

fn gemma() -> Arc<Tokenizer> {
    static T: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| Arc::new(common::tokenizer(common::GEMMA)))
        .clone()
}

fn models() -> [(&'static str, Arc<Tokenizer>); 2] {
    [("smollm2", smollm()), ("gemma3", gemma())]
}

fn opts(stop: &[&str]) -> TextStreamOptions {
    TextStreamOptions {
        stop: stop.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// What a run produced.
struct Run {
    deltas: Vec<TextDelta>,
    finish: TextDelta,
    output: String,
    /// The most text held back after any push.
    max_held: usize,
}

impl Run {
    /// The push (or `deltas.len()` for `finish`) that reported a stop, and which.
    fn stop(&self) -> Option<(usize, usize)> {
        self.deltas
            .iter()
            .chain([&self.finish])
            .enumerate()
            .find_map(|(k, d)| d.stopped.map(|m| (k, m.stop_index)))
    }
}

/// The earliest char boundary `p < text.len()` from which `text` is a prefix of some stop.
fn held_from(text: &str, stops: &[String]) -> usize {
    (0..text.len())
        .filter(|&p| text.is_char_boundary(p))
        .find(|&p| stops.iter().any(|s| s.starts_with(&text[p..])))
        .unwrap_or(text.len())
}

/// Streams `ids` and checks every delta against an oracle: the text `DecodeStream` yields after
/// each token, the first stop to complete in it (smallest end, then start, then index), and the
/// exact text that may be held back at each step.
fn check(tok: &Arc<Tokenizer>, ids: &[u32], opts: TextStreamOptions) -> Run {
    let skip = opts.skip_special_tokens;
    let mut ds = DecodeStream::new(tok, skip, &[]);
    let mut full = String::new();
    let complete_len: Vec<usize> = ids
        .iter()
        .map(|&id| {
            full.extend(ds.step(id));
            full.len()
        })
        .collect();
    full.extend(ds.flush());
    assert_eq!(full, tok.decode(ids, skip));

    let best = opts
        .stop
        .iter()
        .enumerate()
        .filter_map(|(i, s)| full.find(s.as_str()).map(|p| (p + s.len(), p, i)))
        .min();
    let (expected, stop_at) = match best {
        Some((end, start, i)) => {
            let cut = if opts.include_stop_str_in_output {
                end
            } else {
                start
            };
            let k = complete_len
                .iter()
                .position(|&l| l >= end)
                .unwrap_or(ids.len());
            (&full[..cut], Some((k, i)))
        }
        None => (full.as_str(), None),
    };

    let mut s = TextStream::new(tok.clone(), &[], opts.clone()).unwrap();
    let mut deltas = Vec::new();
    let mut max_held = 0;
    for (k, &id) in ids.iter().enumerate() {
        let d = s.push(id);
        if !s.is_done() {
            max_held = max_held.max(complete_len[k] - s.text().len());
        }
        match stop_at {
            Some((at, _)) if k > at => assert_eq!(d, TextDelta::default(), "push {k} after stop"),
            Some((at, _)) if k == at => {}
            _ => {
                assert_eq!(d.stopped, None, "push {k}");
                let seen = &full[..complete_len[k]];
                let held = if opts.include_stop_str_in_output {
                    seen.len()
                } else {
                    held_from(seen, &opts.stop)
                };
                assert_eq!(
                    s.text(),
                    &seen[..held],
                    "push {k} holds back exactly a possible stop"
                );
            }
        }
        deltas.push(d);
    }
    let finish = s.finish();
    let run = Run {
        output: deltas
            .iter()
            .map(|d| d.text.as_str())
            .chain([finish.text.as_str()])
            .collect(),
        deltas,
        finish,
        max_held,
    };
    assert_eq!(run.output, expected, "stop {:?}", opts.stop);
    assert_eq!(s.text(), expected);
    assert_eq!(run.stop(), stop_at);
    assert_eq!(
        s.stop_match(),
        stop_at.map(|(_, i)| StopMatch { stop_index: i })
    );
    run
}

/// How many tokens `stop` spans in `ids`, if it occurs in their decoded text.
fn tokens_spanned(tok: &Tokenizer, ids: &[u32], stop: &str) -> usize {
    let text = tok.decode(ids, true);
    let start = text.find(stop).expect("stop occurs");
    let end = start + stop.len();
    let mut pos = 0;
    let mut n = 0;
    for &id in ids {
        let len = tok.token_bytes(id).map_or(0, <[u8]>::len);
        if pos < end && pos + len > start {
            n += 1;
        }
        pos += len;
    }
    n
}

const FOX: &str = "The quick brown fox jumps over the lazy dog.";

#[test]
fn stop_split_across_tokens_is_caught_and_never_leaks() {
    for (model, tok) in models() {
        let ids = tok.encode(FOX, false, false);
        for stop in ["k brown f", "umps over the la", "dog."] {
            if stop != "dog." {
                assert!(tokens_spanned(&tok, &ids, stop) >= 2, "{model}: {stop}");
            }
            let run = check(&tok, &ids, opts(&[stop]));
            let start = FOX.find(stop).unwrap();
            assert_eq!(run.output, &FOX[..start], "{model}");
            assert!(run.stop().is_some(), "{model}");
        }
    }
}

#[test]
fn partial_match_that_is_not_a_stop_is_emitted_in_full_and_in_order() {
    for (model, tok) in models() {
        let ids = tok.encode(FOX, false, false);
        let run = check(&tok, &ids, opts(&["brown cow", "the lazy cat"]));
        assert_eq!(run.output, FOX, "{model}");
        assert_eq!(run.stop(), None);
        // " brown" was held: the token that ends it emits no "brown", a later one does.
        let brown_end = FOX.find("brown").unwrap() + "brown".len();
        let mut pos = 0;
        let mut emitted = 0;
        let mut was_held = false;
        for (&id, d) in ids.iter().zip(&run.deltas) {
            pos += tok.token_bytes(id).map_or(0, <[u8]>::len);
            emitted += d.text.len();
            was_held |= pos >= brown_end && emitted < brown_end;
        }
        assert!(was_held, "{model}");
    }
}

#[test]
fn multibyte_stop_strings() {
    let text = "私は日本語を少し話します。🍕日本";
    for (model, tok) in models() {
        let ids = tok.encode(text, false, false);
        let run = check(&tok, &ids, opts(&["日本"]));
        assert_eq!(run.output, "私は", "{model}");
        let run = check(&tok, &ids, opts(&["🍕日", "話す"]));
        assert_eq!(run.output, "私は日本語を少し話します。", "{model}");
        assert_eq!(run.stop().map(|s| s.1), Some(0));
    }
    // Byte-fallback ids for every byte of "日本": the stop completes on the sixth byte token.
    let tok = gemma();
    let mut ids = tok.encode("a", false, false);
    ids.extend(
        "日本"
            .bytes()
            .map(|b| tok.id_of(&format!("<0x{b:02X}>")).unwrap()),
    );
    let run = check(&tok, &ids, opts(&["日本"]));
    assert_eq!(run.output, "a");
    assert_eq!(run.stop(), Some((ids.len() - 1, 0)));
    // SmolLM2 byte-level tokens cut the emoji's bytes across tokens.
    let tok = smollm();
    let ids = tok.encode("go 🚀🍕 now", false, false);
    assert!(tokens_spanned(&tok, &ids, "🍕") >= 2);
    let run = check(&tok, &ids, opts(&["🍕"]));
    assert_eq!(run.output, "go 🚀");
}

#[test]
fn stop_at_the_very_first_token() {
    for (model, tok) in models() {
        let ids = tok.encode(FOX, false, false);
        let first = tok.decode(&ids[..1], true);
        let run = check(&tok, &ids, opts(&[&first]));
        assert_eq!(run.stop(), Some((0, 0)), "{model}");
        assert_eq!(run.output, "");
        assert!(run.deltas.iter().all(|d| d.text.is_empty()));
        // The stop ends inside the first token: still nothing.
        let run = check(&tok, &ids, opts(&["Th"]));
        assert_eq!(run.stop(), Some((0, 0)), "{model}");
        assert_eq!(run.output, "");
    }
}

#[test]
fn earliest_completed_stop_wins_and_prefix_stops() {
    for (model, tok) in models() {
        let ids = tok.encode(FOX, false, false);
        let before_lazy = &FOX[..FOX.find("lazy").unwrap()];
        // One stop a prefix of the other: the shorter is complete first.
        let run = check(&tok, &ids, opts(&["lazy dog", "lazy"]));
        assert_eq!(
            (run.output.as_str(), run.stop().unwrap().1),
            (before_lazy, 1),
            "{model}"
        );
        let run = check(&tok, &ids, opts(&["lazy", "lazy dog"]));
        assert_eq!(
            (run.output.as_str(), run.stop().unwrap().1),
            (before_lazy, 0),
            "{model}"
        );
        // List order does not matter, text order does; a repeated stop matches the first time.
        let run = check(&tok, &ids, opts(&["dog", "fox", "he"]));
        assert_eq!(
            (run.output.as_str(), run.stop().unwrap().1),
            ("T", 2),
            "{model}"
        );
        // With the stop kept in the output.
        let o = TextStreamOptions {
            include_stop_str_in_output: true,
            ..opts(&["dog", "over"])
        };
        let run = check(&tok, &ids, o);
        assert_eq!(run.output, "The quick brown fox jumps over", "{model}");
    }
}

#[test]
fn special_tokens_are_skipped_by_default_and_can_be_stops_when_kept() {
    let tok = smollm();
    let mut ids = tok.encode("Hi there", false, false);
    let im_end = tok.id_of("<|im_end|>").unwrap();
    ids.push(im_end);
    ids.extend(tok.encode(" more", false, false));
    let run = check(&tok, &ids, opts(&["there more"]));
    assert_eq!(run.output, "Hi ");
    let o = TextStreamOptions {
        skip_special_tokens: false,
        ..opts(&["<|im_end|>"])
    };
    let run = check(&tok, &ids, o);
    assert_eq!(run.output, "Hi there");
}

/// SplitMix64: a deterministic generator, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Characters spelled out byte by byte in random generations.
const CHARS: [&str; 10] = [
    "日", "本", "語", "🍕", "🚀", "😀", "é", "한", "\u{A000}", "ß",
];

/// Random generations: random vocabulary ids (special ones included), whole words, and
/// characters spelled out byte by byte with single-byte tokens (sometimes cut short, which makes
/// invalid UTF-8 that must come out as U+FFFD exactly where `decode` puts it).
fn random_ids(tok: &Tokenizer, rng: &mut Rng, byte_ids: &[Option<u32>; 256]) -> Vec<u32> {
    const CHARS: [&str; 10] = [
        "日", "本", "語", "🍕", "🚀", "😀", "é", "한", "\u{A000}", "ß",
    ];
    const WORDS: [&str; 6] = [" the", " lazy", "日本", " 🚀", "\n", " dog"];
    let mut ids = Vec::new();
    for _ in 0..1 + rng.below(30) {
        match rng.below(4) {
            0 => ids.push(rng.below(tok.vocab_size()) as u32),
            1 => ids.extend(tok.encode(WORDS[rng.below(WORDS.len())], false, false)),
            _ => {
                let c = CHARS[rng.below(CHARS.len())].as_bytes();
                let n = if rng.below(8) == 0 {
                    rng.below(c.len())
                } else {
                    c.len()
                };
                ids.extend(c[..n].iter().filter_map(|&b| byte_ids[b as usize]));
            }
        }
    }
    ids
}

/// For each byte, a token whose text is exactly that byte.
fn single_byte_ids(tok: &Tokenizer) -> [Option<u32>; 256] {
    let mut out = [None; 256];
    for id in 0..tok.vocab_size() as u32 {
        if let Some(&[b]) = tok.token_bytes(id)
            && !tok.token_type(id).is_some_and(TokenType::is_special)
        {
            out[b as usize].get_or_insert(id);
        }
    }
    out
}

/// A random substring of `text`, up to 6 characters.
fn random_substring(text: &str, rng: &mut Rng) -> Option<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return None;
    }
    let start = rng.below(chars.len());
    let len = 1 + rng.below(6.min(chars.len() - start));
    Some(chars[start..start + len].iter().collect())
}

#[test]
fn random_sequences_match_the_oracle() {
    for (model, tok) in models() {
        let byte_ids = single_byte_ids(&tok);
        for b in CHARS.iter().flat_map(|c| c.bytes()) {
            assert!(
                byte_ids[b as usize].is_some(),
                "{model}: no token for byte {b:#x}"
            );
        }
        let mut rng = Rng(0x5EED ^ tok.vocab_size() as u64);
        // How often the interesting paths ran, so the generator cannot silently go dull.
        let (mut replaced, mut held, mut stopped_early) = (0, 0, 0);
        for case in 0..300 {
            let ids = random_ids(&tok, &mut rng, &byte_ids);
            let skip = rng.below(4) != 0;
            // No stops: the deltas add up to decode.
            let o = TextStreamOptions {
                skip_special_tokens: skip,
                ..Default::default()
            };
            let run = check(&tok, &ids, o);
            assert_eq!(run.output, tok.decode(&ids, skip), "{model} case {case}");
            let text = run.output;
            replaced += usize::from(text.contains('\u{FFFD}'));

            // Near misses: a substring with a character the text lacks at the end. Partial
            // matches are held and then released, and the output is still the whole text.
            let mut stop = Vec::new();
            for _ in 0..1 + rng.below(3) {
                if let Some(s) = random_substring(&text, &mut rng) {
                    stop.push(format!("{s}\u{E000}"));
                }
            }
            let o = TextStreamOptions {
                stop: stop.clone(),
                skip_special_tokens: skip,
                include_stop_str_in_output: false,
            };
            let run = check(&tok, &ids, o);
            if !text.contains('\u{E000}') {
                assert_eq!(run.output, text, "{model} case {case}");
            }
            held += usize::from(run.max_held > 0);

            // Stops that occur, mixed with near misses, in both output modes.
            for _ in 0..1 + rng.below(3) {
                if let Some(s) = random_substring(&text, &mut rng) {
                    stop.insert(rng.below(stop.len() + 1), s);
                }
            }
            let o = TextStreamOptions {
                stop,
                skip_special_tokens: skip,
                include_stop_str_in_output: rng.below(3) == 0,
            };
            let run = check(&tok, &ids, o);
            stopped_early += usize::from(run.stop().is_some_and(|(k, _)| k + 1 < ids.len()));
        }
        assert!(
            replaced >= 10 && held >= 100 && stopped_early >= 100,
            "{model}: {replaced} with U+FFFD, {held} held back, {stopped_early} stopped early"
        );
    }
}

#[test]
fn text_stream_moves_into_another_thread() {
    let tok = gemma();
    let ids = tok.encode("ok 日本", false, false);
    let mut s = TextStream::new(tok.clone(), &[], opts(&["本"])).unwrap();
    let out = std::thread::spawn(move || {
        for id in ids {
            s.push(id);
        }
        s.text().to_string()
    })
    .join()
    .unwrap();
    assert_eq!(out, "ok 日");
}
