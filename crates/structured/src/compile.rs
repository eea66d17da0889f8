//! A constraint compiled once: the llguidance grammar for it and a fresh parser built by the
//! model's `ParserFactory` under explicit `ParserLimits`, which every sequence's matcher
//! deep-clones instead of recompiling. Compiling also rehearses the first step of generation,
//! so a constraint beyond the parser's limits fails here (`TooLarge`), not while sampling.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use llguidance::api::{GrammarInit, ParserLimits, TopLevelGrammar};
use llguidance::earley::CSymIdx;
use llguidance::{Logger, Matcher, ParserFactory, TokenParser};
use serde_json::{Value, json};
use toktrie::InferenceCapabilities;

use crate::{Constraint, ConstraintMatcher, StructuredError};

/// A validated constraint, ready to start matchers.
pub struct CompiledConstraint {
    constraint: Constraint,
    /// The parser in its start state. `TokenParser` is `Send` but not `Sync`; the lock is held
    /// only while cloning it, once per sequence.
    parser: Mutex<TokenParser>,
    compile_time: Duration,
}

impl std::fmt::Debug for CompiledConstraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledConstraint")
            .field("kind", &self.constraint.kind())
            .field("compile_time", &self.compile_time)
            .finish()
    }
}

impl CompiledConstraint {
    pub(crate) fn compile(
        factory: &ParserFactory,
        constraint: &Constraint,
    ) -> Result<Self, StructuredError> {
        let started = std::time::Instant::now();
        let grammar = top_level_grammar(constraint)?;
        let limits = parser_limits();
        // A choice list is one rule of one alternative per choice: too long a list is refused
        // before building a parser for it (20,000 choices take ~0.6 s to build).
        if let Constraint::Choice(choices) = constraint
            && choices.len() + 1 > limits.max_items_in_row
        {
            return Err(too_wide(
                constraint,
                &limits,
                format!("{} choices", choices.len()),
            ));
        }
        let parser = factory
            .create_parser_from_init_ext(
                GrammarInit::Serialized(grammar),
                Logger::new(factory.buffer_log_level(), factory.stderr_log_level()),
                // What `ParserFactory::new_simple` (outputs.rs) gives the factory.
                InferenceCapabilities::default(),
                limits.clone(),
            )
            .map_err(|e| compile_error(constraint, &limits, Stage::Build, &e.to_string()))?;
        check_widest_rule(constraint, &parser, &limits)?;
        rehearse_first_step(&parser)
            .map_err(|msg| compile_error(constraint, &limits, Stage::FirstStep, &msg))?;
        Ok(Self {
            constraint: constraint.clone(),
            parser: Mutex::new(parser),
            compile_time: started.elapsed(),
        })
    }

    pub fn constraint(&self) -> &Constraint {
        &self.constraint
    }

    /// How long llguidance took to compile it.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// A matcher in the start state, for one sequence.
    pub fn matcher(&self) -> ConstraintMatcher {
        let parser = match self.parser.lock() {
            Ok(p) => p.deep_clone(),
            Err(poisoned) => poisoned.into_inner().deep_clone(),
        };
        ConstraintMatcher::new(parser)
    }
}

/// The parser's limits, pinned here rather than left to llguidance's defaults (the values are
/// llguidance 1.9's) so that a `TooLarge` error can name the one exceeded, with its value.
fn parser_limits() -> ParserLimits {
    ParserLimits {
        max_items_in_row: 2000,
        initial_lexer_fuel: 1_000_000,
        step_lexer_fuel: 200_000,
        step_max_items: 50_000,
        max_lexer_states: 250_000,
        max_grammar_size: 500_000,
        precompute_large_lexemes: true,
        // Verbose errors append the parser state and the whole grammar: a hostile grammar's
        // 400 (or a mid-stream error event) would be as large as the grammar itself.
        verbose_errors: false,
    }
}

/// Where compilation failed: building the parser, or rehearsing the first step.
#[derive(Clone, Copy)]
enum Stage {
    Build,
    FirstStep,
}

/// Refuses a grammar whose widest reachable rule cannot fit in a parser row. A row that
/// predicts a rule holds one Earley item per alternative plus the item that predicted it, and
/// llguidance fails the step that leaves the parser in a row of more than `max_items_in_row`
/// items; the rehearsal below reaches only the first rows, this finds the rule at any depth.
fn check_widest_rule(
    c: &Constraint,
    parser: &TokenParser,
    limits: &ParserLimits,
) -> Result<(), StructuredError> {
    let g = parser.parser.grammar();
    let mut seen = HashSet::new();
    let mut stack = vec![g.start()];
    let mut widest: Option<(usize, CSymIdx)> = None;
    while let Some(sym) = stack.pop() {
        if !seen.insert(sym) {
            continue;
        }
        let rules = g.rules_of(sym);
        if widest.is_none_or(|(n, _)| rules.len() > n) {
            widest = Some((rules.len(), sym));
        }
        for &rule in rules {
            stack.extend(g.rule_rhs(rule).0.iter().copied());
        }
    }
    match widest {
        Some((n, sym)) if n + 1 > limits.max_items_in_row => {
            let detail = format!("rule `{}` has {n} alternatives", g.sym_data(sym).name);
            Err(too_wide(c, limits, detail))
        }
        _ => Ok(()),
    }
}

/// `TooLarge` for a rule with too many alternatives (see `check_widest_rule`).
fn too_wide(c: &Constraint, limits: &ParserLimits, detail: String) -> StructuredError {
    StructuredError::TooLarge {
        what: kind_name(c),
        limit: "max_items_in_row",
        value: limits.max_items_in_row as u64,
        detail: format!(
            "{detail}, at most {} fit",
            limits.max_items_in_row.saturating_sub(1)
        ),
    }
}

/// Runs a copy of `parser` through what the first sampling step does: the start mask, one
/// token, the next mask. Most limits are checked only there, not while building: the lexer's
/// fuel and states and `step_max_items` while computing a mask, `max_items_in_row` when a token
/// is applied (on the row it leaves the parser in; several moderately wide rules predicted
/// together overflow it too). Met while sampling, they would fail a request already answered
/// 200: an error event first thing in its stream, or a 500.
///
/// The token is the shortest the start mask allows: one byte rarely finishes a lexeme, so the
/// parser stays in (and checks) the start row. Errors of the start mask fail the compile
/// whatever they are (every sequence would meet them); after the token only limit errors do,
/// since another token could have been fine.
fn rehearse_first_step(parser: &TokenParser) -> Result<(), String> {
    let trie = parser.token_env.tok_trie();
    let mut m = Matcher::new(Ok(parser.deep_clone()));
    let mask = m.compute_mask_or_eos().map_err(|e| e.to_string())?;
    let shortest = mask
        .iter()
        .filter(|&t| !trie.is_special_token(t) && trie.token_len(t) > 0)
        .min_by_key(|&t| trie.token_len(t));
    let Some(token) = shortest else {
        return Ok(()); // only EOS is allowed: nothing more to rehearse
    };
    match m
        .consume_token(token)
        .and_then(|()| m.compute_mask_or_eos())
    {
        Err(e) if is_limit_message(&e.to_string()) => Err(e.to_string()),
        _ => Ok(()),
    }
}

/// llguidance reports an exceeded limit only as text. These fragments of its messages
/// (llguidance 1.9) name the limit; a wording they miss still fails the compile, as an
/// invalid constraint of its kind.
const LIMIT_MESSAGES: &[(&str, &str)] = &[
    ("Current row has", "max_items_in_row"),
    ("Too many items (limit", "step_max_items"),
    ("too many states", "max_lexer_states"),
    (
        "grammar size (number of symbols) too big",
        "max_grammar_size",
    ),
    (
        "initial lexer configuration (grammar) too big",
        "initial_lexer_fuel",
    ),
    (
        "fuel exhausted when checking relevance",
        "initial_lexer_fuel",
    ),
    ("maximum relevance check fuel", "initial_lexer_fuel"),
    ("lexer precomputation failed", "initial_lexer_fuel"),
    ("DNF too large", "initial_lexer_fuel"),
    // Lexer fuel: spent building the lexer, or computing a mask.
    ("too many expressions constructed", "lexer_fuel"),
];

fn is_limit_message(msg: &str) -> bool {
    LIMIT_MESSAGES.iter().any(|(frag, _)| msg.contains(frag))
}

/// A compile failure: `TooLarge` when `msg` is an exceeded limit, else the kind's own error.
fn compile_error(
    c: &Constraint,
    limits: &ParserLimits,
    stage: Stage,
    msg: &str,
) -> StructuredError {
    // Non-verbose errors end in this marker line; it means nothing to a client.
    let detail = msg.trim_end().trim_end_matches("<non-verbose/>").trim_end();
    let Some(&(_, limit)) = LIMIT_MESSAGES
        .iter()
        .find(|(frag, _)| detail.contains(frag))
    else {
        return kind_error(c, detail.to_owned());
    };
    let (limit, value) = match (limit, stage) {
        ("max_items_in_row", _) => (limit, limits.max_items_in_row as u64),
        ("step_max_items", _) => (limit, limits.step_max_items as u64),
        ("max_lexer_states", _) => (limit, limits.max_lexer_states as u64),
        ("max_grammar_size", _) => (limit, limits.max_grammar_size as u64),
        ("lexer_fuel", Stage::FirstStep) => ("step_lexer_fuel", limits.step_lexer_fuel),
        _ => ("initial_lexer_fuel", limits.initial_lexer_fuel),
    };
    StructuredError::TooLarge {
        what: kind_name(c),
        limit,
        value,
        detail: detail.to_owned(),
    }
}

/// The constraint kind as the user wrote it.
fn kind_name(c: &Constraint) -> &'static str {
    match c {
        Constraint::JsonObject | Constraint::JsonSchema(_) => "JSON schema",
        Constraint::Regex(_) => "regex",
        Constraint::Choice(_) => "choice list",
        Constraint::Grammar(_) => "grammar",
    }
}

/// The error of the constraint's own kind, so the message names what the user sent.
fn kind_error(c: &Constraint, msg: String) -> StructuredError {
    match c {
        Constraint::JsonObject | Constraint::JsonSchema(_) => {
            StructuredError::InvalidJsonSchema(msg)
        }
        Constraint::Regex(_) => StructuredError::InvalidRegex(msg),
        Constraint::Choice(_) => StructuredError::InvalidChoice(msg),
        Constraint::Grammar(_) => StructuredError::InvalidGrammar(msg),
    }
}

/// Compact JSON separators and no free whitespace: with llguidance's default
/// `whitespace_flexible: true`, sampling can run away on whitespace (NOTES.md gotcha 3).
fn x_guidance() -> Value {
    json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "})
}

/// The llguidance grammar for a constraint.
fn top_level_grammar(c: &Constraint) -> Result<TopLevelGrammar, StructuredError> {
    Ok(match c {
        Constraint::JsonObject => {
            TopLevelGrammar::from_json_schema(json!({"type": "object", "x-guidance": x_guidance()}))
        }
        Constraint::JsonSchema(text) => {
            let schema: Value = serde_json::from_str(text)
                .map_err(|e| StructuredError::InvalidJsonSchema(format!("not JSON: {e}")))?;
            let schema = match schema {
                Value::Object(mut m) => {
                    // A schema's own x-guidance options win over ours.
                    m.entry("x-guidance").or_insert_with(x_guidance);
                    Value::Object(m)
                }
                Value::Bool(true) => json!({"x-guidance": x_guidance()}),
                Value::Bool(false) => {
                    return Err(StructuredError::InvalidJsonSchema(
                        "the schema `false` matches nothing".into(),
                    ));
                }
                other => {
                    return Err(StructuredError::InvalidJsonSchema(format!(
                        "a schema is an object or a boolean, not {}",
                        json_type_name(&other)
                    )));
                }
            };
            TopLevelGrammar::from_json_schema(schema)
        }
        Constraint::Regex(rx) => TopLevelGrammar::from_regex(rx),
        Constraint::Choice(choices) => {
            if choices.is_empty() {
                return Err(StructuredError::InvalidChoice("the list is empty".into()));
            }
            if let Some(i) = choices.iter().position(|c| c.is_empty()) {
                return Err(StructuredError::InvalidChoice(format!(
                    "choice {i} is the empty string"
                )));
            }
            // Lark string literals take JSON escapes, so serde_json quotes each choice safely.
            let alts: Vec<String> = choices
                .iter()
                .map(|c| Value::String(c.clone()).to_string())
                .collect();
            TopLevelGrammar::from_lark(format!("start: {}\n", alts.join(" | ")))
        }
        Constraint::Grammar(lark) => {
            if lark.trim().is_empty() {
                return Err(StructuredError::InvalidGrammar(
                    "the grammar is empty".into(),
                ));
            }
            TopLevelGrammar::from_lark(lark.clone())
        }
    })
}

fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_messages_become_too_large_naming_the_limit() {
        let limits = parser_limits();
        let choice = Constraint::Choice(vec!["a".into()]);
        let msg = "Current row has 2501 items; max is 2000; consider making your grammar \
                   left-recursive if it's right-recursive\n<non-verbose/>";
        let e = compile_error(&choice, &limits, Stage::FirstStep, msg);
        assert_eq!(
            e,
            StructuredError::TooLarge {
                what: "choice list",
                limit: "max_items_in_row",
                value: 2000,
                detail: msg.trim_end_matches("\n<non-verbose/>").to_owned(),
            }
        );
        let text = e.to_string();
        assert!(text.starts_with("choice list too large for the parser: Current row"));
        assert!(
            text.ends_with("(limit `max_items_in_row` = 2000)"),
            "{text}"
        );
        // Lexer fuel is the build's or the mask's, by stage.
        let grammar = Constraint::Grammar("start: \"a\"\n".into());
        let fuel = "lexer error: too many expressions constructed";
        for (stage, want) in [
            (Stage::Build, "initial_lexer_fuel"),
            (Stage::FirstStep, "step_lexer_fuel"),
        ] {
            match compile_error(&grammar, &limits, stage, fuel) {
                StructuredError::TooLarge { limit, .. } => assert_eq!(limit, want),
                other => panic!("{other:?}"),
            }
        }
        // Anything else is the kind's own error.
        assert_eq!(
            compile_error(&grammar, &limits, Stage::Build, "unknown rule foo"),
            StructuredError::InvalidGrammar("unknown rule foo".into())
        );
    }
}
