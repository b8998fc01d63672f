//! The alerting rules `polycorn config example alerts` prints, checked by Prometheus's own
//! `promtool`: they load, and every alert fires where `tests/alerts.test.yml` says it should and
//! stays silent elsewhere. (That they match the series a running relay and proxy export is
//! checked in `relay_proxy/alerting.rs`.)

#[path = "support/prometheus.rs"]
mod prometheus;

use std::process::Command;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_polycorn")
}

#[test]
fn promtool_loads_the_rules_and_their_unit_tests_pass() {
    let Some(promtool) = prometheus::tool("promtool") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rules = prometheus::shipped_rules(bin());
    std::fs::write(dir.path().join("alerts.yml"), &rules).unwrap();
    let tests = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/alerts.test.yml");
    std::fs::copy(tests, dir.path().join("alerts.test.yml")).unwrap();

    let check = Command::new(&promtool)
        .args(["check", "rules", "alerts.yml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "promtool check rules:\n{said}");
    let alerts = rules.matches("- alert: ").count();
    assert!(
        said.contains(&format!("SUCCESS: {alerts} rules found")),
        "{alerts} alerts expected:\n{said}"
    );

    // Every alert of the file has a unit test that sees it fire.
    let cases = std::fs::read_to_string(tests).unwrap();
    for name in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        let firing = cases
            .split("alertname: ")
            .skip(1)
            .filter(|c| c.starts_with(&format!("{name}\n")) && c.contains("exp_alerts:"))
            .count();
        assert!(firing > 0, "no test case sees {name} fire");
    }

    let test = Command::new(&promtool)
        .args(["test", "rules", "alerts.test.yml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        test.status.success(),
        "promtool test rules:\n{}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );
}
