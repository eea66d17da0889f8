//! The workspace's layout rules, checked on every test run: no source file under `crates/*/src`
//! over 600 lines (SIMD kernel files: 800), and no circle of files in one crate that import each
//! other through `crate::` or `super::` paths (issue 41).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 600;
const MAX_SIMD_LINES: usize = 800;

/// A module path inside one crate: `["kv", "cache"]` for `src/kv/cache.rs` or `src/kv/cache/mod.rs`.
type ModPath = Vec<String>;

#[test]
fn no_source_file_is_oversized() {
    let mut oversized = Vec::new();
    for krate in crates() {
        for file in rust_files(&krate.join("src")) {
            let lines = fs::read_to_string(&file)
                .unwrap_or_default()
                .lines()
                .count();
            let limit = if is_simd(&file) {
                MAX_SIMD_LINES
            } else {
                MAX_LINES
            };
            if lines > limit {
                oversized.push(format!("{} ({lines} lines, limit {limit})", shown(&file)));
            }
        }
    }
    assert!(
        oversized.is_empty(),
        "split these files:\n{}",
        oversized.join("\n")
    );
}

#[test]
fn no_files_import_each_other_in_a_circle() {
    let mut circles = Vec::new();
    for krate in crates() {
        let modules = Modules::read(&krate.join("src"));
        for circle in modules.circles() {
            let files: Vec<String> = circle.iter().map(|m| shown(&modules.files[m])).collect();
            let files = files.join(" -> ");
            circles.push(format!("{files}\n{}", modules.edges_within(&circle)));
        }
    }
    assert!(
        circles.is_empty(),
        "break these import circles:\n{}",
        circles.join("\n")
    );
}

/// The checker reads paths as intended: use groups expanded, comments and strings skipped,
/// test modules dropped, `super::` taken from the file's module.
#[test]
fn the_checker_reads_imports() {
    let code = without_comments_and_strings(
        "use crate::a::{b::C, d};\n// crate::e\nlet s = \"crate::f\"; let c = '{';\nsuper::g::h();",
    );
    let (code, _) = without_test_items(&format!(
        "{code}\n#[cfg(test)]\nmod tests {{ use crate::i; }}"
    ));
    let used: Vec<String> = used_paths(&code).iter().map(|p| p.join("::")).collect();
    assert_eq!(used, ["crate::a::b::C", "crate::a::d", "super::g::h"]);
    let module = vec!["x".to_string(), "y".to_string()];
    assert_eq!(absolute(&module, &["super".into(), "g".into()]), ["x", "g"]);
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A path as the workspace names it: `crates/core/src/lib.rs`.
fn shown(file: &Path) -> String {
    file.strip_prefix(workspace())
        .unwrap_or(file)
        .display()
        .to_string()
}

fn crates() -> Vec<PathBuf> {
    let dir = workspace().join("crates");
    let mut crates: Vec<PathBuf> = fs::read_dir(&dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    crates.retain(|c| c.join("src").is_dir());
    crates.sort();
    assert!(
        !crates.is_empty(),
        "no crates found under {}",
        dir.display()
    );
    crates
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// Hand-written SIMD kernels (`avx2.rs`, `avx2_iq4.rs`, `neon.rs`) are long by nature.
fn is_simd(file: &Path) -> bool {
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    ["avx", "neon", "sse", "simd"]
        .iter()
        .any(|p| stem.starts_with(p))
}

/// One crate's non-test module files and the module files each one imports.
struct Modules {
    files: BTreeMap<ModPath, PathBuf>,
    imports: BTreeMap<ModPath, BTreeSet<ModPath>>,
}

impl Modules {
    fn read(src: &Path) -> Modules {
        let mut files = BTreeMap::new();
        let mut code = BTreeMap::new();
        let mut test_modules = BTreeSet::new();
        let mut reexports = BTreeMap::new();
        for file in rust_files(src) {
            let module = module_path(src, &file);
            let text = without_comments_and_strings(&fs::read_to_string(&file).unwrap_or_default());
            let (text, tests) = without_test_items(&text);
            test_modules.extend(
                tests
                    .into_iter()
                    .map(|t| [module.clone(), vec![t]].concat()),
            );
            let is_parent = file.ends_with("mod.rs") || file.ends_with("lib.rs");
            let (text, exported) = if is_parent {
                without_pub_uses(&text)
            } else {
                (text, vec![])
            };
            for (name, target) in exported {
                let target = absolute(&module, &target);
                reexports.insert([module.clone(), vec![name]].concat(), target);
            }
            files.insert(module.clone(), file);
            code.insert(module, text);
        }
        files.retain(|m, _| !test_modules.iter().any(|t| m.starts_with(t)));
        let mut imports = BTreeMap::new();
        for module in files.keys() {
            let mut targets = BTreeSet::new();
            for used in used_paths(&code[module]) {
                let target = resolve(&files, &reexports, absolute(module, &used));
                if &target != module && !target.is_empty() {
                    targets.insert(target);
                }
            }
            imports.insert(module.clone(), targets);
        }
        Modules { files, imports }
    }

    /// Which file of `circle` imports which, one line each.
    fn edges_within(&self, circle: &[ModPath]) -> String {
        let mut lines = Vec::new();
        for from in circle {
            let to = self.imports[from].iter().filter(|t| circle.contains(t));
            let to: Vec<String> = to.map(|t| shown(&self.files[t])).collect();
            lines.push(format!(
                "  {} imports {}",
                shown(&self.files[from]),
                to.join(", ")
            ));
        }
        lines.join("\n")
    }

    /// Every group of two or more modules that reach each other through their imports.
    fn circles(&self) -> Vec<Vec<ModPath>> {
        let reach: BTreeMap<&ModPath, BTreeSet<&ModPath>> = self
            .imports
            .keys()
            .map(|m| (m, self.reachable(m)))
            .collect();
        let mut circles: Vec<Vec<ModPath>> = Vec::new();
        for (&m, from_m) in &reach {
            let back = |o: &&&ModPath| reach.get(**o).is_some_and(|r| r.contains(m));
            let group: Vec<ModPath> = from_m.iter().filter(back).map(|&o| o.clone()).collect();
            if group.len() > 1 && !circles.iter().any(|c| c.contains(m)) {
                circles.push(group);
            }
        }
        circles
    }

    fn reachable(&self, from: &ModPath) -> BTreeSet<&ModPath> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(m) = todo.pop() {
            for next in self.imports.get(m).into_iter().flatten() {
                if seen.insert(next) {
                    todo.push(next);
                }
            }
        }
        seen
    }
}

fn module_path(src: &Path, file: &Path) -> ModPath {
    let relative = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: ModPath = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// A used path (`crate::a::B`, `super::c`, `self::d`) as a path from the crate root.
fn absolute(module: &ModPath, used: &[String]) -> ModPath {
    let mut at = module.clone();
    let mut rest = used;
    match used.first().map(String::as_str) {
        Some("crate") => {
            at.clear();
            rest = &used[1..];
        }
        Some("self") => rest = &used[1..],
        _ => {}
    }
    while rest.first().is_some_and(|s| s == "super") {
        at.pop();
        rest = &rest[1..];
    }
    [at, rest.to_vec()].concat()
}

/// The deepest module file along `path`, following `pub use` re-exports of mod.rs/lib.rs files.
fn resolve(
    files: &BTreeMap<ModPath, PathBuf>,
    reexports: &BTreeMap<ModPath, ModPath>,
    mut path: ModPath,
) -> ModPath {
    for _ in 0..8 {
        let depth = (0..=path.len())
            .rev()
            .find(|&d| files.contains_key(&path[..d]));
        let depth = depth.unwrap_or(0);
        let reexport = (depth < path.len())
            .then(|| reexports.get(&path[..=depth]))
            .flatten();
        match reexport {
            Some(target) => path = [target.clone(), path[depth + 1..].to_vec()].concat(),
            None => return path[..depth].to_vec(),
        }
    }
    path
}

/// Every `crate::`, `super::` and `self::` path in the code, `use` groups expanded.
fn used_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(start) {
            let before = at.checked_sub(1).map(|b| bytes[b]);
            let joined = before.is_some_and(|b| b.is_ascii_alphanumeric() || b"_$:".contains(&b));
            if !joined {
                let tree = use_tree(&code[at..]);
                paths.extend(expand(&tree));
            }
        }
    }
    paths
}

/// The text of one path or use tree: `crate::a::{b::C, d}` up to where it ends.
fn use_tree(code: &str) -> String {
    let mut depth = 0;
    let mut end = code.len();
    for (i, c) in code.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                end = i;
                break;
            }
            '}' => depth -= 1,
            c if depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':') => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    code[..end].chars().filter(|c| !c.is_whitespace()).collect()
}

fn expand(tree: &str) -> Vec<Vec<String>> {
    let Some(open) = tree.find('{') else {
        let segments = tree.split("::").filter(|s| !s.is_empty());
        return vec![segments.map(String::from).collect()];
    };
    let prefix: Vec<String> = tree[..open]
        .split("::")
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let inner = &tree[open + 1..tree.len().saturating_sub(1)];
    let mut parts = Vec::new();
    let (mut depth, mut from) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[from..]);
    let mut paths = Vec::new();
    for part in parts.into_iter().filter(|p| !p.is_empty() && *p != "self") {
        for rest in expand(part) {
            paths.push([prefix.clone(), rest].concat());
        }
    }
    if paths.is_empty() {
        paths.push(prefix);
    }
    paths
}

/// `pub use` items of a mod.rs/lib.rs: they re-export children, so they are not imports; the
/// names they export are returned so paths through the parent resolve to the defining file.
fn without_pub_uses(code: &str) -> (String, Vec<(String, Vec<String>)>) {
    let mut kept = String::new();
    let mut exported = Vec::new();
    let mut rest = code;
    while let Some(at) = find_item(rest, "pub use ").or_else(|| find_item(rest, "pub(crate) use "))
    {
        kept.push_str(&rest[..at]);
        let end = rest[at..].find(';').map_or(rest.len(), |e| at + e + 1);
        let tree = use_tree(
            rest[at..end]
                .split_once("use ")
                .map_or("", |(_, t)| t.trim_start()),
        );
        for path in expand(&tree) {
            let name = path.last().cloned().unwrap_or_default();
            exported.push((name, path));
        }
        rest = &rest[end..];
    }
    kept.push_str(rest);
    (kept, exported)
}

fn find_item(code: &str, keyword: &str) -> Option<usize> {
    code.match_indices(keyword)
        .map(|(i, _)| i)
        .find(|&i| i == 0 || code.as_bytes()[i - 1].is_ascii_whitespace())
}

/// Drops each `#[cfg(test)]` item (an inline test module, a test-only `use` or fn) and returns
/// the names of test modules declared as files (`#[cfg(test)] mod tests;`).
fn without_test_items(code: &str) -> (String, Vec<String>) {
    let mut kept = String::new();
    let mut test_files = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        kept.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let stop = item.find([';', '{']).unwrap_or(item.len());
        let end = if item[stop..].starts_with('{') {
            stop + matching_brace(&item[stop..])
        } else {
            let header: Vec<&str> = item[..stop].split_whitespace().collect();
            if let [.., "mod", name] = header.as_slice() {
                test_files.push(name.to_string());
            }
            stop + 1
        };
        rest = &item[end.min(item.len())..];
    }
    kept.push_str(rest);
    (kept, test_files)
}

fn matching_brace(code: &str) -> usize {
    let mut depth = 0;
    for (i, c) in code.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 1 => return i + 1,
            '}' => depth -= 1,
            _ => {}
        }
    }
    code.len()
}

/// The code with comments, string and char literals blanked (newlines kept), so that braces
/// and paths inside them are not read as code.
fn without_comments_and_strings(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let next = chars.get(i + 1).copied().unwrap_or(' ');
        let end = match chars[i] {
            '/' if next == '/' => chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |p| i + p),
            '/' if next == '*' => block_comment_end(&chars, i),
            'r' if (next == '"' || next == '#') && !ident_before(&chars, i) => {
                raw_string_end(&chars, i)
            }
            '"' => string_end(&chars, i),
            '\'' if next == '\\' => chars[i + 3..]
                .iter()
                .position(|&c| c == '\'')
                .map_or(chars.len(), |p| i + p + 4),
            '\'' if chars.get(i + 2) == Some(&'\'') => i + 3,
            c => {
                out.push(c);
                i += 1;
                continue;
            }
        };
        let end = end.max(i + 1).min(chars.len());
        out.extend(chars[i..end].iter().map(|&c| blank(c)));
        i = end;
    }
    out
}

/// Whether `chars[i]` continues an identifier (`for"`), not starts a literal (`r"`, `br"`).
fn ident_before(chars: &[char], i: usize) -> bool {
    let ident = |j: usize| chars[j].is_alphanumeric() || chars[j] == '_';
    let byte_prefix = i > 0 && chars[i - 1] == 'b' && (i < 2 || !ident(i - 2));
    i > 0 && ident(i - 1) && !byte_prefix
}

fn block_comment_end(chars: &[char], start: usize) -> usize {
    let (mut depth, mut i) = (0, start);
    while i + 1 < chars.len() {
        match (chars[i], chars[i + 1]) {
            ('/', '*') => (depth, i) = (depth + 1, i + 2),
            ('*', '/') if depth == 1 => return i + 2,
            ('*', '/') => (depth, i) = (depth - 1, i + 2),
            _ => i += 1,
        }
    }
    chars.len()
}

fn string_end(chars: &[char], start: usize) -> usize {
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    chars.len()
}

fn raw_string_end(chars: &[char], start: usize) -> usize {
    let hashes = chars[start + 1..].iter().take_while(|&&c| c == '#').count();
    if chars.get(start + 1 + hashes) != Some(&'"') {
        return start + 1;
    }
    let closing: Vec<char> = std::iter::once('"')
        .chain(std::iter::repeat_n('#', hashes))
        .collect();
    let body = start + 2 + hashes;
    (body..chars.len())
        .find(|&i| chars[i..].starts_with(&closing))
        .map_or(chars.len(), |i| i + closing.len())
}
