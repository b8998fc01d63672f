//! Helpers shared by the namespace tests: run a tool, and decide whether a test can run here.

use std::process::Command;

/// Run a command; panic with its stderr if it fails.
pub fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "`{program} {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Root and every tool in `tools` (name, version flag); otherwise skip, or fail when CI=true.
pub fn can_run(tools: &[(&str, &str)]) -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    let have = tools.iter().all(|(t, v)| {
        Command::new(t)
            .arg(v)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    });
    if root && have {
        return true;
    }
    let names: Vec<&str> = tools.iter().map(|t| t.0).collect();
    let why = format!("needs root ({root}) and {} ({have})", names.join("/"));
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("cannot run under CI: {why}");
    }
    eprintln!("SKIPPED: {why}");
    false
}
