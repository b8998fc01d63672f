//! Records the git commit the binary is built from (`POLYCORN_BUILD_COMMIT`, and
//! `POLYCORN_BUILD_DESCRIBE` as `git describe` gives it), so results name
//! the code that produced them, not whatever the checkout holds when they run. A tree with
//! uncommitted changes to tracked files gets `+dirty`; a build outside a git checkout gets
//! nothing and reports the crate version alone.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Re-run when the commit, the index or any source changes (so `+dirty` stays true).
    for p in [
        ".git/HEAD",
        ".git/index",
        ".git/refs",
        "crates",
        "Cargo.toml",
        "Cargo.lock",
    ] {
        let p = root.join(p);
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    let commit = git(&["rev-parse", "--short", "HEAD"]).filter(|c| !c.is_empty());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let value = match commit {
        Some(c) if dirty => format!("{c}+dirty"),
        Some(c) => c,
        None => String::new(),
    };
    println!("cargo:rustc-env=POLYCORN_BUILD_COMMIT={value}");
    // `git describe`: the nearest tag, commits since and the commit (the commit alone without
    // tags), `-dirty` as above; results pages name the build by it.
    let describe = git(&["describe", "--tags", "--always", "--dirty"]).unwrap_or_default();
    println!("cargo:rustc-env=POLYCORN_BUILD_DESCRIBE={describe}");
}
