//! The model catalog (`scripts/model-catalog.txt`, embedded here so the binary works outside a
//! checkout): the names users type for the models pagoda fetches, where each lands in the model
//! directory, and the author's recommended sampling. `scripts/fetch-models.sh` reads the same file.

use std::sync::OnceLock;

use crate::generation_config::{DefaultsSource, SamplingDefaults};

/// The catalog file's text, as shipped.
pub const CATALOG_TEXT: &str = include_str!("../../../scripts/model-catalog.txt");

/// What a catalog model is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    /// A GGUF file for completions and chat (fetched by default).
    Generate,
    /// A sentence-transformers directory for embeddings (fetched only when named).
    Embed,
}

impl Task {
    pub fn name(self) -> &'static str {
        match self {
            Task::Generate => "generate",
            Task::Embed => "embed",
        }
    }
}

/// One catalog line.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub name: String,
    /// Other names accepted for it (the old `fetch-models.sh` names).
    pub aliases: Vec<String>,
    pub task: Task,
    /// The file (generate) or directory (embed) inside the model directory.
    pub path: String,
    pub sha256: String,
    /// The recommended sampling, `source` naming where it was published.
    pub sampling: SamplingDefaults,
}

impl Entry {
    /// Whether `name` is this entry's name or one of its aliases.
    pub fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.iter().any(|a| a == name)
    }
}

/// A catalog line that does not parse.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("model catalog line {line}: {message}")]
pub struct CatalogError {
    pub line: usize,
    pub message: String,
}

/// The parsed catalog, in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Catalog {
    pub entries: Vec<Entry>,
}

/// Fields of a line: name|aliases|task|path|sha256|packages|parts|sampling|sampling source.
const FIELDS: usize = 9;

impl Catalog {
    /// Parses catalog text: `#` lines and blank lines are skipped.
    pub fn parse(text: &str) -> Result<Self, CatalogError> {
        let mut entries: Vec<Entry> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let err = |message: String| CatalogError { line, message };
            if raw.trim().is_empty() || raw.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = raw.split('|').collect();
            if f.len() != FIELDS {
                return Err(err(format!("{} fields, expected {FIELDS}", f.len())));
            }
            let task = match f[2] {
                "generate" => Task::Generate,
                "embed" => Task::Embed,
                other => return Err(err(format!("task `{other}` (generate or embed)"))),
            };
            let source = if f[7].is_empty() {
                DefaultsSource::None
            } else {
                DefaultsSource::Catalog(f[8].to_owned())
            };
            let sampling = SamplingDefaults::from_spec(f[7], source).map_err(err)?;
            let entry = Entry {
                name: f[0].to_owned(),
                aliases: f[1]
                    .split(',')
                    .filter(|a| !a.is_empty())
                    .map(str::to_owned)
                    .collect(),
                task,
                path: f[3].to_owned(),
                sha256: f[4].to_owned(),
                sampling,
            };
            if entry.name.is_empty() || entry.path.is_empty() {
                return Err(err("empty name or path".to_owned()));
            }
            // A name must mean one model.
            let names = std::iter::once(&entry.name).chain(&entry.aliases);
            for n in names {
                if entries.iter().any(|e| e.answers_to(n)) {
                    return Err(err(format!("`{n}` names two models")));
                }
            }
            entries.push(entry);
        }
        Ok(Self { entries })
    }

    /// The shipped catalog. Its text is checked by the unit tests, so a parse failure here
    /// cannot ship; it would read as an empty catalog rather than stop the server.
    pub fn builtin() -> &'static Catalog {
        static CATALOG: OnceLock<Catalog> = OnceLock::new();
        CATALOG.get_or_init(|| Catalog::parse(CATALOG_TEXT).unwrap_or_default())
    }

    /// The entry a user's name (or alias) means.
    pub fn find(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.answers_to(name))
    }

    /// The entry whose file or directory is named `file_name`.
    pub fn by_path(&self, file_name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.path == file_name)
    }

    /// The names, for "known: ..." messages.
    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.name.as_str()).collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_catalog_parses_with_its_names_and_aliases() {
        let c = Catalog::parse(CATALOG_TEXT).expect("scripts/model-catalog.txt parses");
        assert_eq!(&c, Catalog::builtin());
        for (name, path) in [
            (
                "qwen2.5-coder:0.5b",
                "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            ),
            ("qwen2.5-coder", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
            (
                "qwen2.5-coder:1.5b",
                "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            ),
            (
                "qwen2.5-coder-1.5b",
                "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            ),
            ("smollm2:135m", "SmolLM2-135M-Instruct.Q4_1.gguf"),
            ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
            ("gemma3:270m", "gemma-3-270m-q4_k_m.gguf"),
            ("gemma3", "gemma-3-270m-q4_k_m.gguf"),
            ("all-minilm", "all-MiniLM-L6-v2"),
            ("minilm", "all-MiniLM-L6-v2"),
            ("embeddinggemma", "embeddinggemma-300m"),
        ] {
            assert_eq!(c.find(name).map(|e| e.path.as_str()), Some(path), "{name}");
        }
        assert_eq!(c.find("all-minilm").map(|e| e.task), Some(Task::Embed));
        assert!(c.find("nonsense").is_none());
    }

    #[test]
    fn sampling_comes_with_its_source_and_only_where_published() {
        let c = Catalog::builtin();
        let qwen = &c
            .by_path("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
            .unwrap()
            .sampling;
        assert_eq!(qwen.temperature, Some(0.7));
        assert_eq!(qwen.top_p, Some(0.8));
        assert_eq!(qwen.top_k, Some(20));
        assert_eq!(
            qwen.source,
            DefaultsSource::Catalog(
                "Qwen/Qwen2.5-Coder-0.5B-Instruct generation_config.json".into()
            )
        );
        let smol = &c.find("smollm2").unwrap().sampling;
        assert!(smol.is_empty());
        assert_eq!(smol.source, DefaultsSource::None);
    }

    #[test]
    fn bad_lines_are_named() {
        let e = Catalog::parse("# c\na|b|generate|f|s|p|parts:x\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = Catalog::parse("a||fly|f|s|p|parts:x||\n").unwrap_err();
        assert!(e.message.contains("fly"), "{e}");
        let e = Catalog::parse("a||generate|f|s|p|parts:x|top_k=lots|src\n").unwrap_err();
        assert!(e.message.contains("top_k"), "{e}");
        let twice = "a|b|generate|f|s|p|parts:x||\nc|a|generate|g|s|p|parts:x||\n";
        assert!(
            Catalog::parse(twice)
                .unwrap_err()
                .message
                .contains("two models")
        );
    }
}
