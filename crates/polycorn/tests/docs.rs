//! Checks of the README and the manual (`docs/src/`, an mdBook):
//!
//! * the README stays a front page (at most [`README_MAX_LINES`] lines);
//! * the product speaks of itself: no development-log references (numbered work sessions,
//!   "since/until/before <date>", build hashes, issue numbers, design-note sections, paper file
//!   names) in the README, the manual outside the lab notebook (`docs/src/notebook/`), comments
//!   in `crates/**/*.rs`, or the binary's `--help` texts;
//! * every relative link and `#anchor` in the README and the manual resolves, anchors as mdBook
//!   generates them from headings;
//! * every page under `docs/src` is reachable from `docs/src/SUMMARY.md`.
//!
//! Each failure names the file, the line and what is wrong.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use regex::Regex;

const README_MAX_LINES: usize = 250;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

/// Every file under `dir` whose name ends with `ext`, sorted.
fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                // Build output and fuzzing's working directories are not sources.
                if name != "target" && name != "book" && !name.starts_with('.') {
                    stack.push(p);
                }
            } else if name.ends_with(ext) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The manual's pages and the README.
fn markdown_files() -> Vec<PathBuf> {
    let mut v = vec![root().join("README.md")];
    v.extend(files(&root().join("docs/src"), ".md"));
    v
}

fn is_notebook(p: &Path) -> bool {
    p.starts_with(root().join("docs/src/notebook"))
}

/// The development-log patterns, each with what it is. Dates before 2020 (an epoch such as
/// 1970-01-01) are not the project's history.
fn devlog_patterns() -> Vec<(Regex, &'static str)> {
    [
        (r"\b[Ss]essions? [0-9]+\b", "a numbered work session"),
        (
            r"(?i)\b(since|until|before|after) 20[2-9][0-9]-[0-9]{2}-[0-9]{2}\b",
            "a \"since/until/before <date>\"",
        ),
        (r"(?i)\bbuilds? [0-9a-f]{7,40}\b", "a build hash"),
        (r"(?i)\bissues? #[0-9]+", "an issue number"),
        (r"DESIGN(\.md)? §", "a design-note section"),
        (r"\bpapers/[0-9]{3}", "a paper's file name"),
    ]
    .into_iter()
    .map(|(re, what)| (Regex::new(re).unwrap(), what))
    .collect()
}

/// The development-log references in `text`: what each is and the matched text. A date that is
/// a certificate's end ("valid until …") is the product's own output, not a log.
fn devlog_refs(patterns: &[(Regex, &'static str)], text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (re, what) in patterns {
        for m in re.find_iter(text) {
            if text[..m.start()].ends_with("valid ") {
                continue;
            }
            out.push(format!("{what} (\"{}\")", m.as_str()));
        }
    }
    out
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

#[test]
fn readme_is_a_front_page() {
    let text = fs::read_to_string(root().join("README.md")).unwrap();
    let n = text.lines().count();
    assert!(
        n <= README_MAX_LINES,
        "README.md: {n} lines, at most {README_MAX_LINES}: move detail into the manual (docs/src)"
    );
}

#[test]
fn readme_and_manual_speak_of_the_product_not_its_history() {
    let patterns = devlog_patterns();
    let mut errors = Vec::new();
    for f in markdown_files().iter().filter(|f| !is_notebook(f)) {
        let text = fs::read_to_string(f).unwrap();
        for (i, line) in text.lines().enumerate() {
            for r in devlog_refs(&patterns, line) {
                errors.push(format!(
                    "{}:{}: {r}; history belongs in docs/src/notebook/",
                    rel(f),
                    i + 1
                ));
            }
        }
    }
    assert!(
        errors.is_empty(),
        "development-log references:\n{}",
        errors.join("\n")
    );
}

/// The comment of a line of Rust source, if it has one: a whole-line comment (`//`, `///`,
/// `//!`) or the part after ` // ` at the end of code.
fn comment_of(line: &str) -> Option<&str> {
    let t = line.trim_start();
    if let Some(c) = t.strip_prefix("//") {
        return Some(c);
    }
    line.find(" // ").map(|i| &line[i + 4..])
}

#[test]
fn code_comments_speak_of_the_code_not_its_history() {
    let patterns = devlog_patterns();
    let mut errors = Vec::new();
    for f in files(&root().join("crates"), ".rs") {
        // This file spells the patterns out.
        if f.ends_with("polycorn/tests/docs.rs") {
            continue;
        }
        let text = fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let Some(c) = comment_of(line) else { continue };
            for r in devlog_refs(&patterns, c) {
                errors.push(format!("{}:{}: comment: {r}", rel(&f), i + 1));
            }
        }
    }
    assert!(
        errors.is_empty(),
        "development-log references in comments:\n{}",
        errors.join("\n")
    );
}

/// The subcommands a `--help` text lists under `Commands:`.
fn subcommands(help: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_commands = false;
    for line in help.lines() {
        if line.trim_end() == "Commands:" {
            in_commands = true;
            continue;
        }
        if in_commands {
            if !line.starts_with("  ") {
                in_commands = false;
                continue;
            }
            let t = line.trim_start();
            // A continuation line of a description is indented further than a command name.
            if line.len() - t.len() > 2 {
                continue;
            }
            if let Some(name) = t.split_whitespace().next() {
                if name != "help" {
                    out.push(name.to_string());
                }
            }
        }
    }
    out
}

#[test]
fn help_texts_speak_of_the_product_not_its_history() {
    let patterns = devlog_patterns();
    let bin = env!("CARGO_BIN_EXE_polycorn");
    let mut errors = Vec::new();
    let mut seen = 0;
    let mut todo: Vec<Vec<String>> = vec![vec![]];
    while let Some(cmd) = todo.pop() {
        let out = Command::new(bin).args(&cmd).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "polycorn {} --help failed: {}",
            cmd.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        seen += 1;
        for (i, line) in help.lines().enumerate() {
            for r in devlog_refs(&patterns, line) {
                errors.push(format!(
                    "`polycorn {} --help`, line {}: {r}",
                    cmd.join(" "),
                    i + 1
                ));
            }
        }
        if cmd.len() < 4 {
            for sub in subcommands(&help) {
                let mut c = cmd.clone();
                c.push(sub);
                todo.push(c);
            }
        }
    }
    assert!(
        seen > 5,
        "found only {seen} --help texts: is the Commands: list still parsed?"
    );
    assert!(
        errors.is_empty(),
        "development-log references in --help:\n{}",
        errors.join("\n")
    );
}

/// The parser mdBook uses, with its options.
fn parser(text: &str) -> pulldown_cmark::OffsetIter<'_> {
    let mut opts = Options::empty();
    opts.insert(Options::ENABLE_TABLES);
    opts.insert(Options::ENABLE_FOOTNOTES);
    opts.insert(Options::ENABLE_STRIKETHROUGH);
    opts.insert(Options::ENABLE_TASKLISTS);
    opts.insert(Options::ENABLE_HEADING_ATTRIBUTES);
    opts.insert(Options::ENABLE_SMART_PUNCTUATION);
    Parser::new_ext(text, opts).into_offset_iter()
}

/// mdBook's id for a heading's text: lowercase, whitespace to `-`, every character other than
/// alphanumerics, `_` and `-` dropped (mdbook-html's `id_from_content`).
fn heading_id(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c)
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The anchors of a page, as mdBook generates them: an explicit `{#id}`, or the heading's id,
/// made unique in the page with `-1`, `-2`, … as mdBook does.
fn anchors(text: &str) -> HashSet<String> {
    let mut used = HashSet::new();
    let mut current: Option<(Option<String>, String)> = None;
    for (ev, _) in parser(text) {
        match ev {
            Event::Start(Tag::Heading { id, .. }) => {
                current = Some((id.map(|s| s.to_string()), String::new()));
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, s)) = current.as_mut() {
                    s.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let (id, s) = current.take().unwrap();
                let id = match id {
                    Some(id) => id,
                    None => {
                        let base = heading_id(&s);
                        let mut id = base.clone();
                        let mut n = 1;
                        while used.contains(&id) {
                            id = format!("{base}-{n}");
                            n += 1;
                        }
                        id
                    }
                };
                used.insert(id);
            }
            _ => {}
        }
    }
    used
}

/// `a/./b/../c` → `a/c`, without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The links of a page: (line, destination).
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (ev, range) in parser(text) {
        if let Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) = ev {
            out.push((line_of(text, range.start), dest_url.to_string()));
        }
    }
    out
}

fn is_external(dest: &str) -> bool {
    let scheme = dest.split(':').next().unwrap_or("");
    dest.contains(':')
        && !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

#[test]
fn relative_links_and_anchors_resolve() {
    let mut anchor_cache: BTreeMap<PathBuf, HashSet<String>> = BTreeMap::new();
    let mut errors = Vec::new();
    for f in markdown_files() {
        let text = fs::read_to_string(&f).unwrap();
        for (line, dest) in links(&text) {
            if is_external(&dest) {
                continue;
            }
            let (path, anchor) = match dest.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (dest.as_str(), None),
            };
            let target = if path.is_empty() {
                f.clone()
            } else {
                normalize(&f.parent().unwrap().join(path))
            };
            if !target.exists() {
                errors.push(format!(
                    "{}:{line}: link to {dest}: {} does not exist",
                    rel(&f),
                    rel(&target)
                ));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if target.extension().is_some_and(|e| e == "md") {
                let ids = anchor_cache
                    .entry(target.clone())
                    .or_insert_with(|| anchors(&fs::read_to_string(&target).unwrap()));
                if !ids.contains(anchor) {
                    let mut known: Vec<_> = ids.iter().cloned().collect();
                    known.sort();
                    errors.push(format!(
                        "{}:{line}: link to {dest}: {} has no heading with the anchor #{anchor} (its anchors: {})",
                        rel(&f),
                        rel(&target),
                        known.join(", ")
                    ));
                }
            }
        }
    }
    assert!(
        errors.is_empty(),
        "links that do not resolve:\n{}",
        errors.join("\n")
    );
}

#[test]
fn every_page_is_reachable_from_the_summary() {
    let src = root().join("docs/src");
    let summary = src.join("SUMMARY.md");
    let text = fs::read_to_string(&summary).unwrap_or_else(|e| panic!("{}: {e}", rel(&summary)));
    let mut listed = BTreeSet::new();
    for (line, dest) in links(&text) {
        let path = dest.split('#').next().unwrap();
        if path.is_empty() || is_external(&dest) {
            continue;
        }
        let p = normalize(&src.join(path));
        if !p.exists() {
            panic!("docs/src/SUMMARY.md:{line}: {dest} does not exist");
        }
        listed.insert(p);
    }
    let mut errors = Vec::new();
    for page in files(&src, ".md") {
        if page != summary && !listed.contains(&page) {
            errors.push(format!(
                "{}: not listed in docs/src/SUMMARY.md, so mdBook leaves it out",
                rel(&page)
            ));
        }
    }
    assert!(
        errors.is_empty(),
        "pages outside the book:\n{}",
        errors.join("\n")
    );
}

#[test]
fn heading_ids_follow_mdbook() {
    assert_eq!(
        heading_id("`--passes`: add more rustdoc passes"),
        "--passes-add-more-rustdoc-passes"
    );
    assert_eq!(
        heading_id("Noise, and which average to read"),
        "noise-and-which-average-to-read"
    );
    let ids = anchors("# A\n\n## A\n\n## B {#own}\n");
    let want: HashSet<String> = ["a", "a-1", "own"].into_iter().map(String::from).collect();
    assert_eq!(ids, want);
}
