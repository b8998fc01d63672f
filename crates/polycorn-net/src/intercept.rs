//! Transparent interception of passengers' TCP on the relay (nftables TPROXY), and its
//! teardown.
//!
//! Passengers' devices use the relay as their default gateway and stay unmodified. Their TCP
//! connections to anywhere are delivered to one local listener instead of being forwarded:
//!
//! 1. an nftables `inet` table (one per relay, named by the operator, e.g. `polycorn_relay`)
//!    whose `prerouting` chain (priority `mangle`) hands every TCP packet arriving on the LAN
//!    device to the listener's port with `tproxy` and marks it;
//! 2. a policy-routing rule `fwmark MARK lookup TABLE` and the route
//!    `local 0.0.0.0/0 dev lo table TABLE` (and the IPv6 pair), so marked packets are
//!    delivered locally whatever their destination;
//! 3. a listener with `IP_TRANSPARENT`/`IPV6_TRANSPARENT` from [`transparent_listener`]. Each
//!    accepted socket's `local_addr()` is the passenger's **original destination** and its
//!    `peer_addr()` the passenger: no `SO_ORIGINAL_DST` lookup, no NAT, no conntrack.
//!
//! What the ruleset does, in order, for packets arriving on the LAN device (the ruleset text
//! is [`TproxyOptions::ruleset`]; `nft list table inet NAME` shows it live):
//!
//! * TCP to one of the relay's own addresses (`fib daddr type local`) is left alone, so
//!   services on the relay (SOCKS5, SSH, metrics) keep working;
//! * destinations in [`TproxyOptions::exclude`] are left alone (all protocols);
//! * other TCP is intercepted (IPv4 only if [`TproxyOptions::v4_port`] is set, IPv6 only if
//!   [`TproxyOptions::v6_port`] is set);
//! * with [`TproxyOptions::udp_block`], UDP of the intercepted families is rejected with an
//!   ICMP port-unreachable, except to port 53 (DNS) and to the relay's own, broadcast and
//!   multicast addresses (DHCP, mDNS). Browsers then give up QUIC at once and use TCP, which
//!   polycorn carries. The reject sits in `prerouting`, so it works whether or not the relay
//!   forwards IP.
//!
//! **Marks and tables.** The defaults, fwmark [`DEFAULT_FWMARK`] (`0x70c`) and routing table
//! [`DEFAULT_ROUTE_TABLE`] (7070), stay clear of the testbed's per-path tables (100 + i) and
//! the kernel's (253–255). The rule sets the whole packet mark; choose other values if the
//! relay's host uses marks of its own.
//!
//! **Lifecycle.** [`NftTproxy::install`] first removes leftovers of the same name (a crashed
//! relay: the table is replaced atomically, stale rules and routes are deleted), so a restart
//! always works. [`NftTproxy::uninstall`], or dropping the value, removes exactly what was
//! installed, in the network namespace it was installed in, even when called from a thread in
//! another namespace. Operators can clean up by hand with
//! [`remove_leftovers`] or: `nft delete table inet NAME; ip rule del fwmark 0x70c lookup 7070;
//! ip route del local 0.0.0.0/0 dev lo table 7070` (and `ip -6` likewise).
//!
//! Needs CAP_NET_ADMIN, the `nft` (nftables) and `ip` (iproute2) programs, and a kernel with
//! `nft_tproxy`, `nft_fib` and `nft_reject`. Installing runs those programs synchronously
//! (milliseconds); call it at startup or from `spawn_blocking`.

use std::fs::File;
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};

use ipnet::IpNet;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;

use crate::sockopt;

/// Default packet mark for intercepted packets.
pub const DEFAULT_FWMARK: u32 = 0x70c;
/// Default routing table holding the `local` routes for marked packets.
pub const DEFAULT_ROUTE_TABLE: u32 = 7070;
/// Listen backlog of [`transparent_listener`].
pub const LISTEN_BACKLOG: i32 = 1024;
/// Most stale `ip rule` entries removed per family when cleaning up.
const MAX_STALE_RULES: usize = 64;

/// A TCP listener that accepts TPROXY-intercepted connections: `IP_TRANSPARENT` (IPv4) or
/// `IPV6_TRANSPARENT` and `IPV6_V6ONLY` (IPv6), `SO_REUSEADDR`, nonblocking, backlog
/// [`LISTEN_BACKLOG`]. Must be called inside a tokio runtime.
///
/// Bind the wildcard address (`0.0.0.0:PORT`, `[::]:PORT`): TPROXY looks the listener up by
/// the LAN device's address and the port. IPv6 listeners are IPv6-only, so the IPv4 and IPv6
/// listeners may share a port number.
///
/// With `device` (the passengers' interface) the listener is bound to it (`SO_BINDTODEVICE`):
/// TPROXY delivers passengers' connections as arriving there, and a connection from any other
/// interface (a carrier's, from the Internet) finds no listener and is refused by the kernel.
///
/// For every accepted stream, `local_addr()` is the address the passenger connected to (the
/// real server) and `peer_addr()` the passenger. Needs CAP_NET_ADMIN.
pub fn transparent_listener(addr: SocketAddr, device: Option<&str>) -> io::Result<TcpListener> {
    let ctx = |what: &str| {
        let what = format!("transparent listener on {addr}: {what}");
        move |e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"))
    };
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(ctx("create socket"))?;
    sock.set_reuse_address(true)
        .map_err(ctx("set SO_REUSEADDR"))?;
    if addr.is_ipv4() {
        sock.set_ip_transparent(true)
            .map_err(ctx("set IP_TRANSPARENT (needs CAP_NET_ADMIN)"))?;
    } else {
        sockopt::set_ipv6_transparent(sock.as_fd(), true).map_err(ctx("transparent"))?;
        sock.set_only_v6(true).map_err(ctx("set IPV6_V6ONLY"))?;
    }
    if let Some(dev) = device {
        sock.bind_device(Some(dev.as_bytes()))
            .map_err(ctx(&format!("bind to device {dev:?} (SO_BINDTODEVICE)")))?;
    }
    sock.set_nonblocking(true).map_err(ctx("set nonblocking"))?;
    sock.bind(&addr.into()).map_err(ctx("bind"))?;
    sock.listen(LISTEN_BACKLOG).map_err(ctx("listen"))?;
    TcpListener::from_std(sock.into()).map_err(ctx("register with tokio"))
}

/// Binds a listener made elsewhere (one systemd passed) to `device` like
/// [`transparent_listener`] does; `None` leaves it as it is.
pub fn bind_to_device(l: &std::net::TcpListener, device: Option<&str>) -> io::Result<()> {
    let Some(dev) = device else { return Ok(()) };
    socket2::SockRef::from(l)
        .bind_device(Some(dev.as_bytes()))
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("bind to device {dev:?} (SO_BINDTODEVICE): {e}"),
            )
        })
}

/// What went wrong installing or removing interception.
#[derive(Debug, thiserror::Error)]
pub enum InterceptError {
    /// The options cannot be turned into a ruleset.
    #[error("invalid interception options: {0}")]
    Invalid(String),
    /// A command exited non-zero.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed on stderr (nft names the offending line).
        stderr: String,
    },
    /// A command could not be started.
    #[error("cannot run `{cmd}` (are nftables and iproute2 installed?): {source}")]
    Spawn {
        /// The command line.
        cmd: String,
        /// Why.
        source: io::Error,
    },
    /// The network namespace could not be recorded or entered.
    #[error("network namespace: {what}: {source}")]
    Namespace {
        /// What was being done.
        what: String,
        /// Why.
        source: io::Error,
    },
}

/// How to intercept. Build with [`TproxyOptions::new`] and adjust the fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TproxyOptions {
    /// Name of the nftables `inet` table (ASCII letters, digits, `_`; e.g. `polycorn_relay`).
    pub table: String,
    /// The device passengers' traffic arrives on (WiFi/LAN bridge), e.g. `br-lan`.
    pub lan_device: String,
    /// Port of the IPv4 transparent listener; `None` leaves IPv4 alone.
    pub v4_port: Option<u16>,
    /// Port of the IPv6 transparent listener; `None` leaves IPv6 alone.
    pub v6_port: Option<u16>,
    /// Destinations never intercepted nor UDP-blocked (e.g. the LAN's own subnets).
    pub exclude: Vec<IpNet>,
    /// Packet mark of intercepted packets (non-zero).
    pub fwmark: u32,
    /// Routing table for the `local` default routes (not 0, 253, 254 or 255).
    pub route_table: u32,
    /// Reject passengers' UDP (except DNS) with ICMP port-unreachable so QUIC falls back to
    /// TCP.
    pub udp_block: bool,
}

impl TproxyOptions {
    /// Intercept nothing yet on `lan_device` with table `table`: no ports, no exclusions,
    /// [`DEFAULT_FWMARK`], [`DEFAULT_ROUTE_TABLE`], UDP not blocked.
    pub fn new(table: impl Into<String>, lan_device: impl Into<String>) -> TproxyOptions {
        TproxyOptions {
            table: table.into(),
            lan_device: lan_device.into(),
            v4_port: None,
            v6_port: None,
            exclude: Vec::new(),
            fwmark: DEFAULT_FWMARK,
            route_table: DEFAULT_ROUTE_TABLE,
            udp_block: false,
        }
    }

    fn validate(&self) -> Result<(), InterceptError> {
        let bad = |m: String| Err(InterceptError::Invalid(m));
        let t = &self.table;
        if t.is_empty()
            || t.len() > 64
            || !t.starts_with(|c: char| c.is_ascii_alphabetic())
            || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return bad(format!(
                "table name `{t}`: 1-64 ASCII letters, digits or '_', starting with a letter"
            ));
        }
        let d = &self.lan_device;
        if d.is_empty()
            || d.len() > sockopt::MAX_IFNAME_BYTES
            || !d
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        {
            return bad(format!(
                "LAN device `{d}`: 1-{} ASCII letters, digits, '_', '.' or '-'",
                sockopt::MAX_IFNAME_BYTES
            ));
        }
        if self.v4_port.is_none() && self.v6_port.is_none() {
            return bad("neither an IPv4 nor an IPv6 listener port: nothing to intercept".into());
        }
        if self.v4_port == Some(0) || self.v6_port == Some(0) {
            return bad("listener port 0".into());
        }
        if self.fwmark == 0 {
            return bad("fwmark 0 would match every unmarked packet".into());
        }
        if matches!(self.route_table, 0 | 253..=255) {
            return bad(format!(
                "routing table {} is reserved by the kernel",
                self.route_table
            ));
        }
        Ok(())
    }

    /// The nftables script [`NftTproxy::install`] loads (`nft -f -`). It replaces a table of
    /// the same name atomically.
    pub fn ruleset(&self) -> Result<String, InterceptError> {
        self.validate()?;
        let t = &self.table;
        let dev = &self.lan_device;
        let mark = self.fwmark;
        let mut excl4 = Vec::new();
        let mut excl6 = Vec::new();
        for net in IpNet::aggregate(&self.exclude.iter().map(IpNet::trunc).collect()) {
            match net {
                IpNet::V4(n) => excl4.push(n.to_string()),
                IpNet::V6(n) => excl6.push(n.to_string()),
            }
        }
        let mut s = String::new();
        s.push_str(&format!(
            "# polycorn transparent interception; see polycorn-net intercept.rs\n\
             table inet {t} {{}}\n\
             delete table inet {t}\n\
             table inet {t} {{\n\
             \tchain prerouting {{\n\
             \t\ttype filter hook prerouting priority mangle; policy accept;\n\
             \t\tiifname \"{dev}\" meta l4proto tcp fib daddr type local return\n"
        ));
        if !excl4.is_empty() {
            s.push_str(&format!(
                "\t\tiifname \"{dev}\" ip daddr {{ {} }} return\n",
                excl4.join(", ")
            ));
        }
        if !excl6.is_empty() {
            s.push_str(&format!(
                "\t\tiifname \"{dev}\" ip6 daddr {{ {} }} return\n",
                excl6.join(", ")
            ));
        }
        if let Some(p) = self.v4_port {
            s.push_str(&format!(
                "\t\tiifname \"{dev}\" meta l4proto tcp tproxy ip to :{p} meta mark set {mark:#x} accept\n"
            ));
        }
        if let Some(p) = self.v6_port {
            s.push_str(&format!(
                "\t\tiifname \"{dev}\" meta l4proto tcp tproxy ip6 to :{p} meta mark set {mark:#x} accept\n"
            ));
        }
        if self.udp_block {
            let family = match (self.v4_port, self.v6_port) {
                (Some(_), None) => "meta nfproto ipv4 ",
                (None, Some(_)) => "meta nfproto ipv6 ",
                _ => "",
            };
            s.push_str(&format!(
                "\t\tiifname \"{dev}\" {family}udp dport != 53 fib daddr type != {{ local, broadcast, multicast }} reject with icmpx type port-unreachable\n"
            ));
        }
        s.push_str("\t}\n}\n");
        Ok(s)
    }

    /// The `ip` arguments adding this family's rule and route (`v6` selects IPv6).
    fn ip_rule_args(&self, v6: bool) -> Vec<String> {
        let fam = if v6 { "-6" } else { "-4" };
        vec![
            fam.into(),
            "rule".into(),
            "add".into(),
            "fwmark".into(),
            format!("{:#x}", self.fwmark),
            "lookup".into(),
            self.route_table.to_string(),
        ]
    }

    fn ip_route_args(&self, v6: bool) -> Vec<String> {
        let (fam, any) = if v6 {
            ("-6", "::/0")
        } else {
            ("-4", "0.0.0.0/0")
        };
        vec![
            fam.into(),
            "route".into(),
            "add".into(),
            "local".into(),
            any.into(),
            "dev".into(),
            "lo".into(),
            "table".into(),
            self.route_table.to_string(),
        ]
    }
}

/// `args` with the verb at index 2 (`add`) replaced by `del`.
fn deleting(mut args: Vec<String>) -> Vec<String> {
    args[2] = "del".into();
    args
}

fn run(program: &str, args: &[String], stdin: Option<&str>) -> Result<String, InterceptError> {
    let cmd = format!("{program} {}", args.join(" "));
    let spawn_err = |source| InterceptError::Spawn {
        cmd: cmd.clone(),
        source,
    };
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_err)?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // nft reads its whole input before it answers, so this cannot deadlock. A failed
        // write (nft exited early) shows up as its exit status and stderr below.
        let _ = pipe.write_all(text.as_bytes());
    }
    let out = child.wait_with_output().map_err(spawn_err)?;
    if !out.status.success() {
        return Err(InterceptError::Command {
            cmd,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Does `nft list tables` (in the current namespace) show `inet TABLE`?
fn table_exists(table: &str) -> Result<bool, InterceptError> {
    let out = run("nft", &["list".into(), "tables".into()], None)?;
    let want = format!("table inet {table}");
    Ok(out.lines().any(|l| l.trim() == want))
}

/// Remove whatever a previous install with these options (or a crashed relay) left behind in
/// the current network namespace: the nftables table, every `fwmark MARK lookup TABLE` rule
/// and the `local` default routes in TABLE, for both families. Absent pieces are fine.
pub fn remove_leftovers(opts: &TproxyOptions) -> Result<(), InterceptError> {
    opts.validate()?;
    if table_exists(&opts.table)? {
        run(
            "nft",
            &[
                "delete".into(),
                "table".into(),
                "inet".into(),
                opts.table.clone(),
            ],
            None,
        )?;
    }
    for v6 in [false, true] {
        let del = deleting(opts.ip_rule_args(v6));
        for _ in 0..MAX_STALE_RULES {
            if run("ip", &del, None).is_err() {
                break;
            }
        }
        let _ = run("ip", &deleting(opts.ip_route_args(v6)), None);
    }
    Ok(())
}

/// The network namespace a value was created in.
#[derive(Debug)]
struct Netns {
    file: File,
    dev: u64,
    ino: u64,
}

impl Netns {
    fn current() -> Result<Netns, InterceptError> {
        let path = "/proc/thread-self/ns/net";
        let err = |source| InterceptError::Namespace {
            what: format!("open {path}"),
            source,
        };
        let file = File::open(path).map_err(err)?;
        let meta = file.metadata().map_err(err)?;
        Ok(Netns {
            file,
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    fn is_current(&self) -> bool {
        std::fs::metadata("/proc/thread-self/ns/net")
            .map(|m| m.dev() == self.dev && m.ino() == self.ino)
            .unwrap_or(false)
    }

    /// Run `f` inside this namespace: directly if the calling thread is already there,
    /// otherwise on a short-lived thread that enters it (needs CAP_SYS_ADMIN).
    fn run<T: Send>(
        &self,
        f: impl FnOnce() -> Result<T, InterceptError> + Send,
    ) -> Result<T, InterceptError> {
        if self.is_current() {
            return f();
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                nix::sched::setns(self.file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(|e| InterceptError::Namespace {
                        what: "enter the namespace the interception was installed in".into(),
                        source: e.into(),
                    })?;
                f()
            })
            .join()
            .unwrap_or_else(|_| {
                Err(InterceptError::Namespace {
                    what: "teardown thread".into(),
                    source: io::Error::other("panicked"),
                })
            })
        })
    }
}

/// Held by the relay that manages an interception table in its network namespace for as long
/// as it runs: an abstract Unix socket named after the table. Abstract names belong to the
/// network namespace, as the table does, and the kernel frees the name when the process ends,
/// however it ends. `relay --remove-interception` (a socket unit's `ExecStopPost`) takes it
/// before it removes anything, so it never pulls the rules from under a relay that still runs
/// or drains: systemd stops a socket unit and its service side by side.
#[derive(Debug)]
pub struct InterceptionLock {
    _name: std::os::unix::net::UnixListener,
}

impl InterceptionLock {
    /// Takes the lock of `table`, waiting up to `wait` while another process holds it;
    /// `None` if it still does then.
    pub fn acquire(table: &str, wait: std::time::Duration) -> io::Result<Option<InterceptionLock>> {
        use std::os::linux::net::SocketAddrExt as _;
        let name = format!("polycorn/interception/{table}");
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        let deadline = std::time::Instant::now() + wait;
        loop {
            match std::os::unix::net::UnixListener::bind_addr(&addr) {
                Ok(l) => return Ok(Some(InterceptionLock { _name: l })),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                    if std::time::Instant::now() >= deadline {
                        return Ok(None);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Installed TPROXY interception; removed by [`NftTproxy::uninstall`] or on drop.
#[derive(Debug)]
pub struct NftTproxy {
    opts: TproxyOptions,
    netns: Netns,
    table: bool,
    /// Installed `ip` commands (rule and route per family), removed in reverse order.
    ip_added: Vec<Vec<String>>,
}

impl NftTproxy {
    /// Install interception in the calling thread's network namespace: remove leftovers of
    /// the same name, load the ruleset, add the rule and route for each family with a port.
    /// On failure, what was added is removed again.
    ///
    /// Start the [`transparent_listener`]s before or right after; until they listen,
    /// intercepted connection attempts are reset.
    pub fn install(opts: TproxyOptions) -> Result<NftTproxy, InterceptError> {
        let ruleset = opts.ruleset()?;
        let netns = Netns::current()?;
        remove_leftovers(&opts)?;
        let mut me = NftTproxy {
            opts,
            netns,
            table: false,
            ip_added: Vec::new(),
        };
        let res = me.add_all(&ruleset);
        if let Err(e) = res {
            let _ = me.uninstall();
            return Err(e);
        }
        tracing::info!(
            table = %me.opts.table,
            lan = %me.opts.lan_device,
            v4_port = ?me.opts.v4_port,
            v6_port = ?me.opts.v6_port,
            udp_block = me.opts.udp_block,
            "transparent interception installed"
        );
        Ok(me)
    }

    fn add_all(&mut self, ruleset: &str) -> Result<(), InterceptError> {
        run("nft", &["-f".into(), "-".into()], Some(ruleset)).map_err(|e| match e {
            InterceptError::Command { cmd, stderr } => InterceptError::Command {
                cmd: format!("{cmd} (table inet {})", self.opts.table),
                stderr,
            },
            other => other,
        })?;
        self.table = true;
        for (v6, port) in [(false, self.opts.v4_port), (true, self.opts.v6_port)] {
            if port.is_none() {
                continue;
            }
            for args in [self.opts.ip_rule_args(v6), self.opts.ip_route_args(v6)] {
                run("ip", &args, None)?;
                self.ip_added.push(args);
            }
        }
        Ok(())
    }

    /// The options it was installed with.
    pub fn options(&self) -> &TproxyOptions {
        &self.opts
    }

    /// Leave the interception installed when this value is dropped (the listeners outlive
    /// this process: systemd socket activation). The next [`NftTproxy::install`] of the same
    /// name replaces it; [`remove_leftovers`] removes it.
    pub fn leave_installed(&mut self) {
        self.table = false;
        self.ip_added.clear();
    }

    /// Remove exactly what was installed (idempotent). Tries every piece and returns the
    /// first failure.
    pub fn uninstall(&mut self) -> Result<(), InterceptError> {
        if !self.table && self.ip_added.is_empty() {
            return Ok(());
        }
        let table = self.opts.table.clone();
        let had_table = self.table;
        let added = std::mem::take(&mut self.ip_added);
        self.table = false;
        let res = self.netns.run(move || {
            let mut first: Option<InterceptError> = None;
            for args in added.into_iter().rev() {
                if let Err(e) = run("ip", &deleting(args), None) {
                    first.get_or_insert(e);
                }
            }
            if had_table {
                let args = ["delete".into(), "table".into(), "inet".into(), table];
                if let Err(e) = run("nft", &args, None) {
                    first.get_or_insert(e);
                }
            }
            first.map_or(Ok(()), Err)
        });
        if res.is_ok() {
            tracing::info!(table = %self.opts.table, "transparent interception removed");
        }
        res
    }
}

impl Drop for NftTproxy {
    fn drop(&mut self) {
        if let Err(e) = self.uninstall() {
            tracing::warn!(table = %self.opts.table, "removing transparent interception: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One holder at a time per table name; a waiter gets the lock as soon as the holder
    /// ends, and gives up after its wait while the holder lives.
    #[test]
    fn the_interception_lock_has_one_holder_and_frees_at_its_end() {
        let table = format!("lock_test_{}", std::process::id());
        let held = InterceptionLock::acquire(&table, std::time::Duration::ZERO)
            .unwrap()
            .expect("free at first");
        let t0 = std::time::Instant::now();
        assert!(
            InterceptionLock::acquire(&table, std::time::Duration::from_millis(300))
                .unwrap()
                .is_none()
        );
        assert!(t0.elapsed() >= std::time::Duration::from_millis(300));
        assert!(
            InterceptionLock::acquire(&format!("{table}_other"), std::time::Duration::ZERO)
                .unwrap()
                .is_some()
        );
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            drop(held);
        });
        assert!(
            InterceptionLock::acquire(&table, std::time::Duration::from_secs(10))
                .unwrap()
                .is_some(),
            "the waiter gets it once the holder is gone"
        );
        releaser.join().unwrap();
    }

    #[test]
    fn ruleset_text() {
        let mut o = TproxyOptions::new("polycorn_test", "br-lan");
        o.v4_port = Some(7001);
        o.v6_port = Some(7002);
        o.exclude = vec![
            "10.0.0.0/8".parse().unwrap(),
            "10.1.0.0/16".parse().unwrap(),
            "192.168.1.7/24".parse().unwrap(),
            "fd00::/8".parse().unwrap(),
        ];
        o.udp_block = true;
        let r = o.ruleset().unwrap();
        assert!(r.contains("table inet polycorn_test {}\ndelete table inet polycorn_test\n"));
        assert!(r.contains("priority mangle"));
        assert!(
            r.contains("ip daddr { 10.0.0.0/8, 192.168.1.0/24 } return"),
            "{r}"
        );
        assert!(r.contains("ip6 daddr { fd00::/8 } return"), "{r}");
        assert!(r.contains(
            "iifname \"br-lan\" meta l4proto tcp tproxy ip to :7001 meta mark set 0x70c accept"
        ));
        assert!(r.contains("tproxy ip6 to :7002 meta mark set 0x70c accept"));
        assert!(r.contains("iifname \"br-lan\" udp dport != 53"), "{r}");

        o.v6_port = None;
        o.exclude.clear();
        let r = o.ruleset().unwrap();
        assert!(!r.contains("ip6"), "{r}");
        assert!(!r.contains("daddr {"), "{r}");
        assert!(r.contains("meta nfproto ipv4 udp dport != 53"), "{r}");
    }

    #[test]
    fn invalid_options_are_refused() {
        let ok = {
            let mut o = TproxyOptions::new("polycorn_x", "eth0");
            o.v4_port = Some(1);
            o
        };
        assert!(ok.ruleset().is_ok());
        let cases: Vec<(TproxyOptions, &str)> = vec![
            (
                TproxyOptions::new("polycorn_x", "eth0"),
                "nothing to intercept",
            ),
            (
                TproxyOptions {
                    table: "bad name".into(),
                    ..ok.clone()
                },
                "table name",
            ),
            (
                TproxyOptions {
                    table: "1abc".into(),
                    ..ok.clone()
                },
                "table name",
            ),
            (
                TproxyOptions {
                    lan_device: "eth0\" accept".into(),
                    ..ok.clone()
                },
                "LAN device",
            ),
            (
                TproxyOptions {
                    lan_device: "a-very-long-device".into(),
                    ..ok.clone()
                },
                "LAN device",
            ),
            (
                TproxyOptions {
                    fwmark: 0,
                    ..ok.clone()
                },
                "fwmark",
            ),
            (
                TproxyOptions {
                    route_table: 254,
                    ..ok.clone()
                },
                "reserved",
            ),
            (
                TproxyOptions {
                    v6_port: Some(0),
                    ..ok.clone()
                },
                "port 0",
            ),
        ];
        for (o, want) in cases {
            let e = o.ruleset().unwrap_err().to_string();
            assert!(e.contains(want), "{o:?}: {e}");
        }
    }
}
