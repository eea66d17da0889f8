//! Reading a checkpoint's text files (config.json, tokenizer.json, adapter_config.json, the
//! sentence-transformers files): the size is checked before anything is read, so a hostile or
//! mistaken multi-gigabyte "config" is an error naming the file, not the server's memory.

use std::path::Path;

use crate::error::HfError;

/// The largest text file read whole (a large tokenizer.json is about 30 MB).
pub const MAX_TEXT_BYTES: u64 = 256 << 20;

/// `path`'s text, if it is at most [`MAX_TEXT_BYTES`].
pub(crate) fn read_text(path: &Path) -> Result<String, HfError> {
    let io = |source| HfError::Io {
        path: path.to_owned(),
        source,
    };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > MAX_TEXT_BYTES {
        return Err(HfError::BadFile {
            path: path.to_owned(),
            message: format!("{len} bytes, over the {MAX_TEXT_BYTES}-byte limit of a text file"),
        });
    }
    std::fs::read_to_string(path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_over_the_limit_is_refused_unread() {
        let dir = std::env::temp_dir().join(format!("pagoda-read-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let f = dir.join("config.json");
        std::fs::write(&f, "{}").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read_text(&f).ok().as_deref(), Some("{}"));
        // A sparse file: its length is over the limit, nothing is written or read.
        let big = std::fs::File::create(&f).unwrap_or_else(|e| panic!("{e}"));
        big.set_len(MAX_TEXT_BYTES + 1)
            .unwrap_or_else(|e| panic!("{e}"));
        let e = read_text(&f).err().map(|e| e.to_string());
        assert!(e.as_deref().is_some_and(|m| m.contains("limit")), "{e:?}");
        assert!(read_text(&dir.join("missing.json")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
