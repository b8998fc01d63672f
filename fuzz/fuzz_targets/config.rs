//! The relay's and the proxy's TOML configuration (`RelayConfig::from_str`,
//! `ProxyConfig::from_str`: parsing, then validation) on arbitrary text; every input goes to
//! both. Relative file names resolve against a scratch directory holding the files the
//! examples name (`ca.pem`, `relay.pem`, ...), so validation gets past them.
//!
//! Checked: no panic; errors render and name a key or a line; a configuration that loads gives
//! its derived settings (durations, proxy of each path, destination policy) without panicking.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use polycorn_net::config::{ConfigError, ProxyConfig, RelayConfig};

fn base_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = polycorn_fuzz::scratch_dir().join("config");
        std::fs::create_dir_all(&dir).expect("scratch directory");
        for f in [
            "ca.pem",
            "relay.pem",
            "relay.key",
            "proxy.pem",
            "proxy.key",
            "context.csv",
        ] {
            std::fs::write(dir.join(f), b"").expect("scratch file");
        }
        dir
    })
}

fn check_error(e: &ConfigError) {
    let text = e.to_string();
    assert!(!text.is_empty());
    let _ = e.key();
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let base = base_dir();
    match RelayConfig::from_str(text, "relay.toml", base) {
        Ok(c) => {
            let r = &c.relay;
            let _ = (
                r.hold_time(),
                r.drain(),
                r.idle_probe(),
                r.idle_probe_after(),
            );
            let _ = r.window_gain();
            for p in &c.paths {
                let _ = c.proxy_for(p).to_string();
            }
            let _ = format!("{c:?}");
        }
        Err(e) => check_error(&e),
    }
    match ProxyConfig::from_str(text, "proxy.toml", base) {
        Ok(c) => {
            let p = &c.proxy;
            let _ = (
                p.hold_time(),
                p.drain(),
                p.idle_probe(),
                p.idle_probe_after(),
            );
            let _ = (p.window_gain(), p.connect_timeout());
            let _ = c.policy.destination_policy();
            let _ = format!("{c:?}");
        }
        Err(e) => check_error(&e),
    }
});
