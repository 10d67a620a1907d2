//! Build script: stamps the binary with the git commit it was built from.
//!
//! Sets `HEADWATER_COMMIT` for `env!()` to, in order of preference:
//! 1. the `HEADWATER_BUILD_COMMIT` environment variable, if set and non-empty
//!    (for builds outside a git checkout, e.g. packaging);
//! 2. `git rev-parse --short=12 HEAD` run in this crate's directory;
//! 3. `"unknown"` (no git, not a repository, or no commit yet).
//!
//! Invariants: the build never fails because of git, and the script only
//! re-runs when the inputs above can have changed: `build.rs` itself,
//! `HEADWATER_BUILD_COMMIT`, the repository's `HEAD`, and the ref `HEAD` points
//! at (or the directory that ref will appear in, while it does not exist yet).
//! Paths that do not exist are never passed to `rerun-if-changed`, because cargo
//! treats a missing path as "always changed".

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=HEADWATER_BUILD_COMMIT");

    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    watch_git(&manifest_dir.join("../../.git"));

    let commit = env::var("HEADWATER_BUILD_COMMIT")
        .ok()
        .and_then(|value| sanitize(&value))
        .or_else(|| git_commit(&manifest_dir))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=HEADWATER_COMMIT={commit}");
}

/// A single-token, printable version of `value`, or `None` if nothing is left.
fn sanitize(value: &str) -> Option<String> {
    let cleaned: String = value
        .trim()
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .collect();
    (!cleaned.is_empty()).then_some(cleaned)
}

fn git_commit(dir: &Path) -> Option<String> {
    let output = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(dir)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    sanitize(&String::from_utf8_lossy(&output.stdout))
}

/// Registers `rerun-if-changed` for the files that move when `HEAD` moves.
fn watch_git(dot_git: &Path) {
    let Some(git_dir) = resolve_git_dir(dot_git) else {
        return;
    };
    // Linked worktrees keep refs in the common dir named by `commondir`.
    let common_dir = fs::read_to_string(git_dir.join("commondir"))
        .map(|rel| git_dir.join(rel.trim()))
        .unwrap_or_else(|_| git_dir.clone());

    let head = git_dir.join("HEAD");
    watch_if_exists(&head);
    let Ok(head_contents) = fs::read_to_string(&head) else {
        return;
    };
    if let Some(reference) = head_contents.trim().strip_prefix("ref:") {
        let ref_path = common_dir.join(reference.trim());
        if ref_path.exists() {
            watch_if_exists(&ref_path);
        } else if let Some(parent) = ref_path.parent() {
            // No commit yet, or the ref is packed: notice when it appears.
            watch_if_exists(parent);
        }
        watch_if_exists(&common_dir.join("packed-refs"));
    }
}

/// The real git directory: `.git` itself, or the target of a `gitdir:` file.
fn resolve_git_dir(dot_git: &Path) -> Option<PathBuf> {
    if dot_git.is_dir() {
        return Some(dot_git.to_path_buf());
    }
    let contents = fs::read_to_string(dot_git).ok()?;
    let target = contents.trim().strip_prefix("gitdir:")?.trim();
    let target = dot_git.parent()?.join(target);
    target.is_dir().then_some(target)
}

fn watch_if_exists(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
