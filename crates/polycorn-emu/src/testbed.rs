//! The testbed topology: four namespaces and the links between them.
//!
//! ```text
//!  {name}-client ──lan0══lan0── {name}-relay ══path0..N-1 (TUN)══ {name}-proxy ──wan0══wan0── {name}-server
//!   10.0.1.2  fd00:1::2    10.0.1.1  fd00:1::1        10.100.i.1 ⇄ 10.100.i.2     10.0.2.1 fd00:2::1   10.0.2.2 fd00:2::2
//! ```
//!
//! * `lan0` and `wan0` are veth pairs (unshaped).
//! * Each path `i` is a persistent TUN device `path{i}` in the relay and one in the proxy; the
//!   emulator attaches to both and moves packets between them through a link model per
//!   direction. With no emulator attached, a path carries nothing.
//! * Per path, on both ends: `ip rule from <addr> table 100+i`, `ip rule oif path{i} table
//!   100+i`, `ip rule to <peer's addr> table 100+i`, and in that table `default dev path{i}` —
//!   a socket bound to a path's address or device leaves on that path (either rule
//!   alone misroutes). The relay ranks device and source before the peer's address, the proxy
//!   the peer's (relay's) address first, so a subflow may reach the proxy's address of
//!   another path and the replies come back on the path it left by. Reverse-path filtering
//!   is off for the same reason.
//! * The client routes everything via the relay; the server via the proxy.
//!
//! State (names, emulator PID) is written to `/run/polycorn/testbed-{name}.json` so `down` can
//! remove everything even after a crash. Removal is by recorded name or PID only.
//!
//! A [`Guard`] ties a testbed's lifetime to a value: it is removed when the guard is dropped,
//! also while unwinding from a panic, and a guard made with [`Guard::claim`] or
//! [`Guard::replace`] first removes what a crashed run left under the same name.

use std::fs;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::netns::{ip, ip_in, list_namespaces, sysctl_in, NetError};

/// Roles, in namespace-name order.
pub const ROLES: [&str; 4] = ["client", "relay", "proxy", "server"];
/// Most paths a testbed may have.
pub const MAX_PATHS: usize = 16;

/// What to build.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestbedSpec {
    /// Prefix of every namespace (`{name}-client`, …). Letters, digits and `-`, ≤ 20 chars.
    pub name: String,
    /// Number of emulated paths between relay and proxy (1..=16).
    pub paths: usize,
}

/// A built testbed's recorded state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestbedState {
    /// The spec it was built from.
    pub spec: TestbedSpec,
    /// Namespaces created.
    pub namespaces: Vec<String>,
    /// PID of the emulator serving it, if one was started by `polycorn testbed up`.
    pub emulator_pid: Option<u32>,
}

/// Testbed errors.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// Bad name or path count.
    #[error("invalid testbed spec: {0}")]
    Spec(String),
    /// A namespace of this testbed already exists.
    #[error("testbed `{0}` (or a namespace of it) already exists; run `polycorn testbed down --name {0}` first")]
    Exists(String),
    /// A system command failed.
    #[error(transparent)]
    Net(#[from] NetError),
    /// The state file could not be written or read.
    #[error("testbed state {path}: {reason}")]
    State {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

impl TestbedSpec {
    /// Check name and path count.
    pub fn validate(&self) -> Result<(), TestbedError> {
        let ok_chars = self
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-');
        if self.name.is_empty() || self.name.len() > 20 || !ok_chars || self.name.starts_with('-') {
            return Err(TestbedError::Spec(format!(
                "name `{}` must be 1-20 letters, digits or `-`",
                self.name
            )));
        }
        if self.paths == 0 || self.paths > MAX_PATHS {
            return Err(TestbedError::Spec(format!(
                "paths = {} must be in 1..={MAX_PATHS}",
                self.paths
            )));
        }
        Ok(())
    }
    /// Namespace of a role.
    pub fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.name)
    }
    /// Relay-side IPv4 address of path `i`.
    pub fn relay_path_addr(i: usize) -> String {
        format!("10.100.{i}.1")
    }
    /// Proxy-side IPv4 address of path `i`.
    pub fn proxy_path_addr(i: usize) -> String {
        format!("10.100.{i}.2")
    }
    /// Relay-side IPv6 address of path `i`.
    pub fn relay_path_addr6(i: usize) -> String {
        format!("fd00:100:{i:x}::1")
    }
    /// Proxy-side IPv6 address of path `i`.
    pub fn proxy_path_addr6(i: usize) -> String {
        format!("fd00:100:{i:x}::2")
    }
    /// TUN device name of path `i` (same on both ends).
    pub fn path_dev(i: usize) -> String {
        format!("path{i}")
    }
    /// Where the state is recorded.
    pub fn state_file(&self) -> PathBuf {
        PathBuf::from(format!("/run/polycorn/testbed-{}.json", self.name))
    }
    /// Where a background emulator of this testbed logs (removed by [`down`]).
    pub fn emulator_log(&self) -> PathBuf {
        PathBuf::from(format!("/run/polycorn/emu-{}.log", self.name))
    }
}

/// Client address on the LAN.
pub const CLIENT_ADDR: &str = "10.0.1.2";
/// Relay address on the LAN.
pub const RELAY_LAN_ADDR: &str = "10.0.1.1";
/// Proxy address on the WAN.
pub const PROXY_WAN_ADDR: &str = "10.0.2.1";
/// Server address.
pub const SERVER_ADDR: &str = "10.0.2.2";
/// Server IPv6 address.
pub const SERVER_ADDR6: &str = "fd00:2::2";

fn write_state(state: &TestbedState) -> Result<(), TestbedError> {
    let path = state.spec.state_file();
    let err = |reason: String| TestbedError::State {
        path: path.display().to_string(),
        reason,
    };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
    }
    let json = serde_json::to_string_pretty(state).map_err(|e| err(e.to_string()))?;
    fs::write(&path, json).map_err(|e| err(e.to_string()))
}

/// Read the recorded state of testbed `name`, if any.
pub fn read_state(name: &str) -> Result<Option<TestbedState>, TestbedError> {
    let path = TestbedSpec {
        name: name.into(),
        paths: 1,
    }
    .state_file();
    match fs::read_to_string(&path) {
        Ok(s) => serde_json::from_str(&s)
            .map(Some)
            .map_err(|e| TestbedError::State {
                path: path.display().to_string(),
                reason: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(TestbedError::State {
            path: path.display().to_string(),
            reason: e.to_string(),
        }),
    }
}

/// Record the emulator's PID in the state of testbed `name`.
pub fn record_emulator(name: &str, pid: Option<u32>) -> Result<(), TestbedError> {
    let Some(mut st) = read_state(name)? else {
        return Err(TestbedError::State {
            path: name.into(),
            reason: "no such testbed".into(),
        });
    };
    st.emulator_pid = pid;
    write_state(&st)
}

/// Build the namespaces, links, addresses and rules. On any failure, what was built is removed.
pub fn up(spec: &TestbedSpec) -> Result<TestbedState, TestbedError> {
    spec.validate()?;
    let existing = list_namespaces()?;
    if ROLES.iter().any(|r| existing.contains(&spec.ns(r))) || read_state(&spec.name)?.is_some() {
        return Err(TestbedError::Exists(spec.name.clone()));
    }
    let state = TestbedState {
        spec: spec.clone(),
        namespaces: ROLES.iter().map(|r| spec.ns(r)).collect(),
        emulator_pid: None,
    };
    // Record first, so `down` finds everything even if we crash half-way.
    write_state(&state)?;
    if let Err(e) = build(spec) {
        let _ = down(&spec.name);
        return Err(e);
    }
    Ok(state)
}

fn build(spec: &TestbedSpec) -> Result<(), TestbedError> {
    let (client, relay, proxy, server) = (
        spec.ns("client"),
        spec.ns("relay"),
        spec.ns("proxy"),
        spec.ns("server"),
    );
    for ns in [&client, &relay, &proxy, &server] {
        ip(&["netns", "add", ns])?;
        ip_in(ns, &["link", "set", "lo", "up"])?;
    }
    // LAN: client <-> relay; WAN: proxy <-> server.
    for (a, b, net4, net6) in [
        (&client, &relay, "10.0.1", "fd00:1:"),
        (&server, &proxy, "10.0.2", "fd00:2:"),
    ] {
        ip(&[
            "link", "add", "tmp-pc-a", "netns", a, "type", "veth", "peer", "name", "tmp-pc-b",
            "netns", b,
        ])?;
        let dev = if a == &client { "lan0" } else { "wan0" };
        ip_in(a, &["link", "set", "tmp-pc-a", "name", dev])?;
        ip_in(b, &["link", "set", "tmp-pc-b", "name", dev])?;
        // The gateway side (relay / proxy) gets .1, the host side .2.
        ip_in(b, &["addr", "add", &format!("{net4}.1/24"), "dev", dev])?;
        ip_in(a, &["addr", "add", &format!("{net4}.2/24"), "dev", dev])?;
        ip_in(
            b,
            &[
                "-6",
                "addr",
                "add",
                &format!("{net6}:1/64"),
                "dev",
                dev,
                "nodad",
            ],
        )?;
        ip_in(
            a,
            &[
                "-6",
                "addr",
                "add",
                &format!("{net6}:2/64"),
                "dev",
                dev,
                "nodad",
            ],
        )?;
        ip_in(a, &["link", "set", dev, "up"])?;
        ip_in(b, &["link", "set", dev, "up"])?;
        ip_in(a, &["route", "add", "default", "via", &format!("{net4}.1")])?;
        ip_in(
            a,
            &["-6", "route", "add", "default", "via", &format!("{net6}:1")],
        )?;
    }
    for ns in [&relay, &proxy] {
        sysctl_in(ns, "net.ipv4.conf.all.rp_filter", "0")?;
        sysctl_in(ns, "net.ipv4.conf.default.rp_filter", "0")?;
    }
    for i in 0..spec.paths {
        let dev = TestbedSpec::path_dev(i);
        let table = (100 + i).to_string();
        // Rule priorities (lower first), per namespace, for every path:
        // * relay: what the socket chose decides (device, then source address), then the
        //   peer's address: a subflow pinned to path 0 reaches the proxy's path-1 address
        //   over path 0, as it would over a real carrier.
        // * proxy: the peer's (relay's) address decides, then device and source: replies
        //   take the path their relay address belongs to, whichever proxy address the relay
        //   connected to. Kernel MPTCP joins a second subflow from the relay's path-1
        //   address to the proxy's path-0 address; without this the proxy's replies left on
        //   path 0 and the baseline silently ran on one path.
        let relay_prefs = [("oif", 1000), ("from", 2000), ("to", 3000)];
        let proxy_prefs = [("to", 1000), ("oif", 2000), ("from", 3000)];
        // Every path is dual-stack (a carrier may hand a SIM an IPv6 address only): the same
        // addressing and rules for IPv4 and IPv6.
        for (ns, local, peer, local6, peer6, prefs) in [
            (
                &relay,
                TestbedSpec::relay_path_addr(i),
                TestbedSpec::proxy_path_addr(i),
                TestbedSpec::relay_path_addr6(i),
                TestbedSpec::proxy_path_addr6(i),
                relay_prefs,
            ),
            (
                &proxy,
                TestbedSpec::proxy_path_addr(i),
                TestbedSpec::relay_path_addr(i),
                TestbedSpec::proxy_path_addr6(i),
                TestbedSpec::relay_path_addr6(i),
                proxy_prefs,
            ),
        ] {
            ip_in(ns, &["tuntap", "add", "dev", &dev, "mode", "tun"])?;
            ip_in(ns, &["addr", "add", &format!("{local}/24"), "dev", &dev])?;
            ip_in(
                ns,
                &[
                    "-6",
                    "addr",
                    "add",
                    &format!("{local6}/64"),
                    "dev",
                    &dev,
                    "nodad",
                ],
            )?;
            ip_in(ns, &["link", "set", &dev, "up"])?;
            for (family, local, peer) in [("-4", &local, &peer), ("-6", &local6, &peer6)] {
                ip_in(
                    ns,
                    &[
                        family, "route", "add", "default", "dev", &dev, "table", &table,
                    ],
                )?;
                for (selector, base) in prefs {
                    let value = match selector {
                        "oif" => dev.clone(),
                        "from" => local.to_string(),
                        _ => peer.to_string(),
                    };
                    let pref = (base + i).to_string();
                    ip_in(
                        ns,
                        &[
                            family, "rule", "add", "pref", &pref, selector, &value, "table", &table,
                        ],
                    )?;
                }
            }
            sysctl_in(ns, &format!("net.ipv4.conf.{dev}.rp_filter"), "0")?;
        }
    }
    Ok(())
}

/// Remove testbed `name`: stop its emulator (by recorded PID), delete its namespaces (by name),
/// forget its state. Idempotent: removing nothing is not an error.
pub fn down(name: &str) -> Result<(), TestbedError> {
    let state = read_state(name)?;
    if let Some(pid) = state.as_ref().and_then(|s| s.emulator_pid) {
        stop_emulator(pid);
    }
    let spec = TestbedSpec {
        name: name.into(),
        paths: 1,
    };
    let mut names: Vec<String> = ROLES.iter().map(|r| spec.ns(r)).collect();
    if let Some(s) = &state {
        for n in &s.namespaces {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
    }
    let existing = list_namespaces()?;
    // A process left inside (a relay or proxy of a run that was killed) keeps its namespace
    // alive after `ip netns del`; stop those first.
    let present: Vec<&String> = names.iter().filter(|n| existing.contains(n)).collect();
    stop_processes_in(&present);
    let mut first_err = None;
    for ns in present {
        if let Err(e) = ip(&["netns", "del", ns]) {
            first_err.get_or_insert(e);
        }
    }
    let _ = fs::remove_file(spec.emulator_log());
    let path = spec.state_file();
    if path.exists() {
        fs::remove_file(&path).map_err(|e| TestbedError::State {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
    }
    match first_err {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Terminate every process living in one of the named namespaces (`ip netns pids`; never this
/// process): SIGTERM, then SIGKILL after 2 s.
fn stop_processes_in(namespaces: &[&String]) {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let me = std::process::id();
    let pids: Vec<Pid> = namespaces
        .iter()
        .filter_map(|ns| ip(&["netns", "pids", ns]).ok())
        .flat_map(|out| {
            out.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .filter(|p| *p != me)
        .map(|p| Pid::from_raw(p as i32))
        .collect();
    for pid in &pids {
        let _ = kill(*pid, Signal::SIGTERM);
    }
    for _ in 0..100 {
        if pids.iter().all(|p| kill(*p, None).is_err()) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for pid in &pids {
        let _ = kill(*pid, Signal::SIGKILL);
    }
}

/// Terminate the emulator with `pid` if it is still a polycorn process (checked via
/// `/proc/PID/cmdline`, so a recycled PID is never signalled).
fn stop_emulator(pid: u32) {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return;
    };
    if !String::from_utf8_lossy(&cmdline).contains("polycorn") {
        return;
    }
    let pid = Pid::from_raw(pid as i32);
    let _ = kill(pid, Signal::SIGTERM);
    for _ in 0..50 {
        if kill(pid, None).is_err() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = kill(pid, Signal::SIGKILL);
}

/// Owns testbed `name`: [`down`] when dropped (also on panic), with a warning on stderr if that
/// fails. [`Guard::down`] removes it explicitly and returns the error instead.
#[derive(Debug)]
#[must_use = "the testbed is removed when the guard is dropped"]
pub struct Guard {
    name: String,
    armed: bool,
}

impl Guard {
    /// Build `spec` ([`up`]; an existing testbed of that name is an error) and own it.
    pub fn up(spec: &TestbedSpec) -> Result<Guard, TestbedError> {
        up(spec)?;
        Ok(Guard::adopt(&spec.name))
    }

    /// Remove a leftover testbed of `spec`'s name (a crashed run's), then build `spec` and own
    /// it.
    pub fn replace(spec: &TestbedSpec) -> Result<Guard, TestbedError> {
        spec.validate()?;
        let guard = Guard::claim(&spec.name)?;
        up(spec)?;
        Ok(guard)
    }

    /// Remove a leftover testbed named `name` (a crashed run's) and own the name: whatever is
    /// built under it next (for example by a `polycorn testbed up` child) is removed with the
    /// guard.
    pub fn claim(name: &str) -> Result<Guard, TestbedError> {
        down(name)?;
        Ok(Guard::adopt(name))
    }

    /// Own the existing (or about to be built) testbed `name` as it is.
    pub fn adopt(name: &str) -> Guard {
        Guard {
            name: name.into(),
            armed: true,
        }
    }

    /// The testbed's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Remove the testbed now.
    pub fn down(mut self) -> Result<(), TestbedError> {
        self.armed = false;
        down(&self.name)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.armed {
            if let Err(e) = down(&self.name) {
                eprintln!("warning: removing testbed `{}`: {e}", self.name);
            }
        }
    }
}
