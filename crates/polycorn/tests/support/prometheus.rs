//! Where the tests find Prometheus's tools (`promtool`, `prometheus`): `scripts/test.sh` unpacks
//! Debian's package under `target/prometheus` and says so in `POLYCORN_PROMETHEUS_BIN`; else
//! that directory, else `PATH`. Without them a test is skipped, except under `CI=true`.

use std::path::PathBuf;
use std::process::Command;

/// The tool `name`, or `None` (after saying so) when it is missing outside CI.
pub fn tool(name: &str) -> Option<PathBuf> {
    let unpacked =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/prometheus/usr/bin");
    let dirs = std::env::var_os("POLYCORN_PROMETHEUS_BIN")
        .map(PathBuf::from)
        .into_iter()
        .chain([unpacked]);
    for d in dirs {
        let p = d.join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    if Command::new(name).arg("--version").output().is_ok() {
        return Some(PathBuf::from(name));
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "{name} not found and CI=true forbids skipping: run scripts/test.sh (it fetches \
             Debian's prometheus package) or set POLYCORN_PROMETHEUS_BIN"
        );
    }
    eprintln!("skipped: {name} not found (scripts/test.sh fetches it)");
    None
}

/// The alerting rules `bin config example alerts` prints.
pub fn shipped_rules(bin: &str) -> String {
    let out = Command::new(bin)
        .args(["config", "example", "alerts"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "config example alerts: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
