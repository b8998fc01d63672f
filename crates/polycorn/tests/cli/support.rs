//! What every topic uses: the binary, root and namespace checks, and a lock on the machine.

use std::path::Path;
use std::process::Command;

use polycorn_net::config::{PathConfig, RelayConfig, RelayMode};

pub(crate) fn polycorn(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_polycorn"))
        .args(args)
        .output()
        .expect("run polycorn")
}

/// A relay configuration in mode `mode` with the proxy at `proxy` and one path, `a`, on this
/// host's loopback (device `lo`, source 127.0.0.1); no listener, no `[tls]`.
pub(crate) fn loopback_relay(mode: RelayMode, proxy: &str) -> RelayConfig {
    let mut relay = RelayConfig::new(proxy.parse().unwrap());
    relay.relay.mode = mode;
    relay.paths = vec![PathConfig {
        name: "a".into(),
        device: "lo".into(),
        source: Some("127.0.0.1".parse().unwrap()),
        proxy: None,
        mtu: None,
        modem: None,
        at_port: None,
    }];
    relay
}

pub(crate) fn is_root() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root && std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CLI testbed tests need root and CI=true forbids skipping them");
    }
    root
}

/// Held by the test that loads both cores (the soak) and by tests that measure delay, so
/// cargo's parallel test threads cannot turn one into noise in the other.
pub(crate) fn machine_to_myself() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `ip netns list`, to check a test left none of its namespaces behind.
pub(crate) fn namespaces() -> String {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("run ip netns list");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}
