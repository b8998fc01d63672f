//! Relay and proxy of a soak: started, restarted in place and drained, their logs and held listeners.

use super::*;

/// Relay and proxy of a soak, restarted in place by `--restart-every`.
pub(super) struct Pair {
    pub(super) relay: Daemon,
    pub(super) proxy: Daemon,
    pub(super) relay_ns: String,
    pub(super) proxy_ns: String,
    pub(super) relay_cfg: std::path::PathBuf,
    pub(super) proxy_cfg: std::path::PathBuf,
    pub(super) dir: std::path::PathBuf,
    pub(super) paths: usize,
    /// Seconds given a (re)started daemon to run with every path up.
    pub(super) ready_s: u64,
    /// Per daemon (relay, proxy): runs so far, and the flows and subflow reconnections the
    /// runs before the current one counted (up to their last reading).
    pub(super) runs: [u32; 2],
    pub(super) counted: [(f64, f64); 2],
    /// The relay's listener, held across its restarts (`--hold-listeners`).
    pub(super) held: Option<std::os::fd::OwnedFd>,
    /// The proxy's subflow listener, likewise.
    pub(super) held_proxy: Option<std::os::fd::OwnedFd>,
    /// Both daemons' `drain_s`.
    pub(super) drain_s: u64,
}

/// The log of `who`'s `run`-th run in `dir`: `relay.log`, then `relay.2.log`, …
pub(super) fn run_log(dir: &std::path::Path, who: &str, run: u32) -> std::path::PathBuf {
    dir.join(if run == 1 {
        format!("{who}.log")
    } else {
        format!("{who}.{run}.log")
    })
}

/// Start `who` (relay or proxy) in `ns`, handing it `held` if given, and wait until it runs
/// (and took the listener it was handed).
pub(super) fn start_daemon(
    ns: &str,
    who: &str,
    config: &std::path::Path,
    log: std::path::PathBuf,
    held: Option<&std::os::fd::OwnedFd>,
    until: Instant,
) -> Result<Daemon> {
    let mut d = Daemon::start_passing(ns, who, config, log, held)?;
    d.wait_for(&format!("{who} running"), 1, until)?;
    if held.is_some() {
        // The line of the listener that took it (not the start's "listeners passed by …").
        let took = if who == "proxy" {
            "proxy listening, socket passed by systemd"
        } else {
            "listener, passed by systemd"
        };
        d.wait_for(took, 1, until)
            .with_context(|| format!("the {who} did not take the listener it was passed"))?;
    }
    Ok(d)
}

impl Pair {
    pub(super) fn start(&mut self, who: &str) -> Result<()> {
        let i = usize::from(who == "proxy");
        self.runs[i] += 1;
        let log = run_log(&self.dir, who, self.runs[i]);
        let until = Instant::now() + Duration::from_secs(self.ready_s);
        if who == "proxy" {
            let held = self.held_proxy.as_ref();
            self.proxy = start_daemon(&self.proxy_ns, who, &self.proxy_cfg, log, held, until)?;
            if self.runs[i] > 1 {
                // The relay's paths back on the new proxy.
                self.proxy.wait_for("subflow up", self.paths, until)?;
            }
        } else {
            let held = self.held.as_ref();
            self.relay = start_daemon(&self.relay_ns, who, &self.relay_cfg, log, held, until)?;
            self.relay.wait_for("subflow up", self.paths, until)?;
        }
        Ok(())
    }

    pub(super) fn read(&self, who: &str) -> Result<Reading> {
        if who == "proxy" {
            read_daemon(self.proxy.pid(), &self.proxy_ns)
        } else {
            read_daemon(self.relay.pid(), &self.relay_ns)
        }
    }

    /// Restart `who` (`killed`: SIGKILL, else SIGTERM and a wait for the exit). `base` is the
    /// reading its flow count started from. Returns a problem with the stop, if any, and the
    /// line that describes it.
    pub(super) fn restart(
        &mut self,
        who: &'static str,
        killed: bool,
        base: &mut Reading,
        counts: &Counts,
    ) -> Result<(Option<String>, String)> {
        use nix::sys::signal::Signal;
        let i = usize::from(who == "proxy");
        let before = self.read(who)?;
        self.counted[i].0 += before.flows_total - base.flows_total;
        self.counted[i].1 += before.reconnects - base.reconnects;
        // A new process counts from 0.
        *base = Reading {
            flows_total: 0.0,
            reconnects: 0.0,
            ..before
        };
        let t = Instant::now();
        counts.restarts.lock().expect("not poisoned").push(Restart {
            who,
            killed,
            at: counts.secs(t),
            back: None,
            first_ok: None,
            held: who == "relay" && self.held.is_some(),
        });
        let d = if who == "proxy" {
            &mut self.proxy
        } else {
            &mut self.relay
        };
        let mut problem = None;
        let how = if killed {
            d.signal_and_wait(Signal::SIGKILL, Duration::from_secs(5))?
                .context("no exit within 5 s of SIGKILL")?;
            "killed (SIGKILL)".to_string()
        } else {
            let within = STOP_WITHIN + Duration::from_secs(self.drain_s);
            match d.signal_and_wait(Signal::SIGTERM, within)? {
                Some(st) => {
                    if !st.success() {
                        problem = Some(format!("the {who} exited with {st} when stopped"));
                    }
                    format!(
                        "stopped (SIGTERM): exited in {:.2} s, {st}",
                        t.elapsed().as_secs_f64()
                    )
                }
                None => {
                    problem = Some(format!(
                        "the {who} did not exit within {} s of SIGTERM",
                        within.as_secs()
                    ));
                    d.signal_and_wait(Signal::SIGKILL, Duration::from_secs(5))?;
                    format!("did not exit within {} s of SIGTERM", within.as_secs())
                }
            }
        };
        self.start(who)
            .with_context(|| format!("restart the {who} after it was {how}"))?;
        let back = Instant::now();
        if let Some(r) = counts.restarts.lock().expect("not poisoned").last_mut() {
            r.back = Some(counts.secs(back));
        }
        let line = format!(
            "restart at {:.1} s: {who} {how}; running with every path up {:.2} s after the signal",
            counts.secs(t),
            (back - t).as_secs_f64()
        );
        Ok((problem, line))
    }

    /// Every log file of `who`'s runs.
    pub(super) fn logs(&self, who: &str) -> Vec<std::path::PathBuf> {
        let i = usize::from(who == "proxy");
        (1..=self.runs[i])
            .map(|n| run_log(&self.dir, who, n))
            .collect()
    }
}

/// The transparent listener of the relays the soak starts (`bench::configs::configs`,
/// `netbench::configs`).
pub(super) const RELAY_TPROXY: &str = "0.0.0.0:7070";
/// The subflow listener of the proxies the soak starts (both topologies' configurations).
pub(super) const PROXY_LISTEN: &str = "0.0.0.0:7700";

/// A listener on `addr` in namespace `ns`, as systemd's socket unit makes it (`Backlog=1024`;
/// `transparent`: `Transparent=yes`), for relays or proxies to be handed.
pub(super) fn hold_listener(
    ns: &str,
    addr: &str,
    transparent: bool,
) -> Result<std::os::fd::OwnedFd> {
    use socket2::{Domain, Socket, Type};
    let addr: std::net::SocketAddr = addr.parse()?;
    let _in = polycorn_emu::netns::InNamespace::enter(ns)?;
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    if transparent {
        s.set_ip_transparent(true)?;
    }
    s.bind(&addr.into())
        .with_context(|| format!("bind {addr} in {ns}"))?;
    s.listen(1024)?;
    Ok(s.into())
}
