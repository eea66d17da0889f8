//! The rules of an embedding request, one place for `/v1/embeddings`, TEI's `/embed` and
//! `pagoda embed`: the sentence-transformers prompt put before each text, tokenization, ids
//! inside the vocabulary, the model's length (or truncation from either end), and `dimensions`
//! against the model's Matryoshka lengths. Each API maps its own fields onto [`EmbedOptions`].
//! [`fit`] (vocabulary, truncation, length) is also what `score_pairs.rs` holds a pair to.

use pagoda_protocol::Prompt;

use crate::model::embedder::{EmbedJob, Embedder};
use crate::prepare::validation_error::ValidationError;

/// What becomes of an input longer than the model takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Truncate {
    /// Refused (400 naming both lengths).
    No,
    /// Cut to its first `n` tokens (TEI's default direction).
    KeepFirst(usize),
    /// Cut to its last `n` tokens (vLLM's `truncate_prompt_tokens`).
    KeepLast(usize),
}

/// An embedding request in the terms every API shares.
pub struct EmbedOptions<'a> {
    pub input: &'a Prompt,
    /// The input's field name in this API (`input`, `inputs`), for refusals.
    pub input_field: &'static str,
    pub dimensions: Option<i64>,
    pub truncate: Truncate,
    /// How a client of this API asks for truncation, said when an input is too long.
    pub truncate_hint: &'static str,
    /// A prompt of the model's `config_sentence_transformers.json`, by name; `None`: the
    /// model's default prompt, if it has one.
    pub prompt_name: Option<&'a str>,
    /// `None`: as the model does (its Normalize module).
    pub normalize: Option<bool>,
}

/// Checks and tokenizes `o` for the model `e`.
pub fn check(e: &Embedder, o: &EmbedOptions) -> Result<EmbedJob, ValidationError> {
    let field = o.input_field;
    let dimensions = match o.dimensions {
        None => None,
        Some(_) if e.matryoshka.is_empty() => {
            return Err(ValidationError::unsupported(
                "dimensions",
                format!(
                    "this model was not trained for shortened embeddings; its embeddings have {} dimensions",
                    e.dim
                ),
            ));
        }
        Some(d) if d > 0 && e.matryoshka.contains(&(d as usize)) => Some(d as usize),
        Some(d) => {
            return Err(ValidationError::Rule {
                field: "dimensions".to_owned(),
                message: format!(
                    "`dimensions` must be one of {:?} for this model, got {d}",
                    e.matryoshka
                ),
            });
        }
    };
    let prompt = prompt_text(e, o.prompt_name)?;
    let is_text = matches!(o.input, Prompt::Text(_) | Prompt::Texts(_));
    if o.prompt_name.is_some() && !is_text {
        return Err(ValidationError::unsupported(
            "prompt_name",
            "a prompt goes before text inputs; token ids are embedded as given",
        ));
    }
    let encode = |text: &str| -> Result<Vec<u32>, ValidationError> {
        let tokenized = match prompt {
            Some(p) => e.tokenizer.encode(&format!("{p}{text}")),
            None => e.tokenizer.encode(text),
        };
        tokenized.map_err(|err| ValidationError::rule(field, format!("cannot tokenize: {err}")))
    };
    let empty_text = match o.input {
        Prompt::Text(t) => t.is_empty(),
        Prompt::Texts(ts) => ts.iter().any(String::is_empty),
        _ => false,
    };
    if empty_text {
        return Err(ValidationError::Empty { field });
    }
    let mut seqs = match o.input {
        Prompt::Text(t) => vec![encode(t)?],
        Prompt::Texts(ts) => encode_all(e, prompt, ts, field)?,
        Prompt::Tokens(ids) => vec![ids.clone()],
        Prompt::TokenBatches(b) => b.clone(),
    };
    if seqs.is_empty() || seqs.iter().any(Vec::is_empty) {
        return Err(ValidationError::Empty { field });
    }
    for (index, s) in seqs.iter_mut().enumerate() {
        fit(e, s, o.truncate, field, index, o.truncate_hint)?;
    }
    Ok(EmbedJob {
        seqs,
        dimensions,
        normalize: o.normalize.unwrap_or(e.normalize),
    })
}

/// The ids of each of `texts` (after `prompt`), tokenized side by side on the compute
/// threads: a batch of documents is otherwise a serial wait before the model runs.
fn encode_all(
    e: &Embedder,
    prompt: Option<&str>,
    texts: &[String],
    field: &'static str,
) -> Result<Vec<Vec<u32>>, ValidationError> {
    let prompted: Vec<String>;
    let refs: Vec<&str> = match prompt {
        Some(p) => {
            prompted = texts.iter().map(|t| format!("{p}{t}")).collect();
            prompted.iter().map(String::as_str).collect()
        }
        None => texts.iter().map(String::as_str).collect(),
    };
    let threads = pagoda_kernels::parallel::num_threads();
    e.tokenizer
        .encode_many(&refs, threads)
        .into_iter()
        .map(|r| r.map_err(|err| ValidationError::rule(field, format!("cannot tokenize: {err}"))))
        .collect()
}

/// Refuses ids outside the model's vocabulary, cuts `s` as `truncate` says, then refuses it
/// if still longer than the model takes (400 naming `field` #`index`, both lengths and
/// `truncate_hint`): what the encoder requires of every sequence it runs.
pub fn fit(
    e: &Embedder,
    s: &mut Vec<u32>,
    truncate: Truncate,
    field: &'static str,
    index: usize,
    truncate_hint: &'static str,
) -> Result<(), ValidationError> {
    if let Some(&t) = s.iter().find(|&&t| t as usize >= e.vocab_size) {
        return Err(ValidationError::invalid_value(
            field,
            "token ids inside the model's vocabulary",
            t,
        ));
    }
    match truncate {
        Truncate::KeepFirst(k) if s.len() > k => s.truncate(k),
        Truncate::KeepLast(k) if s.len() > k => {
            s.drain(..s.len() - k);
        }
        _ => {}
    }
    if s.len() > e.max_seq_len {
        return Err(ValidationError::TooLong {
            field,
            index,
            tokens: s.len(),
            max: e.max_seq_len,
            truncate_hint,
        });
    }
    Ok(())
}

impl Truncate {
    /// vLLM's `truncate_prompt_tokens`: keep the last `k` tokens (`-1`: the model's maximum).
    pub fn from_vllm(k: Option<i64>, e: &Embedder) -> Result<Self, ValidationError> {
        match k {
            None => Ok(Self::No),
            Some(-1) => Ok(Self::KeepLast(e.max_seq_len)),
            Some(k) if k >= 1 && k as usize <= e.max_seq_len => Ok(Self::KeepLast(k as usize)),
            Some(k) => Err(ValidationError::Rule {
                field: "truncate_prompt_tokens".to_owned(),
                message: format!(
                    "`truncate_prompt_tokens` must be -1 or 1 to {} (the model's maximum), got {k}",
                    e.max_seq_len
                ),
            }),
        }
    }
}

/// The text of the prompt `name` (or of the model's default when `None`).
fn prompt_text<'e>(
    e: &'e Embedder,
    name: Option<&str>,
) -> Result<Option<&'e str>, ValidationError> {
    let (name, asked) = match (name, &e.default_prompt_name) {
        (Some(n), _) => (n, true),
        (None, Some(d)) => (d.as_str(), false),
        (None, None) => return Ok(None),
    };
    if !e.prompt_in_pooling {
        // The model's default cannot be honoured either; the input goes as sent.
        return if asked {
            Err(ValidationError::unsupported(
                "prompt_name",
                "this model's pooling leaves the prompt's tokens out, which pagoda does not do",
            ))
        } else {
            Ok(None)
        };
    }
    match e.prompts.iter().find(|(n, _)| n == name) {
        Some((_, text)) => Ok(Some(text.as_str())),
        None if e.prompts.is_empty() => Err(ValidationError::unsupported(
            "prompt_name",
            "this model has no prompts (its config_sentence_transformers.json lists none)",
        )),
        None => {
            let names: Vec<&str> = e.prompts.iter().map(|(n, _)| n.as_str()).collect();
            Err(ValidationError::rule(
                "prompt_name",
                format!(
                    "this model has no prompt named {name:?}; its prompts are {}",
                    names.join(", ")
                ),
            ))
        }
    }
}
