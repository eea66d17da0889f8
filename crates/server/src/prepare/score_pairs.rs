//! The rules of a scoring request, one place for `/v1/rerank`, `/v1/score` and TEI's `/rerank`:
//! how the texts pair up (1:1, 1:N, N:N), and per kind of model: a bi-encoder's texts go through
//! the embedding rules (`embed.rs`; the model's `query` and `document` prompts when it has
//! them), a cross-encoder's pairs are tokenized together and fitted to the model's length.

use crate::model::embedder::Embedder;
use crate::model::pair_scores::ScoreJob;
use crate::prepare::embed::{self, EmbedOptions, Truncate};
use crate::prepare::validation_error::ValidationError;
use pagoda_protocol::Prompt;

/// A scoring request in the terms every API shares.
pub struct PairOptions<'a> {
    /// The first texts (queries) and their field's name in this API.
    pub first: &'a [String],
    pub first_field: &'static str,
    /// The second texts (documents).
    pub second: &'a [String],
    pub second_field: &'static str,
    /// A bi-encoder's texts are cut as embeddings are; a cross-encoder's pair loses the end of
    /// its second text (its closing special token kept) down to the length this names.
    pub truncate: Truncate,
    pub truncate_hint: &'static str,
}

/// Checks and tokenizes `o` for the model `e`.
pub fn check(e: &Embedder, o: &PairOptions) -> Result<ScoreJob, ValidationError> {
    let pairs = pairing(o)?;
    if !e.cross_encoder {
        let texts = |texts: &[String], field, prompt| {
            embed::check(
                e,
                &EmbedOptions {
                    input: &Prompt::Texts(texts.to_vec()),
                    input_field: field,
                    dimensions: None,
                    truncate: o.truncate,
                    truncate_hint: o.truncate_hint,
                    prompt_name: model_prompt(e, prompt),
                    normalize: Some(true),
                },
            )
        };
        let mut job = texts(o.first, o.first_field, "query")?;
        job.seqs
            .extend(texts(o.second, o.second_field, "document")?.seqs);
        return Ok(ScoreJob::Cosine {
            job,
            firsts: o.first.len(),
            pairs,
        });
    }
    let mut seqs = Vec::with_capacity(pairs.len());
    let mut second = Vec::with_capacity(pairs.len());
    for (i, j) in pairs {
        let (a, b) = (&o.first[i], &o.second[j]);
        let (mut ids, from) = e.tokenizer.encode_pair(a, b).map_err(|err| {
            ValidationError::rule(o.second_field, format!("cannot tokenize: {err}"))
        })?;
        let limit = match o.truncate {
            Truncate::No => None,
            Truncate::KeepFirst(k) | Truncate::KeepLast(k) => Some(k),
        };
        if let Some(k) = limit
            && ids.len() > k
        {
            // The query and at least one token of the document stay, with the closing token.
            if from + 2 > k {
                return Err(ValidationError::TooLong {
                    field: o.first_field,
                    index: i,
                    tokens: from,
                    max: k,
                    truncate_hint: o.truncate_hint,
                });
            }
            let last = ids[ids.len() - 1];
            ids.truncate(k - 1);
            ids.push(last);
        }
        embed::fit(
            e,
            &mut ids,
            Truncate::No,
            o.second_field,
            j,
            o.truncate_hint,
        )?;
        seqs.push(ids);
        second.push(from);
    }
    Ok(ScoreJob::Cross { seqs, second })
}

/// The pairs `(first, second)` of `o`: one first text with every second one, or the two lists
/// in order.
fn pairing(o: &PairOptions) -> Result<Vec<(usize, usize)>, ValidationError> {
    let empty = |field| ValidationError::Empty { field };
    if o.first.is_empty() {
        return Err(empty(o.first_field));
    }
    if o.second.is_empty() {
        return Err(empty(o.second_field));
    }
    if o.first.iter().any(String::is_empty) {
        return Err(empty(o.first_field));
    }
    if o.second.iter().any(String::is_empty) {
        return Err(empty(o.second_field));
    }
    match (o.first.len(), o.second.len()) {
        (1, n) => Ok((0..n).map(|j| (0, j)).collect()),
        (m, n) if m == n => Ok((0..n).map(|i| (i, i)).collect()),
        (m, n) => Err(ValidationError::rule(
            o.second_field,
            format!(
                "`{}` has {m} texts and `{}` {n}: give one `{}` for all, or as many as `{}`",
                o.first_field, o.second_field, o.first_field, o.second_field
            ),
        )),
    }
}

/// `name` when the model has a usable prompt of that name (EmbeddingGemma's `query` and
/// `document`), else `None`: the model's default prompt, if any.
fn model_prompt<'e>(e: &'e Embedder, name: &str) -> Option<&'e str> {
    e.prompts
        .iter()
        .find(|(n, _)| n == name && e.prompt_in_pooling)
        .map(|(n, _)| n.as_str())
}
