//! `pagoda pull NAME`, `pagoda list` and `pagoda rm NAME`: the catalog's models in the model
//! directory, by the names users type (scripts/model-catalog.txt).

use std::path::Path;

use anyhow::Context;
use clap::Args;
use pagoda_frontend::Catalog;
use pagoda_model::PackCache;

use crate::model_path::{catalog_entry, local_path, model_dir};

#[derive(Args)]
pub struct PullArgs {
    /// A catalog name or alias (`pagoda list` shows them).
    name: String,
}

#[derive(Args)]
pub struct RmArgs {
    /// A catalog name or alias.
    name: String,
}

/// Fetches the model into the model directory (nothing to do when it is there).
pub fn pull(args: PullArgs) -> anyhow::Result<()> {
    let entry = catalog_entry(&args.name)?;
    crate::fetch::fetch(entry, &model_dir())?;
    println!("{} is at {}", entry.name, local_path(entry).display());
    Ok(())
}

/// One line per catalog model: name, aliases, task, whether it is here, its size and path.
pub fn list() -> anyhow::Result<()> {
    println!("models in {}", model_dir().display());
    println!(
        "{:<20} {:<20} {:<9} {:>9}  PATH",
        "NAME", "ALIASES", "TASK", "SIZE"
    );
    for e in &Catalog::builtin().entries {
        let path = local_path(e);
        let size = if path.exists() {
            human_size(disk_size(&path))
        } else {
            "missing".to_owned()
        };
        let aliases = if e.aliases.is_empty() {
            "-".to_owned()
        } else {
            e.aliases.join(",")
        };
        println!(
            "{:<20} {:<20} {:<9} {:>9}  {}",
            e.name,
            aliases,
            e.task.name(),
            size,
            path.display()
        );
    }
    Ok(())
}

/// Deletes the model's file (or directory) and its sidecars: the `.sha256` stamp and the packed
/// weight caches.
pub fn rm(args: RmArgs) -> anyhow::Result<()> {
    let entry = catalog_entry(&args.name)?;
    let path = local_path(entry);
    if !path.exists() {
        anyhow::bail!(
            "`{}` is not fetched ({} is missing)",
            entry.name,
            path.display()
        );
    }
    let mut removed = vec![path.clone()];
    let mut stamp = path.clone().into_os_string();
    stamp.push(".sha256");
    removed.push(stamp.into());
    if path.is_dir() {
        std::fs::remove_dir_all(&path)
            .with_context(|| format!("cannot remove {}", path.display()))?;
    } else {
        // The pack caches, found by the rule that writes them: wherever the environment puts
        // them now, and beside the file (written there under another environment).
        removed.extend(PackCache::from_env().candidates(&path));
        removed.extend(PackCache::Beside { fallback: None }.candidates(&path));
        std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
    }
    for p in &removed[1..] {
        if p.exists() {
            std::fs::remove_file(p).with_context(|| format!("cannot remove {}", p.display()))?;
        }
    }
    println!("removed {} ({})", entry.name, path.display());
    Ok(())
}

/// Bytes of a file, or of every file under a directory.
fn disk_size(path: &Path) -> u64 {
    if path.is_dir() {
        std::fs::read_dir(path)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| disk_size(&e.path()))
            .sum()
    } else {
        std::fs::metadata(path).map_or(0, |m| m.len())
    }
}

fn human_size(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if bytes as f64 >= 1024.0 * MIB {
        format!("{:.1} GiB", bytes as f64 / (1024.0 * MIB))
    } else {
        format!("{:.0} MiB", bytes as f64 / MIB)
    }
}
