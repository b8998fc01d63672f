//! Relay and proxy as an operator runs them (`polycorn relay|proxy --config`), in the testbed's
//! namespaces: client — relay — N emulated paths — proxy — server. Every transfer is checked
//! byte by byte (polycorn_net::loadgen). Root only; tests run one at a time (they share CPU).

#[path = "../support/prometheus.rs"]
mod prometheus;

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use polycorn_emu::netns::{ip_in, InNamespace};
use polycorn_net::loadgen;
use tokio::net::{TcpSocket, TcpStream};

static SERIAL: Mutex<()> = Mutex::new(());

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_polycorn")
}

fn is_root() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root && std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("relay/proxy tests need root and CI=true forbids skipping them");
    }
    if !root {
        eprintln!("skipped: needs root");
    }
    root
}

/// A testbed; removed on drop.
struct Bed {
    name: String,
}

impl Bed {
    fn up(tag: &str, model: &[&str]) -> Bed {
        let name = format!("rp{}{tag}", std::process::id() % 10_000);
        let _ = Command::new(bin())
            .args(["testbed", "down", "--name", &name])
            .output();
        let mut args = vec!["testbed", "up", "--name", &name];
        args.extend_from_slice(model);
        let out = Command::new(bin()).args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "testbed up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Bed { name }
    }
    /// Two paths of constant capacity and one-way delay.
    fn constant(tag: &str, mbit: u32, delay_ms: u32) -> Bed {
        let (mbit, delay_ms) = (mbit.to_string(), delay_ms.to_string());
        Bed::up(
            tag,
            &[
                "--paths",
                "2",
                "--constant-mbit",
                &mbit,
                "--delay-ms",
                &delay_ms,
            ],
        )
    }
    fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.name)
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let out = Command::new(bin())
            .args(["testbed", "down", "--name", &self.name])
            .output();
        if let Ok(o) = out {
            if !o.status.success() {
                eprintln!("testbed down: {}", String::from_utf8_lossy(&o.stderr));
            }
        }
    }
}

/// A `polycorn relay|proxy` process in a namespace; SIGTERM then SIGKILL on drop.
struct Daemon {
    child: Child,
    log: PathBuf,
    /// How it exited, once [`Daemon::stop`] saw it go.
    exited: Option<std::process::ExitStatus>,
}

impl Daemon {
    fn start(ns: &str, role: &str, config: &Path, log: PathBuf) -> Daemon {
        let f = std::fs::File::create(&log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns, bin(), role, "--config"])
            .arg(config)
            // POLYCORN_TEST_LOG raises the daemons' log level when debugging a failure.
            .env(
                "RUST_LOG",
                std::env::var("POLYCORN_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::null())
            .stderr(f)
            .spawn()
            .unwrap();
        Daemon {
            child,
            log,
            exited: None,
        }
    }
    /// SIGKILL: a crash, or the machine losing power (no goodbye to the peer).
    fn crash(&mut self) {
        self.child.kill().unwrap();
        self.exited = Some(self.child.wait().unwrap());
    }
    /// SIGTERM (what `systemctl stop` sends); waits up to 10 s for the exit and returns it.
    fn stop(&mut self) -> std::process::ExitStatus {
        self.terminate();
        self.wait_exit()
    }
    /// SIGTERM, without waiting.
    fn terminate(&self) {
        assert!(Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success());
    }
    /// Waits up to 10 s for the exit and returns it.
    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                self.exited = Some(st);
                return st;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no exit within 10 s of SIGTERM:\n{}",
                tail(&self.log())
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    /// SIGHUP (what `systemctl reload` sends).
    fn hangup(&self) {
        assert!(Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success());
    }
    fn wait_for(&mut self, what: &str, count: usize) {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            if self.log().matches(what).count() >= count {
                return;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("daemon exited ({st}) before `{what}`:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no `{what}` ×{count} within 20 s:\n{}", self.log());
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.exited.is_some() {
            return;
        }
        let pid = self.child.id() as i32;
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Stack {
    dir: tempfile::TempDir,
    proxy: Daemon,
    relay: Daemon,
}

impl Stack {
    /// Starts `role` (`relay` or `proxy`) again with its configuration, logging to `log` in the
    /// stack's directory (after a stop or a crash).
    fn start_again(&mut self, bed: &Bed, role: &str, log: &str) {
        let d = Daemon::start(
            &bed.ns(role),
            role,
            &self.dir.path().join(format!("{role}.toml")),
            self.dir.path().join(log),
        );
        match role {
            "relay" => self.relay = d,
            _ => self.proxy = d,
        }
    }
}

fn configs(
    bed: &Bed,
    dir: &Path,
    mode: &str,
    spec: &str,
    paths: usize,
    extra: (&str, &str),
) -> (PathBuf, PathBuf) {
    // Leading `key = value` lines of the relay's extra text belong to `[relay]`; the rest
    // (tables) is appended.
    // The first line that opens a table.
    let table_start = |text: &str| {
        if text.starts_with('[') {
            0
        } else {
            text.find("\n[").map_or(text.len(), |i| i + 1)
        }
    };
    let (relay_keys, relay_tables) = extra.0.split_at(table_start(extra.0));
    // cubic unless the extra keys choose a congestion control.
    let cc = |keys: &str| {
        if keys.contains("congestion =") {
            ""
        } else {
            "congestion = \"cubic\"\n"
        }
    };
    let mut relay = format!(
        "[relay]\nmode = \"{mode}\"\nscheduler = \"{spec}\"\nproxy = \"10.100.0.2:7700\"\n{}{relay_keys}\n",
        cc(relay_keys)
    );
    for i in 0..paths {
        relay += &format!(
            "[[path]]\nname = \"p{i}\"\ndevice = \"path{i}\"\nsource = \"10.100.{i}.1\"\nproxy = \"10.100.{i}.2:7700\"\n\n"
        );
    }
    relay += "[intercept]\ntransparent = \"0.0.0.0:7070\"\ntransparent6 = \"[::]:7070\"\nsocks5 = \"10.0.1.1:1080\"\ninstall_nft = true\nlan_device = \"lan0\"\n\n";
    relay += "[dns]\nlisten = \"10.0.1.1:53\"\nupstream = \"10.0.2.2:53\"\n\n[tls]\nca = \"ca.pem\"\ncert = \"relay.pem\"\nkey = \"relay.key\"\n\n[metrics]\nlisten = \"127.0.0.1:9100\"\n";
    // The same for the proxy's extra text and `[proxy]`.
    let (proxy_keys, proxy_tables) = extra.1.split_at(table_start(extra.1));
    let proxy = format!(
        "[proxy]\nlisten = \"0.0.0.0:7700\"\ntunnel_listen = \"0.0.0.0:7701\"\ntunnel_peers = [\"10.100.0.0/16\"]\nscheduler = \"{spec}\"\n{}\n[tls]\nca = \"ca.pem\"\ncert = \"proxy.pem\"\nkey = \"proxy.key\"\n\n[policy]\nallow = [\"10.0.2.0/24\", \"fd00:2::/64\"]\n\n[metrics]\nlisten = \"127.0.0.1:9100\"\n",
        cc(proxy_keys)
    );
    let _ = bed;
    let relay = relay + relay_tables;
    let proxy = proxy.replacen("\n\n[tls]", &format!("\n{proxy_keys}\n[tls]"), 1) + proxy_tables;
    let r = dir.join("relay.toml");
    let p = dir.join("proxy.toml");
    std::fs::File::create(&r)
        .unwrap()
        .write_all(relay.as_bytes())
        .unwrap();
    std::fs::File::create(&p)
        .unwrap()
        .write_all(proxy.as_bytes())
        .unwrap();
    (r, p)
}

fn start_stack(bed: &Bed, mode: &str, spec: &str, paths: usize) -> Stack {
    start_stack_with(
        bed,
        mode,
        spec,
        paths,
        ("", ""),
        tempfile::tempdir().unwrap(),
    )
}

fn start_stack_with(
    bed: &Bed,
    mode: &str,
    spec: &str,
    paths: usize,
    extra: (&str, &str),
    dir: tempfile::TempDir,
) -> Stack {
    generate_credentials(dir.path());
    let (r, p) = configs(bed, dir.path(), mode, spec, paths, extra);
    let subflows = if mode == "polycorn" { paths } else { 0 };
    start_daemons(bed, dir, &r, &p, subflows)
}

/// A fresh credential set (`polycorn tls generate`) in `dir`.
fn generate_credentials(dir: &Path) {
    let out = Command::new(bin())
        .args(["tls", "generate"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Proxy, then relay, from the configuration files `p` and `r` in `dir`; waits for `subflows`
/// subflows to come up.
fn start_daemons(bed: &Bed, dir: tempfile::TempDir, r: &Path, p: &Path, subflows: usize) -> Stack {
    let mut proxy = Daemon::start(&bed.ns("proxy"), "proxy", p, dir.path().join("proxy.log"));
    proxy.wait_for("proxy running", 1);
    let mut relay = Daemon::start(&bed.ns("relay"), "relay", r, dir.path().join("relay.log"));
    relay.wait_for("relay running", 1);
    if subflows > 0 {
        relay.wait_for("subflow up", subflows);
    }
    Stack { dir, proxy, relay }
}

/// `configs` for two paths in mode `mode` (scheduler `polycorn`) in a fresh credentials
/// directory, the relay's file passed through `relay` and the proxy's through `proxy` before
/// both daemons start (as [`start_daemons`]).
/// [`start_edited`] in polycorn mode with two subflows, `relay_key` added to `[relay]` and
/// `proxy_key` to `[proxy]` (one `key = value` line each).
fn start_with_keys(bed: &Bed, relay_key: &str, proxy_key: &str) -> Stack {
    let relay = |t: String| t.replacen("\n[[path]]", &format!("{relay_key}\n\n[[path]]"), 1);
    let proxy = |t: String| t.replacen("\n\n[tls]", &format!("\n{proxy_key}\n\n[tls]"), 1);
    let stack = start_edited(bed, "polycorn", relay, proxy, 2);
    for (file, key) in [("relay.toml", relay_key), ("proxy.toml", proxy_key)] {
        let text = std::fs::read_to_string(stack.dir.path().join(file)).unwrap();
        assert!(text.contains(key), "{file} lacks `{key}`:\n{text}");
    }
    stack
}

fn start_edited(
    bed: &Bed,
    mode: &str,
    relay: impl FnOnce(String) -> String,
    proxy: impl FnOnce(String) -> String,
    subflows: usize,
) -> Stack {
    let dir = tempfile::tempdir().unwrap();
    generate_credentials(dir.path());
    let (r, p) = configs(bed, dir.path(), mode, "polycorn", 2, ("", ""));
    for (file, edit) in [
        (&r, Box::new(relay) as Box<dyn FnOnce(String) -> String>),
        (&p, Box::new(proxy)),
    ] {
        let text = edit(std::fs::read_to_string(file).unwrap());
        std::fs::write(file, text).unwrap();
    }
    start_daemons(bed, dir, &r, &p, subflows)
}

/// Polls `done` every 200 ms until it holds; panics after `secs` with `what` and `log`'s tail.
fn wait_until(
    secs: u64,
    what: &str,
    log: impl Fn() -> String,
    mut done: impl FnMut() -> bool,
) -> Duration {
    let t0 = Instant::now();
    while !done() {
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "{what} within {secs} s:\n{}",
            tail(&log())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    t0.elapsed()
}

/// Run `f` on a fresh single-threaded runtime in namespace `ns`.
fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = T>>> + Send + 'static,
) -> T {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        let _g = InNamespace::enter(&ns).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(f())
    })
    .join()
    .unwrap()
}

/// Start the checked server on 10.0.2.2:9000 and [fd00:2::2]:9000 (thread lives on).
fn start_server(bed: &Bed) {
    let ns = bed.ns("server");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _g = InNamespace::enter(&ns).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l4 = tokio::net::TcpListener::bind("10.0.2.2:9000")
                .await
                .unwrap();
            let l6 = tokio::net::TcpListener::bind("[fd00:2::2]:9000")
                .await
                .unwrap();
            tx.send(()).unwrap();
            let dns = tokio::net::TcpListener::bind("10.0.2.2:53").await.unwrap();
            tokio::join!(loadgen::serve(l4), loadgen::serve(l6), dns_over_tcp(dns));
        });
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
}

/// A resolver that answers every query over TCP with one A record 192.0.2.1 (same ID and
/// question), enough to check that passengers' DNS goes through relay and proxy.
async fn dns_over_tcp(l: tokio::net::TcpListener) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        let Ok((mut s, _)) = l.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let mut len = [0u8; 2];
            if s.read_exact(&mut len).await.is_err() {
                return;
            }
            let mut q = vec![0u8; usize::from(u16::from_be_bytes(len))];
            if s.read_exact(&mut q).await.is_err() || q.len() < 12 {
                return;
            }
            let mut r = q.clone();
            r[2] = 0x81; // response, recursion desired
            r[3] = 0x80; // recursion available, no error
            r[6..8].copy_from_slice(&1u16.to_be_bytes()); // one answer
            r.extend_from_slice(&[0xC0, 0x0C, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1]);
            let mut out = (r.len() as u16).to_be_bytes().to_vec();
            out.extend_from_slice(&r);
            let _ = s.write_all(&out).await;
        });
    }
}

const SERVER4: &str = "10.0.2.2:9000";
const SERVER6: &str = "[fd00:2::2]:9000";

async fn socks_connect(dst: SocketAddr) -> std::io::Result<TcpStream> {
    socks_connect_via("10.0.1.1:1080", dst).await
}

/// A SOCKS5 CONNECT to `dst` through the listener at `socks`.
async fn socks_connect_via(socks: &str, dst: SocketAddr) -> std::io::Result<TcpStream> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = TcpStream::connect(socks).await?;
    s.write_all(&[5, 1, 0]).await?;
    let mut r = [0u8; 2];
    s.read_exact(&mut r).await?;
    let mut req = vec![5, 1, 0];
    match dst.ip() {
        IpAddr::V4(a) => {
            req.push(1);
            req.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            req.push(4);
            req.extend_from_slice(&a.octets());
        }
    }
    req.extend_from_slice(&dst.port().to_be_bytes());
    s.write_all(&req).await?;
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).await?;
    if rep[1] != 0 {
        return Err(std::io::Error::other(format!("SOCKS5 reply {}", rep[1])));
    }
    Ok(s)
}

#[derive(Clone, Copy, Debug)]
enum Via {
    Transparent4,
    Transparent6,
    Socks5,
}

async fn one(
    via: Via,
    up: u64,
    down: u64,
    source: Option<IpAddr>,
) -> std::io::Result<loadgen::Transfer> {
    let s = match via {
        Via::Transparent4 => match source {
            Some(src) => {
                let sock = TcpSocket::new_v4()?;
                sock.bind(SocketAddr::new(src, 0))?;
                sock.connect(SERVER4.parse().unwrap()).await?
            }
            None => TcpStream::connect(SERVER4).await?,
        },
        Via::Transparent6 => TcpStream::connect(SERVER6).await?,
        Via::Socks5 => socks_connect(SERVER4.parse().unwrap()).await?,
    };
    loadgen::transfer(s, up, down).await
}

fn transfers(bed: &Bed, list: Vec<(Via, u64, u64)>, label: &str, stack: &Stack) {
    let label = label.to_string();
    let res = in_ns(&bed.ns("client"), move || {
        Box::pin(async move {
            let mut out = Vec::new();
            for (via, up, down) in list {
                let r =
                    tokio::time::timeout(Duration::from_secs(120), one(via, up, down, None)).await;
                out.push((
                    via,
                    up,
                    down,
                    r.map_err(|_| std::io::Error::other("timed out"))
                        .and_then(|r| r),
                ));
            }
            out
        })
    });
    for (via, up, down, r) in res {
        match r {
            Ok(t) => eprintln!("{label}: {via:?} up {up} down {down}: {:.2} s", t.complete.as_secs_f64()),
            Err(e) => panic!(
                "{label}: {via:?} up {up} down {down} failed: {e}\n--- relay log ---\n{}\n--- proxy log ---\n{}",
                tail(&stack.relay.log()),
                tail(&stack.proxy.log())
            ),
        }
    }
}

/// The metrics page of the daemon listening on 127.0.0.1:9100 in namespace `ns`.
fn scrape_metrics(ns: &str) -> String {
    in_ns(ns, || {
        Box::pin(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = TcpStream::connect("127.0.0.1:9100").await.unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let mut body = String::new();
            s.read_to_string(&mut body).await.unwrap();
            body
        })
    })
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

const KB: u64 = 1024;
const MB: u64 = 1024 * 1024;

#[test]
fn every_scheduler_and_both_baselines_carry_byte_exact() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("a", 300, 5);
    start_server(&bed);
    let mut modes: Vec<(&str, &str)> = polycorn_sched::PRESETS
        .iter()
        .map(|(n, _)| ("polycorn", *n))
        .collect();
    modes.push(("mptcp", "minrtt"));
    modes.push(("single", "minrtt"));
    for (mode, spec) in modes {
        let stack = start_stack(&bed, mode, spec, 2);
        let list = vec![
            (Via::Transparent4, KB, KB),
            (Via::Transparent4, MB, 64 * MB),
            (Via::Transparent4, 64 * MB, KB),
            (Via::Transparent6, 100 * KB, MB),
            (Via::Socks5, KB, 64 * MB),
            (Via::Socks5, 3 * MB, 1),
        ];
        transfers(&bed, list, &format!("{mode}/{spec}"), &stack);
        drop(stack);
    }
}

/// Carriers that give the SIMs IPv6 addresses only: every path's source and proxy address
/// IPv6 (the testbed's paths are dual-stack), passengers on IPv4 and IPv6, byte-exact, in
/// polycorn mode and single-path mode; then one IPv6 path beside an IPv4 one in one session.
#[test]
fn ipv6_only_carriers_carry_byte_exact() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("v6", 50, 10);
    start_server(&bed);
    for (mode, v6_paths) in [("polycorn", 2), ("single", 2), ("polycorn", 1)] {
        // Mixed families: the proxy as one host name with an IPv4 and an IPv6 address; each
        // path takes the address of its own family.
        let _hosts = (v6_paths == 1).then(|| {
            let hosts = NetnsHosts::new(&bed.ns("relay"));
            std::fs::write(
                hosts.dir.join("hosts"),
                "127.0.0.1 localhost\n10.100.1.2 proxy.polycorn.test\nfd00:100::2 proxy.polycorn.test\n",
            )
            .unwrap();
            hosts
        });
        let relay_edit = |mut relay: String| {
            for i in 0..v6_paths {
                relay = relay
                    .replace(
                        &format!("\"10.100.{i}.2:7700\""),
                        &format!("\"[fd00:100:{i}::2]:7700\""),
                    )
                    .replace(
                        &format!("\"10.100.{i}.1\""),
                        &format!("\"fd00:100:{i}::1\""),
                    );
            }
            assert_eq!(relay.contains("10.100."), v6_paths < 2, "{relay}");
            if v6_paths == 1 {
                relay = relay
                    .replace("proxy = \"[fd00:100:0::2]:7700\"\n", "")
                    .replace("proxy = \"10.100.1.2:7700\"\n", "")
                    .replacen(
                        "[relay]\n",
                        "[relay]\nproxy = \"proxy.polycorn.test:7700\"\n",
                        1,
                    );
            }
            relay
        };
        // The proxy listens on both families; the single-path baseline's tunnels come from
        // the relay's IPv6 path addresses.
        let proxy_edit = |proxy: String| {
            proxy
                .replace(
                    "listen = \"0.0.0.0:7700\"",
                    "listen = [\"0.0.0.0:7700\", \"[::]:7700\"]",
                )
                .replace(
                    "tunnel_listen = \"0.0.0.0:7701\"",
                    "tunnel_listen = \"[::]:7701\"",
                )
                .replace("[\"10.100.0.0/16\"]", "[\"fd00:100::/32\"]")
        };
        let subflows = if mode == "polycorn" { 2 } else { 0 };
        let stack = start_edited(&bed, mode, relay_edit, proxy_edit, subflows);
        if mode == "polycorn" {
            let log = stack.relay.log();
            let (first, second) = if v6_paths == 2 {
                (
                    "path=p0 proxy=[fd00:100::2]:7700",
                    "path=p1 proxy=[fd00:100:1::2]:7700",
                )
            } else {
                (
                    "path=p0 proxy=proxy.polycorn.test:7700 addr=[fd00:100::2]:7700",
                    "path=p1 proxy=proxy.polycorn.test:7700 addr=10.100.1.2:7700",
                )
            };
            assert!(log.contains(first) && log.contains(second), "{log}");
        }
        let list = vec![
            (Via::Transparent4, KB, KB),
            (Via::Transparent4, MB, 16 * MB),
            (Via::Transparent6, 100 * KB, 4 * MB),
            (Via::Socks5, 3 * MB, 1),
        ];
        transfers(
            &bed,
            list,
            &format!("{v6_paths} IPv6 paths of 2, {mode}"),
            &stack,
        );
        if mode == "polycorn" {
            // The proxy names the train's paths as the relay's Hellos did.
            let m = scrape_metrics(&bed.ns("proxy"));
            for path in ["p0", "p1"] {
                let up = format!("polycorn_path_up{{path=\"{path}\",relay=\"polycorn-relay\"}} 1");
                assert!(m.contains(&up), "no {up}:\n{m}");
            }
        }
    }
}

/// A train with SIMs of four carriers: four subflows up, every path carrying part of a bulk
/// download, and a download that survives two of the four blacked out.
#[test]
fn four_carriers_share_the_load_and_survive_two_blacked_out() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::up(
        "c4",
        &["--paths", "4", "--constant-mbit", "20", "--delay-ms", "15"],
    );
    start_server(&bed);
    let stack = start_stack(&bed, "polycorn", "polycorn", 4);
    let sent = |m: &str, path: usize| -> f64 {
        let key =
            format!("polycorn_path_sent_bytes_total{{path=\"p{path}\",relay=\"polycorn-relay\"}} ");
        m.lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key}in\n{m}"))
    };
    transfers(
        &bed,
        vec![
            (Via::Transparent4, 16 * MB, KB),
            (Via::Transparent6, KB, 16 * MB),
        ],
        "4 carriers",
        &stack,
    );
    // Uplink bytes the relay sent on each path: a 16 MB upload at 4 × 20 Mbit/s needs them all.
    let m = scrape_metrics(&bed.ns("relay"));
    for path in 0..4 {
        assert!(
            sent(&m, path) > 1e6,
            "path p{path} carried {} B:\n{m}",
            sent(&m, path)
        );
    }
    transfer_with_outage(
        &bed,
        &stack,
        &["path0", "path2"],
        Duration::from_secs(2),
        Duration::from_secs(5),
    );
}

/// A carrier that drops every packet over 1400 bytes and sends no ICMP (a path-MTU black
/// hole): the path's subflows connect (the handshake's packets are small) and then fall silent
/// under data, again and again. The relay says what this looks like and what to set; with
/// `mtu = 1400` on that path its subflow carries the data without falling silent.
#[test]
fn a_path_mtu_black_hole_is_named_and_the_path_mtu_setting_cures_it() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("mtu", 20, 15);
    start_server(&bed);
    let hole = "  chain in_path0 { type filter hook ingress device \"path0\" priority 0; policy accept; ip length > 1400 drop; }\n";
    let _holes = [
        Blackhole::with_rules(&bed.ns("relay"), hole),
        Blackhole::with_rules(&bed.ns("proxy"), hole),
    ];
    let received_p0 = |ns: &str| -> f64 {
        let key = "polycorn_path_received_bytes_total{path=\"p0\",relay=\"polycorn-relay\"} ";
        let m = scrape_metrics(ns);
        m.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key}in\n{m}"))
    };
    {
        let stack = start_stack(&bed, "polycorn", "polycorn", 2);
        transfers(
            &bed,
            vec![(Via::Transparent4, KB, 8 * MB)],
            "black hole",
            &stack,
        );
        let t0 = Instant::now();
        while !stack.relay.log().contains("path-MTU black hole") {
            if t0.elapsed() > Duration::from_secs(30) {
                panic!("no black-hole warning:\n{}", tail(&stack.relay.log()));
            }
            transfers(
                &bed,
                vec![(Via::Transparent4, KB, 2 * MB)],
                "black hole",
                &stack,
            );
        }
        let log = stack.relay.log();
        let hint = log
            .lines()
            .find(|l| l.contains("path-MTU black hole"))
            .unwrap();
        assert!(
            hint.contains("WARN") && hint.contains("path=p0") && hint.contains("mtu = 1400"),
            "{hint}"
        );
        assert!(!log
            .lines()
            .any(|l| l.contains("black hole") && l.contains("path=p1")));
        // The pre-service check finds it too: the probe sent to the proxy is lost.
        let (code, text) = check_paths(&bed, &stack);
        eprintln!("{text}");
        assert_eq!(code, Some(1), "{text}");
        let l = line(&text, "p0");
        for want in [
            "p0 (path0, 10.100.0.1): FAILED",
            "did not arrive",
            "path-MTU black hole",
        ] {
            assert!(l.contains(want), "`{want}` in {l}");
        }
        assert!(line(&text, "p1").contains(": ok,"), "{text}");
    }
    let stack = start_edited(
        &bed,
        "polycorn",
        |r| {
            r.replacen(
                "source = \"10.100.0.1\"\n",
                "source = \"10.100.0.1\"\nmtu = 1400\n",
                1,
            )
        },
        |p| p,
        2,
    );
    let before = received_p0(&bed.ns("relay"));
    transfers(
        &bed,
        vec![(Via::Transparent4, KB, 16 * MB)],
        "mtu = 1400",
        &stack,
    );
    let carried = received_p0(&bed.ns("relay")) - before;
    let log = stack.relay.log();
    assert!(
        !log.lines()
            .any(|l| l.contains("path=p0")
                && (l.contains("path silent") || l.contains("black hole"))),
        "{}",
        tail(&log)
    );
    assert!(carried > 2e6, "p0 carried {carried} B of 16 MB");
    let (code, text) = check_paths(&bed, &stack);
    assert_eq!(code, Some(0), "with `mtu = 1400` the check passes:\n{text}");
    // 1400 less the IP and TCP headers, less TCP's timestamps.
    assert!(line(&text, "p0").contains("MSS 1348"), "{text}");
    drop(stack);
    // The baselines' tunnels take the setting too: the single-path tunnel of the one passenger
    // (path p0, the black hole's) and kernel MPTCP (one socket option for all its subflows).
    for mode in ["single", "mptcp"] {
        let stack = start_edited(
            &bed,
            mode,
            |r| {
                r.replacen(
                    "source = \"10.100.0.1\"\n",
                    "source = \"10.100.0.1\"\nmtu = 1400\n",
                    1,
                )
            },
            |p| p,
            0,
        );
        transfers(
            &bed,
            vec![
                (Via::Transparent4, KB, 8 * MB),
                (Via::Transparent4, 2 * MB, KB),
            ],
            &format!("{mode}, mtu = 1400 on the black hole's path"),
            &stack,
        );
    }
}

/// A modem that gets a new address when it re-attaches, on a path configured without
/// `source`: the relay connects from the interface's address of the moment, and when that
/// address goes and another comes, the path's next subflow comes from the new one.
#[test]
fn a_path_without_source_follows_its_modems_new_address() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("addr", 20, 10);
    start_server(&bed);
    let stack = start_edited(
        &bed,
        "polycorn",
        |r| r.replacen("source = \"10.100.0.1\"\n", "", 1),
        |p| p,
        2,
    );
    let up_from = |addr: &str| {
        stack
            .relay
            .log()
            .lines()
            .any(|l| l.contains("subflow up path=p0") && l.contains(&format!("source={addr}")))
    };
    assert!(up_from("10.100.0.1"), "{}", stack.relay.log());
    transfers(
        &bed,
        vec![(Via::Transparent4, KB, 4 * MB)],
        "first address",
        &stack,
    );
    // The modem re-attaches with another address.
    let ip = |args: &[&str]| {
        let out = Command::new("ip")
            .args(["netns", "exec", &bed.ns("relay"), "ip"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
    };
    ip(&["addr", "del", "10.100.0.1/24", "dev", "path0"]);
    ip(&["addr", "add", "10.100.0.7/24", "dev", "path0"]);
    let took = wait_until(
        30,
        "no subflow from the new address",
        || stack.relay.log(),
        || up_from("10.100.0.7"),
    );
    eprintln!(
        "path p0 up from its new address {:.1} s after the change",
        took.as_secs_f64()
    );
    transfers(
        &bed,
        vec![(Via::Transparent4, 4 * MB, 4 * MB)],
        "new address",
        &stack,
    );
}

/// Modems with an IPv4 and an IPv6 address, paths without `source`, and a proxy reachable
/// over IPv6 only (one path names it by address, the other by a host name with an AAAA record
/// only): each path takes its modem's IPv6 address, not the IPv4 one it would take first.
#[test]
fn a_path_without_source_takes_the_address_family_its_proxy_has() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("fam", 20, 10);
    start_server(&bed);
    let hosts = NetnsHosts::new(&bed.ns("relay"));
    std::fs::write(
        hosts.dir.join("hosts"),
        "127.0.0.1 localhost\nfd00:100:1::2 proxy6.polycorn.test\n",
    )
    .unwrap();
    let relay_edit = |relay: String| {
        relay
            .replace("source = \"10.100.0.1\"\n", "")
            .replace("source = \"10.100.1.1\"\n", "")
            .replace(
                "proxy = \"10.100.0.2:7700\"",
                "proxy = \"[fd00:100:0::2]:7700\"",
            )
            .replace(
                "proxy = \"10.100.1.2:7700\"",
                "proxy = \"proxy6.polycorn.test:7700\"",
            )
    };
    let proxy_edit = |proxy: String| {
        proxy.replace(
            "listen = \"0.0.0.0:7700\"",
            "listen = [\"0.0.0.0:7700\", \"[::]:7700\"]",
        )
    };
    let stack = start_edited(&bed, "polycorn", relay_edit, proxy_edit, 2);
    let log = stack.relay.log();
    for (path, addr, source) in [
        ("p0", "[fd00:100::2]:7700", "fd00:100::1"),
        ("p1", "[fd00:100:1::2]:7700", "fd00:100:1::1"),
    ] {
        assert!(
            log.lines().any(|l| l.contains("subflow up")
                && l.contains(&format!("path={path} "))
                && l.contains(&format!("addr={addr}"))
                && l.contains(&format!("source={source}"))),
            "{path} up from {source} to {addr}:\n{log}"
        );
    }
    transfers(
        &bed,
        vec![
            (Via::Transparent4, KB, 8 * MB),
            (Via::Transparent6, 2 * MB, KB),
        ],
        "IPv6 from dual-stack modems",
        &stack,
    );
    // `stack` stops the daemons before `hosts` goes.
}

#[test]
fn hundred_passengers_five_flows_each() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("b", 200, 10);
    start_server(&bed);
    for i in 0..100 {
        ip_in(
            &bed.ns("client"),
            &[
                "addr",
                "add",
                &format!("10.0.1.{}/24", 100 + i),
                "dev",
                "lan0",
            ],
        )
        .unwrap();
    }
    let stack = start_stack(&bed, "polycorn", "hrsch", 2);
    let results = in_ns(&bed.ns("client"), move || {
        Box::pin(async move {
            let mut set = tokio::task::JoinSet::new();
            for u in 0..100u64 {
                for f in 0..5u64 {
                    let src: IpAddr = format!("10.0.1.{}", 100 + u).parse().unwrap();
                    let (up, down) = (4 * KB + f * 1000 + u, 200 * KB + f * 17_000 + u * 13);
                    set.spawn(async move {
                        let r = tokio::time::timeout(
                            Duration::from_secs(120),
                            one(Via::Transparent4, up, down, Some(src)),
                        )
                        .await;
                        (
                            u,
                            f,
                            r.map_err(|_| std::io::Error::other("timed out"))
                                .and_then(|r| r),
                        )
                    });
                }
            }
            let mut out = Vec::new();
            while let Some(r) = set.join_next().await {
                out.push(r.unwrap());
            }
            out
        })
    });
    assert_eq!(results.len(), 500);
    let failed: Vec<String> = results
        .iter()
        .filter_map(|(u, f, r)| {
            r.as_ref()
                .err()
                .map(|e| format!("passenger {u} flow {f}: {e}"))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of 500 flows failed: {:?}\n{}",
        failed.len(),
        &failed[..failed.len().min(10)],
        tail(&stack.relay.log())
    );
    let scrape = |ns: String| scrape_metrics(&ns);
    std::thread::sleep(Duration::from_millis(1500));
    // Passengers' DNS: UDP to the relay, carried over TCP through the proxy to the resolver.
    let answer = in_ns(&bed.ns("client"), || {
        Box::pin(async move {
            let u = tokio::net::UdpSocket::bind("10.0.1.2:0").await.unwrap();
            // Query id 0x1234, one question: example.org A IN.
            let mut q = vec![0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
            q.extend_from_slice(b"\x07example\x03org\x00\x00\x01\x00\x01");
            u.send_to(&q, "10.0.1.1:53").await.unwrap();
            let mut b = [0u8; 512];
            let n = tokio::time::timeout(Duration::from_secs(5), u.recv(&mut b))
                .await
                .unwrap()
                .unwrap();
            b[..n].to_vec()
        })
    });
    assert_eq!(&answer[..2], &[0x12, 0x34], "answer carries the query id");
    assert_eq!(
        &answer[answer.len() - 4..],
        &[192, 0, 2, 1],
        "answer carries the record"
    );
    let relay_metrics = scrape(bed.ns("relay"));
    for needle in [
        "polycorn_path_rtt_seconds{path=\"p0\",relay=\"polycorn-relay\"}",
        "polycorn_path_cwnd_bytes{path=\"p1\",relay=\"polycorn-relay\"}",
        "polycorn_user_bytes_total{user=\"10.0.1.150\",direction=\"up\"}",
        "polycorn_stage_decisions_total{stage=\"minrtt\"}",
        "polycorn_path_sent_bytes_total{path=\"p0\",relay=\"polycorn-relay\"}",
        "polycorn_reorder_wait_seconds_count",
    ] {
        assert!(
            relay_metrics.contains(needle),
            "relay metrics lack {needle}:\n{relay_metrics}"
        );
    }
    let proxy_metrics = scrape(bed.ns("proxy"));
    for needle in [
        "polycorn_user_bytes_total{user=\"10.0.1.199\",direction=\"down\"}",
        // The proxy labels the session's paths with the relay's certificate name and the
        // paths' names from the relay's Hellos.
        "polycorn_path_up{path=\"p0\",relay=\"polycorn-relay\"} 1",
    ] {
        assert!(
            proxy_metrics.contains(needle),
            "proxy metrics lack {needle}:\n{proxy_metrics}"
        );
    }
    // `polycorn status`: the same endpoints, read through each daemon's configuration.
    let status_code = |role: &str, extra: &[&str]| {
        let file = stack.dir.path().join(format!("{role}.toml"));
        let out = Command::new("ip")
            .args(["netns", "exec", &bed.ns(role), bin(), "status", role])
            .arg(&file)
            .args(extra)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        (out.status.code(), text, err)
    };
    let status = |role: &str, extra: &[&str]| {
        let (code, text, err) = status_code(role, extra);
        assert_eq!(code, Some(0), "status {role} {extra:?}: {err}\n{text}");
        text
    };
    let relay_status = status("relay", &["--interval", "0.5"]);
    for (path, row) in [("p0", "polycorn-relay  p0"), ("p1", "polycorn-relay  p1")] {
        let line = relay_status
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("no row for {path}:\n{relay_status}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[2], "yes", "{path} up:\n{relay_status}");
        let rtt: f64 = cols[3].parse().expect("an RTT in ms");
        assert!(rtt > 0.0, "{relay_status}");
    }
    // The 500 passenger flows, and the DNS query's once the metrics have sampled the session.
    let since_start: u64 = relay_status
        .split(" since start")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no flow count:\n{relay_status}"));
    assert!(
        relay_status.contains("rates over 0.5 s")
            && relay_status.contains("polycorn-relay 2 of 2 paths up")
            && (500..=501).contains(&since_start),
        "{relay_status}"
    );
    let proxy_status = status("proxy", &["--interval", "0"]);
    assert!(
        proxy_status.contains("polycorn-relay 2 of 2 paths up")
            && !proxy_status.contains("rates over"),
        "{proxy_status}"
    );
    // As a monitoring check (exit status 0 OK, 2 CRITICAL) and as JSON.
    let ok = status(
        "proxy",
        &["--check", "--min-paths", "2", "--relay", "polycorn-relay"],
    );
    assert!(
        ok.starts_with("OK: polycorn-relay 2 of 2 paths up; passenger flows "),
        "{ok}"
    );
    let (code, missing, _) = status_code("proxy", &["--check", "--relay", "train-9"]);
    assert_eq!(code, Some(2), "{missing}");
    assert!(
        missing.starts_with("CRITICAL: train-9 not reporting"),
        "{missing}"
    );
    // Asked to watch LinkDB's learning, a proxy without a predictor is a warning.
    let (code, learning, _) = status_code("proxy", &["--check", "--max-ride-age-days", "2"]);
    assert_eq!(code, Some(1), "{learning}");
    assert!(
        learning.starts_with("WARNING: no LinkDB predictor, polycorn-relay 2 of 2 paths up"),
        "{learning}"
    );
    let (code, too_few, _) = status_code("relay", &["--check", "--min-paths", "3"]);
    assert_eq!(code, Some(2), "{too_few}");
    assert!(
        too_few.starts_with("CRITICAL: polycorn-relay 2 of 2 paths up"),
        "{too_few}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&status("relay", &["--json", "--interval", "0"])).unwrap();
    assert_eq!(
        json["relays"],
        serde_json::json!([{"relay": "polycorn-relay", "paths_up": 2, "paths": 2}]),
        "{json}"
    );
    assert!(
        json["paths"][0]["rtt_ms"].as_f64().is_some_and(|r| r > 0.0),
        "{json}"
    );
    let slowest = results
        .iter()
        .filter_map(|(_, _, r)| r.as_ref().ok())
        .map(|t| t.complete)
        .max()
        .unwrap();
    eprintln!(
        "500 flows byte-exact; slowest {:.2} s",
        slowest.as_secs_f64()
    );
}

/// Drop everything on the relay's `devices` (ingress and egress) until the guard is dropped.
struct Blackhole {
    ns: String,
    table: String,
}

impl Blackhole {
    fn new(ns: &str, devices: &[&str]) -> Blackhole {
        let mut rules = String::new();
        for d in devices {
            rules += &format!(
                "  chain in_{d} {{ type filter hook ingress device \"{d}\" priority 0; policy drop; }}\n  chain out_{d} {{ type filter hook egress device \"{d}\" priority 0; policy drop; }}\n"
            );
        }
        Blackhole::with_rules(ns, &rules)
    }

    /// In the namespace `ns`, drop the IPv4 packets arriving on `device` from TCP port `port`
    /// that carry payload (longer than a pure ACK with options): the data of that one
    /// connection's sender is lost on the way, while its acknowledgements and every other
    /// connection pass. (Dropping at the sender's egress instead would report a local
    /// transmit failure to its TCP, which then neither counts the segment in flight nor backs
    /// off.)
    fn incoming_data(ns: &str, device: &str, port: u16) -> Blackhole {
        Blackhole::with_rules(
            ns,
            &format!(
                "  chain in_{device} {{ type filter hook ingress device \"{device}\" priority 0; policy accept; meta protocol ip ip protocol tcp tcp sport {port} ip length > 60 drop; }}\n"
            ),
        )
    }

    fn with_rules(ns: &str, chains: &str) -> Blackhole {
        let table = "pctestdrop".to_string();
        let rules = format!("table netdev {table} {{\n{chains}}}\n");
        let mut c = Command::new("ip")
            .args(["netns", "exec", ns, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(rules.as_bytes()).unwrap();
        assert!(c.wait().unwrap().success(), "nft drop rules");
        Blackhole {
            ns: ns.into(),
            table,
        }
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns,
                "nft",
                "delete",
                "table",
                "netdev",
                &self.table,
            ])
            .status();
    }
}

fn transfer_with_outage(
    bed: &Bed,
    stack: &Stack,
    devices: &'static [&'static str],
    after: Duration,
    outage: Duration,
) {
    let ns = bed.ns("relay");
    let cut = std::thread::spawn(move || {
        std::thread::sleep(after);
        let b = Blackhole::new(&ns, devices);
        eprintln!("outage of {devices:?} for {} s", outage.as_secs());
        std::thread::sleep(outage);
        drop(b);
        eprintln!("outage over");
    });
    let r = in_ns(&bed.ns("client"), move || {
        Box::pin(async move {
            tokio::time::timeout(
                Duration::from_secs(180),
                one(Via::Transparent4, MB, 64 * MB, None),
            )
            .await
        })
    });
    cut.join().unwrap();
    match r {
        Ok(Ok(t)) => eprintln!(
            "64 MB with {devices:?} out for {} s: {:.1} s",
            outage.as_secs(),
            t.complete.as_secs_f64()
        ),
        other => panic!(
            "transfer across the outage failed: {other:?}\n--- relay ---\n{}\n--- proxy ---\n{}",
            tail(&stack.relay.log()),
            tail(&stack.proxy.log())
        ),
    }
    assert!(
        !stack.relay.log().contains("hold time"),
        "flows must not be reset"
    );
}

#[test]
fn transfers_survive_one_path_down_10s_and_all_paths_down_20s() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("c", 40, 20);
    start_server(&bed);
    let stack = start_stack(&bed, "polycorn", "hrsch", 2);
    transfer_with_outage(
        &bed,
        &stack,
        &["path0"],
        Duration::from_secs(3),
        Duration::from_secs(10),
    );
    // The proxy moved what path 0 held to path 1, and its log names the path as the relay's
    // config does (the name came in the relay's Hello).
    let log = stack.proxy.log();
    assert!(
        log.lines()
            .any(|l| l.contains("reinjected a path's unacknowledged chunks")
                && l.contains("path=0 path_name=p0")),
        "{}",
        tail(&log)
    );
    transfer_with_outage(
        &bed,
        &stack,
        &["path0", "path1"],
        Duration::from_secs(3),
        Duration::from_secs(20),
    );
    eprintln!("logs in {}", stack.dir.path().display());
}

#[test]
fn hostile_peers_are_refused_and_passengers_unaffected() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("d", 100, 10);
    start_server(&bed);
    let stack = start_stack_with(
        &bed,
        "polycorn",
        "hrsch",
        2,
        ("", "revoked_relays = [\"train-7\"]"),
        tempfile::tempdir().unwrap(),
    );
    let certs = stack.dir.path().to_path_buf();
    // Two more relays' certificates from the same CA, one per train, as an operator issues them.
    for name in ["train-7", "train-8"] {
        let out = Command::new(bin())
            .args(["tls", "relay", "--name", name])
            .arg(&certs)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("relay `{name}`")));
    }
    // The running relay's session, as the proxy logged it.
    let log = stack.proxy.log();
    let line = log
        .lines()
        .find(|l| l.contains("new relay session"))
        .unwrap_or_else(|| panic!("no session logged:\n{}", tail(&log)));
    assert!(line.contains("relay=polycorn-relay"), "{line}");
    let hex: String = line
        .split("session=")
        .nth(1)
        .unwrap()
        .trim_start_matches('"')
        .chars()
        .take(16)
        .collect();
    let relay_session = u64::from_str_radix(&hex, 16).unwrap();
    // A passenger transfer runs throughout.
    let client_ns = bed.ns("client");
    let passenger = std::thread::spawn(move || {
        in_ns(&client_ns, move || {
            Box::pin(async move {
                tokio::time::timeout(
                    Duration::from_secs(120),
                    one(Via::Transparent4, 8 * MB, 32 * MB, None),
                )
                .await
            })
        })
    });
    let other = tempfile::tempdir().unwrap();
    polycorn_net::tls::generate(other.path(), &[], false).unwrap();
    let other_dir = other.path().to_path_buf();
    in_ns(&bed.ns("relay"), move || {
        Box::pin(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let proxy: SocketAddr = "10.100.0.2:7700".parse().unwrap();
            // 1. Random bytes instead of TLS.
            let mut s = TcpStream::connect(proxy).await.unwrap();
            let junk: Vec<u8> = (0..4096u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect();
            let _ = s.write_all(&junk).await;
            let mut b = [0u8; 64];
            // At most a TLS alert comes back, then the proxy closes.
            let mut answered = Vec::new();
            let closed = loop {
                match tokio::time::timeout(Duration::from_secs(15), s.read(&mut b)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => break true,
                    Ok(Ok(n)) => answered.extend_from_slice(&b[..n]),
                    Err(_) => break false,
                }
            };
            assert!(closed, "proxy must close a non-TLS peer");
            assert!(
                answered.len() <= 7,
                "only a TLS alert may come back: {answered:?}"
            );
            // 2. TLS with a client certificate from another CA (trusting the right CA).
            let bad = polycorn_net::tls::client_config(
                &certs.join("ca.pem"),
                &other_dir.join("relay.pem"),
                &other_dir.join("relay.key"),
            )
            .unwrap();
            let tcp = TcpStream::connect(proxy).await.unwrap();
            let c = tokio_rustls::TlsConnector::from(bad);
            let r = c.connect(polycorn_net::tls::proxy_server_name(), tcp).await;
            if let Ok(mut s) = r {
                let _ = s.write_all(b"hello?").await;
                let r = tokio::time::timeout(Duration::from_secs(15), s.read(&mut b)).await;
                assert!(
                    !matches!(r, Ok(Ok(n)) if n > 0),
                    "wrong credentials must not get data"
                );
            }
            // 3. Valid credentials, valid Hello, then a truncated and a garbage frame.
            let good = polycorn_net::tls::client_config(
                &certs.join("ca.pem"),
                &certs.join("relay.pem"),
                &certs.join("relay.key"),
            )
            .unwrap();
            for payload in [&[4u8, 0, 0, 0, 40, 0, 0, 0][..], &[0xEE; 64][..]] {
                let tcp = TcpStream::connect(proxy).await.unwrap();
                let mut s = tokio_rustls::TlsConnector::from(good.clone())
                    .connect(polycorn_net::tls::proxy_server_name(), tcp)
                    .await
                    .unwrap();
                let hello = polycorn_proto::Frame::Hello {
                    version: polycorn_proto::VERSION,
                    role: polycorn_proto::Role::Relay,
                    session: 0xBAD,
                    path: 0,
                    epoch: 1,
                    name: None,
                }
                .to_vec();
                s.write_all(&hello).await.unwrap();
                s.write_all(payload).await.unwrap();
                s.flush().await.unwrap();
                if payload[0] == 4 {
                    // Truncated: then close our side; the proxy must drop the subflow.
                    let _ = s.shutdown().await;
                }
                let t0 = Instant::now();
                let mut closed = false;
                while t0.elapsed() < Duration::from_secs(15) {
                    match tokio::time::timeout(Duration::from_secs(15), s.read(&mut b)).await {
                        Ok(Ok(0)) | Ok(Err(_)) => {
                            closed = true;
                            break;
                        }
                        Ok(Ok(_)) => continue, // its Hello and pings
                        Err(_) => break,
                    }
                }
                assert!(closed, "proxy must close a subflow that sent {payload:?}");
            }
            // 4. Certificates of other trains: a revoked one is refused in the handshake (the
            // TLS alert `certificate_revoked`) whatever its Hello; one that names the running relay's session is refused; with
            // a session of its own the same certificate is answered.
            for (name, session, answered) in [
                ("train-7", 0x77, false),
                ("train-8", relay_session, false),
                ("train-8", 0x88, true),
            ] {
                let cfg = polycorn_net::tls::client_config(
                    &certs.join("ca.pem"),
                    &certs.join(format!("{name}.pem")),
                    &certs.join(format!("{name}.key")),
                )
                .unwrap();
                let tcp = TcpStream::connect(proxy).await.unwrap();
                let mut s = tokio_rustls::TlsConnector::from(cfg)
                    .connect(polycorn_net::tls::proxy_server_name(), tcp)
                    .await
                    .unwrap();
                let hello = polycorn_proto::Frame::Hello {
                    version: polycorn_proto::VERSION,
                    role: polycorn_proto::Role::Relay,
                    session,
                    path: 0,
                    epoch: 1,
                    name: None,
                }
                .to_vec();
                s.write_all(&hello).await.unwrap();
                s.flush().await.unwrap();
                let r = tokio::time::timeout(Duration::from_secs(15), s.read(&mut b)).await;
                let got = matches!(r, Ok(Ok(n)) if n > 0);
                assert_eq!(got, answered, "{name} with session {session:x}: {r:?}");
                if name == "train-7" {
                    // Told why: the TLS alert `certificate_revoked`.
                    assert!(
                        matches!(&r, Ok(Err(e)) if polycorn_net::tls::is_revoked_alert(e)),
                        "a revoked relay hears certificate_revoked: {r:?}"
                    );
                }
            }
        })
    });
    let r = passenger.join().unwrap();
    assert!(
        matches!(r, Ok(Ok(_))),
        "passenger transfer disturbed: {r:?}"
    );
    let log = stack.proxy.log();
    assert!(
        log.contains("subflow refused"),
        "refusals are logged:\n{}",
        tail(&log)
    );
    assert!(
        log.contains("protocol violation") || log.contains("bad frame"),
        "bad frames are logged:\n{}",
        tail(&log)
    );
    for needle in [
        "relay certificate `train-7` is revoked (proxy.revoked_relays)",
        &format!("session {relay_session:016x} belongs to relay `polycorn-relay`, not `train-8`"),
        "relay=train-8",
    ] {
        assert!(
            log.contains(needle),
            "proxy log lacks {needle}:\n{}",
            tail(&log)
        );
    }
}

#[test]
fn hsr_trip_with_train_context_and_linkdb_predictions() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    // LinkDB from other rides of the same route (never the replayed ride, trip seed 1).
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("linkdb.sqlite").display());
    let out = Command::new(bin())
        .args([
            "linkdb",
            "import",
            "--db",
            &db,
            "--simulate",
            "6",
            "--preset",
            "hsr",
        ])
        .args(["--route-seed", "1", "--first-trip-seed", "100"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bed = Bed::up(
        "e",
        &["--preset", "hsr", "--route-seed", "1", "--trip-seed", "1"],
    );
    start_server(&bed);
    // The same LinkDB on both ends: the proxy predicts for the downlink, the relay for the
    // uplink.
    let linkdb = format!(
        "\n[linkdb]\ndb = \"{db}\"\nmodel = \"paper\"\nroute = \"hsr/route1\"\ncarriers = [\"A\", \"B\"]\ntrack_origin = [39.865, 116.378]\ntrack_heading_deg = 160.0\n"
    );
    // The relay also keeps its own context log, for LinkDB, and a week of them: a log of an
    // older day, left from before, goes when the first of today's starts.
    let record = dir.path().join("context-log");
    std::fs::create_dir_all(&record).unwrap();
    let stale = record.join("context-20200101T060000Z.csv");
    std::fs::write(
        &stale,
        "t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A\n",
    )
    .unwrap();
    let relay_extra = format!(
        "\n[context]\nsource = \"gpsd\"\ngpsd = \"127.0.0.1:2947\"\nrecord = \"{}\"\nkeep_days = 7\n{linkdb}",
        record.display()
    );
    // The proxy keeps what the relay sends of it, per relay.
    let proxy_record = dir.path().join("proxy-context");
    let proxy_extra = format!(
        "\n[context]\nrecord = \"{}\"\n{linkdb}",
        proxy_record.display()
    );
    let mut stack = start_stack_with(
        &bed,
        "polycorn",
        "hrsch",
        2,
        (&relay_extra, &proxy_extra),
        dir,
    );
    stack.proxy.wait_for("LinkDB predictor loaded", 1);
    stack.relay.wait_for("LinkDB predictor loaded", 1);
    stack.proxy.wait_for("first train context", 1);
    transfers(
        &bed,
        vec![
            (Via::Transparent4, 10 * KB, 4 * MB),
            (Via::Socks5, MB, 256 * KB),
        ],
        "hsr+linkdb",
        &stack,
    );
    for log in [stack.proxy.log(), stack.relay.log()] {
        assert!(
            !log.contains("rides=0"),
            "LinkDB must have rides:\n{}",
            tail(&log)
        );
    }
    // What the relay recorded: one file (the old one removed), the replay's fixes with both
    // carriers' cells (named as LinkDB names them), and LinkDB takes it as a ride.
    assert!(!stale.exists(), "{}", tail(&stack.relay.log()));
    assert!(
        stack.relay.log().contains("context logs of days before"),
        "{}",
        tail(&stack.relay.log())
    );
    let files: Vec<_> = std::fs::read_dir(&record)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A,cell_B,rsrp_dbm_B")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.len() >= 3, "{text}");
    assert!(rows.iter().all(|r| r.len() == 9), "{text}");
    assert!(
        rows.iter().any(|r| !r[5].is_empty() && !r[7].is_empty()),
        "{text}"
    );
    // The proxy's copy, under the relay's name: the same fixes (those the relay sent while
    // no path was up are missing), each once, and a ride LinkDB can take.
    let proxy_files: Vec<_> = std::fs::read_dir(proxy_record.join("polycorn-relay"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(proxy_files.len(), 1, "{proxy_files:?}");
    let proxy_text = std::fs::read_to_string(&proxy_files[0]).unwrap();
    let key = |r: &Vec<&str>| [r[1], r[2], r[5], r[7]].join(",");
    let relay_keys: std::collections::BTreeSet<String> = rows.iter().map(key).collect();
    let proxy_rows: Vec<Vec<&str>> = proxy_text
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert!(
        proxy_rows.len() * 2 >= rows.len() && proxy_rows.len() <= rows.len(),
        "the relay recorded {} fixes, the proxy {}",
        rows.len(),
        proxy_rows.len()
    );
    for r in &proxy_rows {
        assert!(
            relay_keys.contains(&key(r)),
            "the proxy recorded a fix the relay did not: {r:?}"
        );
    }
    let t: Vec<u64> = proxy_rows.iter().map(|r| r[0].parse().unwrap()).collect();
    assert!(t.windows(2).all(|w| w[0] < w[1]), "{proxy_text}");
    let scratch = format!(
        "sqlite:{}",
        stack.dir.path().join("proxy-rides.sqlite").display()
    );
    // `log` stored into `db` as one new ride of route 1.
    let import_ride = |db: &str, log: &Path| {
        let out = Command::new(bin())
            .args(["linkdb", "import", "--db", db, "--ride-log"])
            .arg(log)
            .args(["--route", "hsr/route1", "--track-origin", "39.865,116.378"])
            .args(["--track-heading", "160", "--direction", "up"])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.contains("1 trips (1 new"),
            "{said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    import_ride(&scratch, &proxy_record);
    import_ride(&db, &record);
    // A reload rebuilds the predictor with that ride (6 + 1), on the proxy for its live session
    // too, on the relay for the uplink; passengers are carried on. The same reload moves the
    // proxy's recording to another directory, for the live session too.
    let moved = stack.dir.path().join("proxy-context-2");
    let proxy_toml = stack.dir.path().join("proxy.toml");
    let text = std::fs::read_to_string(&proxy_toml).unwrap();
    let was = format!("record = \"{}\"", proxy_record.display());
    assert!(text.contains(&was), "{text}");
    std::fs::write(
        &proxy_toml,
        text.replace(&was, &format!("record = \"{}\"", moved.display())),
    )
    .unwrap();
    stack.proxy.hangup();
    stack.relay.hangup();
    for daemon in [&mut stack.proxy, &mut stack.relay] {
        daemon.wait_for("LinkDB predictor rebuilt, in use by the live sessions", 1);
        let log = daemon.log();
        assert!(
            log.contains("rides=7") && log.contains("sessions=1"),
            "{}",
            tail(&log)
        );
        assert!(!log.contains("restart the"), "{}", tail(&log));
    }
    // The metrics say what each end's predictor learnt from, and that the newest ride is the
    // one this trip recorded (its replayed fixes carry the wall clock's time).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for role in ["proxy", "relay"] {
        let ns = bed.ns(role);
        let m = |key: &str| {
            metric_value(&ns, key).unwrap_or_else(|| panic!("no {key} on the {role}'s page"))
        };
        assert_eq!(m("polycorn_linkdb_rides"), 7, "{role}");
        assert!(m("polycorn_linkdb_cells") > 0, "{role}");
        assert!(
            (now - m("polycorn_linkdb_built_seconds")).abs() < 120,
            "{role}"
        );
        let newest = m("polycorn_linkdb_newest_ride_seconds");
        assert!(
            newest <= now && now - newest < 3600,
            "{role}: {newest} vs {now}"
        );
        assert_eq!(m("polycorn_linkdb_rebuild_failures_total"), 0, "{role}");
    }
    stack
        .proxy
        .wait_for("reload: recording the relays' train context", 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_dir(moved.join("polycorn-relay")).map_or(0, |d| d.count()) == 0 {
        assert!(
            Instant::now() < deadline,
            "nothing recorded in {} after the reload:\n{}",
            moved.display(),
            tail(&stack.proxy.log())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    fetch_ok(&bed, &stack, 10 * KB, 256 * KB, "after LinkDB was rebuilt");
    // A reload that cannot read the database keeps the predictor in use, and counts it.
    let bad = stack.dir.path().join("not-a-database.sqlite");
    std::fs::write(
        &bad,
        "this is not an SQLite file, and longer than its header".repeat(20),
    )
    .unwrap();
    let text = std::fs::read_to_string(&proxy_toml).unwrap();
    assert!(text.contains(&db), "{text}");
    std::fs::write(
        &proxy_toml,
        text.replace(&db, &format!("sqlite:{}", bad.display())),
    )
    .unwrap();
    stack.proxy.hangup();
    stack
        .proxy
        .wait_for("reload: LinkDB not rebuilt; the predictor in use stays", 1);
    let ns = bed.ns("proxy");
    assert_eq!(
        metric_value(&ns, "polycorn_linkdb_rebuild_failures_total"),
        Some(1)
    );
    assert_eq!(metric_value(&ns, "polycorn_linkdb_rides"), Some(7));
}

/// Wait up to 20 s for `want` in the relay's log; fail at once if `forbid` (with its reason)
/// appears first, and with `missing` if the time runs out.
fn wait_for_relay_log(stack: &Stack, want: &str, forbid: Option<(&str, &str)>, missing: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !stack.relay.log().contains(want) {
        if let Some((line, why)) = forbid {
            assert!(
                !stack.relay.log().contains(line),
                "{why}:\n{}",
                tail(&stack.relay.log())
            );
        }
        assert!(
            Instant::now() < deadline,
            "{missing}:\n{}\nproxy:\n{}",
            tail(&stack.relay.log()),
            tail(&stack.proxy.log())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One transparent transfer from the client (`up` bytes up, `down` down, byte-checked) that
/// must finish within 60 s.
fn fetch_ok(bed: &Bed, stack: &Stack, up: u64, down: u64, what: &str) {
    fetch_ok_or_show(bed, up, down, what, &stack.relay.log());
}

/// [`fetch_ok`], showing the tail of `log` if it fails.
fn fetch_ok_or_show(bed: &Bed, up: u64, down: u64, what: &str, log: &str) {
    let r = in_ns(&bed.ns("client"), move || {
        Box::pin(async move {
            tokio::time::timeout(
                Duration::from_secs(60),
                one(Via::Transparent4, up, down, None),
            )
            .await
        })
    });
    assert!(matches!(r, Ok(Ok(_))), "{what}: {r:?}\n{}", tail(log));
}

/// An operator revokes a relay on a running proxy (`systemctl reload`, SIGHUP): its subflows
/// are cut at once and its reconnections refused; a file that does not load changes nothing;
/// taking the name off the list lets the relay in again, and passengers are carried.
#[test]
fn a_relay_revoked_on_reload_is_cut_at_once_and_let_in_again() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("v", 40, 20);
    start_server(&bed);
    let mut stack = start_stack(&bed, "polycorn", "minrtt", 2);
    fetch_ok(&bed, &stack, KB, MB, "transfer before the revocation");
    let file = stack.dir.path().join("proxy.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    let ups = |stack: &Stack| stack.proxy.log().matches("subflow up").count();
    // A file that does not load: reported, nothing changes.
    std::fs::write(&file, "[proxy]\nrevoked_relays = [\"Not A Name\"]\n").unwrap();
    stack.proxy.hangup();
    stack
        .proxy
        .wait_for("reload: configuration not loaded; nothing changed", 1);
    fetch_ok(&bed, &stack, KB, MB, "transfer after a failed reload");
    // Revoked.
    std::fs::write(&file, revoking(&text, "polycorn-relay")).unwrap();
    stack.proxy.hangup();
    stack.proxy.wait_for("reload: revoked relays applied", 1);
    stack
        .proxy
        .wait_for("relay revoked: its subflows were cut", 1);
    stack
        .proxy
        .wait_for("relay certificate `polycorn-relay` is revoked", 1);
    // The relay is told why (the TLS alert `certificate_revoked`), and says so at once.
    wait_for_relay_log(
        &stack,
        "the proxy refuses this relay's certificate as revoked",
        None,
        "the relay does not say it was revoked",
    );
    // It retries after 2 s, then less and less often (up to once a minute).
    assert!(
        stack.relay.log().lines().any(|l| l
            .contains("the proxy refuses this relay's certificate as revoked")
            && l.contains("retry_in_s=2")),
        "the relay does not say when it tries again:\n{}",
        tail(&stack.relay.log())
    );
    let before = ups(&stack);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        ups(&stack),
        before,
        "a revoked relay got a subflow up:\n{}",
        tail(&stack.proxy.log())
    );
    // Let in again.
    std::fs::write(&file, &text).unwrap();
    stack.proxy.hangup();
    stack.proxy.wait_for("reload: revoked relays applied", 2);
    stack.proxy.wait_for("subflow up", before + 2);
    fetch_ok(
        &bed,
        &stack,
        KB,
        MB,
        "transfer after the relay was let in again",
    );
}

/// The value of metric line `key` (its name and labels) on the metrics page of `ns`'s daemon.
fn metric_value(ns: &str, key: &str) -> Option<i64> {
    let key = format!("{key} ");
    scrape_metrics(ns)
        .lines()
        .find_map(|l| l.strip_prefix(&key)?.trim().parse().ok())
}

/// Waits up to 20 s for metric `key` of `ns`'s daemon to end `days` days from now (± one day).
fn wait_metric_days(ns: &str, key: &str, days: i64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let got = metric_value(ns, key);
        if got.is_some_and(|end| (end - now - days * 86_400).abs() <= 86_400) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ns}: {key} is {got:?}, not {days} days from now"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// `polycorn tls ARGS` on the credentials in `dir`.
fn tls_cmd(dir: &Path, args: &[&str]) {
    let out = Command::new(bin())
        .arg("tls")
        .args(args)
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tls {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An operator renews both ends' certificates without a restart (`systemctl reload`,
/// SIGHUP): the relay's paths replace their subflows with ones made with the new
/// certificate, at idle moments, while passengers are carried; the proxy's new certificate
/// reaches new subflows; a key that does not match, or files that did not change, change
/// nothing; a certificate the proxy refuses is reported, and the subflows made before stay.
#[test]
fn certificates_renewed_on_reload_take_effect_without_a_restart() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("rn", 40, 20);
    start_server(&bed);
    let mut stack = start_stack(&bed, "polycorn", "minrtt", 2);
    fetch_ok(&bed, &stack, KB, MB, "transfer before the renewal");
    let dir = stack.dir.path().to_path_buf();
    let (relay_ns, proxy_ns) = (bed.ns("relay"), bed.ns("proxy"));
    let renewed_paths = "replaced it with a connection made with the new ones";

    // Renewals gone wrong, each reported with the old credentials kept: a key that is not the
    // certificate's, and a certificate naming another relay (the proxy binds the session to
    // the relay's name).
    let (cert, key) = (
        std::fs::read(dir.join("relay.pem")).unwrap(),
        std::fs::read(dir.join("relay.key")).unwrap(),
    );
    tls_cmd(&dir, &["relay", "--name", "train-9"]);
    for (n, (pem, key_file, why)) in [
        (
            "relay.pem",
            "proxy.key",
            "private key does not match the certificate",
        ),
        (
            "train-9.pem",
            "train-9.key",
            "names relay `train-9`, this relay runs as `polycorn-relay`",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        std::fs::copy(dir.join(pem), dir.join("relay.pem.new")).unwrap();
        std::fs::rename(dir.join("relay.pem.new"), dir.join("relay.pem")).unwrap();
        std::fs::copy(dir.join(key_file), dir.join("relay.key")).unwrap();
        stack.relay.hangup();
        stack.relay.wait_for(
            "reload: TLS credentials not replaced, the ones in use stay",
            n + 1,
        );
        assert!(
            stack.relay.log().contains(why),
            "{}",
            tail(&stack.relay.log())
        );
        std::fs::write(dir.join("relay.pem"), &cert).unwrap();
        std::fs::write(dir.join("relay.key"), &key).unwrap();
        fetch_ok(&bed, &stack, KB, MB, "transfer after a failed reload");
    }

    // A certificate of another CA: it loads, but the proxy refuses it. The relay says so at
    // its first renewal attempt and keeps the subflows made before.
    let other = dir.join("other");
    generate_credentials(&other);
    for f in ["relay.pem", "relay.key"] {
        std::fs::copy(other.join(f), dir.join(f)).unwrap();
    }
    stack.relay.hangup();
    stack.relay.wait_for("reload: TLS credentials replaced", 1);
    stack.relay.wait_for(
        "the TLS credentials loaded at the reload do not get through",
        1,
    );
    fetch_ok(
        &bed,
        &stack,
        KB,
        MB,
        "transfer with credentials the proxy refuses",
    );
    // Fixed and reloaded: the paths renew with the files that work.
    std::fs::write(dir.join("relay.pem"), &cert).unwrap();
    std::fs::write(dir.join("relay.key"), &key).unwrap();
    stack.relay.hangup();
    stack.relay.wait_for("reload: TLS credentials replaced", 2);
    stack.relay.wait_for(renewed_paths, 2);

    // The train's certificate renewed (20 days, as a fleet on a schedule would), in place,
    // with a download under way.
    tls_cmd(
        &dir,
        &["relay", "--name", "polycorn-relay", "--valid-days", "20"],
    );
    std::fs::rename(dir.join("polycorn-relay.pem"), dir.join("relay.pem")).unwrap();
    std::fs::rename(dir.join("polycorn-relay.key"), dir.join("relay.key")).unwrap();
    let download = download_in_background(&bed, 16 * MB, 60);
    std::thread::sleep(Duration::from_millis(500));
    stack.relay.hangup();
    stack.relay.wait_for("reload: TLS credentials replaced", 3);
    // The relay says how long the new certificate lasts, as at a start.
    stack.relay.wait_for("only 19 days left: renew it", 1);
    let r = download.join().unwrap();
    assert!(
        matches!(r, Ok(Ok(_))),
        "the download under way at the renewal: {r:?}\n{}",
        tail(&stack.relay.log())
    );
    stack.relay.wait_for(renewed_paths, 4);
    wait_metric_days(
        &relay_ns,
        "polycorn_tls_not_after_seconds{file=\"cert\"}",
        20,
    );
    // The proxy sees the renewed certificate on the replaced subflows.
    wait_metric_days(
        &proxy_ns,
        "polycorn_relay_tls_not_after_seconds{relay=\"polycorn-relay\"}",
        20,
    );
    fetch_ok(&bed, &stack, KB, MB, "transfer after the relay's renewal");

    // The proxy's certificate renewed from the same CA (the trains keep their files).
    tls_cmd(&dir, &["proxy", "--valid-days", "40", "--force"]);
    stack.proxy.hangup();
    stack.proxy.wait_for("reload: TLS credentials replaced", 1);
    wait_metric_days(
        &proxy_ns,
        "polycorn_tls_not_after_seconds{file=\"cert\"}",
        40,
    );
    // New subflows get it: a path check makes new ones.
    let out = Command::new("ip")
        .args(["netns", "exec", &relay_ns, bin(), "relay", "--config"])
        .arg(dir.join("relay.toml"))
        .args(["--check-paths", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let c: serde_json::Value = serde_json::from_str(l).unwrap();
        let end = c["proxy_cert_not_after"].as_i64().unwrap();
        assert!((end - now - 40 * 86_400).abs() <= 86_400, "{c}");
    }
    // The subflows up when the proxy renewed keep working.
    fetch_ok(&bed, &stack, KB, MB, "transfer after the proxy's renewal");

    for l in stack.relay.log().lines() {
        if l.contains("reload") || l.contains(renewed_paths) {
            eprintln!("relay: {l}");
        }
    }
    // A reload with the files unchanged changes nothing: no subflow is replaced.
    stack.relay.hangup();
    stack
        .relay
        .wait_for("reload: the TLS files are unchanged", 1);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        stack.relay.log().matches(renewed_paths).count(),
        4,
        "{}",
        tail(&stack.relay.log())
    );
}

/// An operator changes the proxy's destination policy (`systemctl reload`): later
/// connections follow it at once, a download open at the change goes on, and nothing restarts.
#[test]
fn a_destination_policy_changed_on_reload_applies_to_new_connections() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("pol", 40, 20);
    start_server(&bed);
    let mut stack = start_stack(&bed, "polycorn", "minrtt", 2);
    fetch_ok(&bed, &stack, KB, MB, "transfer before the change");
    let file = stack.dir.path().join("proxy.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    // A download under way when the server is denied.
    let download = download_in_background(&bed, 16 * MB, 60);
    std::thread::sleep(Duration::from_millis(500));
    let denied = text.replacen("[policy]\n", "[policy]\ndeny = [\"10.0.2.2/32\"]\n", 1);
    assert_ne!(denied, text);
    std::fs::write(&file, &denied).unwrap();
    stack.proxy.hangup();
    stack
        .proxy
        .wait_for("reload: destination policy applied to new connections", 1);
    let r = download_in_background(&bed, MB, 30).join().unwrap();
    assert!(
        !matches!(r, Ok(Ok(()))),
        "a transfer to a denied server succeeded: {r:?}"
    );
    stack.proxy.wait_for("destination denied by policy", 1);
    let r = download.join().unwrap();
    assert!(
        matches!(r, Ok(Ok(_))),
        "the download open at the change: {r:?}\n{}",
        tail(&stack.proxy.log())
    );
    // Allowed again.
    std::fs::write(&file, &text).unwrap();
    stack.proxy.hangup();
    stack
        .proxy
        .wait_for("reload: destination policy applied to new connections", 2);
    fetch_ok(
        &bed,
        &stack,
        KB,
        MB,
        "transfer after the policy was restored",
    );
    assert!(
        !stack
            .proxy
            .log()
            .contains("restart the proxy for the other changes"),
        "{}",
        tail(&stack.proxy.log())
    );
    assert_eq!(stack.proxy.log().matches("proxy running").count(), 1);
}

/// Proxy configuration `text` with `relay` in `proxy.revoked_relays`.
fn revoking(text: &str, relay: &str) -> String {
    text.replacen(
        "[proxy]\n",
        &format!("[proxy]\nrevoked_relays = [\"{relay}\"]\n"),
        1,
    )
}

/// A second train's namespace, joined to the proxy's by one unshaped veth path
/// (10.199.0.1 on the train, 10.199.0.2 at the proxy); removed on drop.
struct SecondTrain {
    ns: String,
    device: String,
}

impl SecondTrain {
    fn new(bed: &Bed) -> SecondTrain {
        let ns = bed.ns("train2");
        let device = format!("{}-2r", bed.name);
        let peer = format!("{}-2p", bed.name);
        let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().unwrap();
            assert!(
                out.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        ip(&["netns", "add", &ns]);
        let train = SecondTrain { ns, device };
        let proxy_ns = bed.ns("proxy");
        ip(&[
            "link",
            "add",
            &train.device,
            "netns",
            &train.ns,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
            "netns",
            &proxy_ns,
        ]);
        ip(&["-n", &train.ns, "link", "set", "lo", "up"]);
        ip(&[
            "-n",
            &train.ns,
            "addr",
            "add",
            "10.199.0.1/24",
            "dev",
            &train.device,
        ]);
        ip(&["-n", &train.ns, "link", "set", &train.device, "up"]);
        ip(&[
            "-n",
            &proxy_ns,
            "addr",
            "add",
            "10.199.0.2/24",
            "dev",
            &peer,
        ]);
        ip(&["-n", &proxy_ns, "link", "set", &peer, "up"]);
        train
    }
}

impl Drop for SecondTrain {
    fn drop(&mut self) {
        // Deleting the namespace deletes the veth pair, both ends.
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// One proxy, two trains with certificates of their own, at once: both carry passengers
/// concurrently, the proxy tells them apart in logs and metrics, a train whose relay restarts
/// is noticed as a second session of its name, and revoking one train leaves the other alone.
#[test]
fn two_trains_share_one_proxy_and_one_is_revoked_alone() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("w", 40, 20);
    start_server(&bed);
    // Train 1: the testbed's relay namespace, with the set's own certificate (`polycorn-relay`).
    let mut stack = start_stack(&bed, "polycorn", "minrtt", 2);
    let dir = stack.dir.path().to_path_buf();
    // Train 2's certificate ends in 20 days (a fleet renewing on a schedule).
    let out = Command::new(bin())
        .args(["tls", "relay", "--name", "train-2", "--valid-days", "20"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Train 2: a namespace of its own, one path, passengers over SOCKS5.
    let train = SecondTrain::new(&bed);
    let relay2 = dir.join("train-2.toml");
    std::fs::write(
        &relay2,
        format!(
            "[relay]\nmode = \"polycorn\"\nscheduler = \"minrtt\"\nproxy = \"10.199.0.2:7700\"\n\
             congestion = \"cubic\"\nhold_time_s = 3\n\n[[path]]\nname = \"p0\"\ndevice = \"{}\"\n\
             source = \"10.199.0.1\"\nproxy = \"10.199.0.2:7700\"\n\n\
             [intercept]\nsocks5 = \"127.0.0.1:1080\"\n\n\
             [tls]\nca = \"ca.pem\"\ncert = \"train-2.pem\"\nkey = \"train-2.key\"\n\n\
             [metrics]\nlisten = \"127.0.0.1:9100\"\n",
            train.device
        ),
    )
    .unwrap();
    let start_train2 = |log: &str| {
        let mut d = Daemon::start(&train.ns, "relay", &relay2, dir.join(log));
        d.wait_for("subflow up", 1);
        d
    };
    let mut relay2_daemon = start_train2("train-2.log");
    let fetch2 = |down: u64| {
        in_ns(&train.ns, move || {
            Box::pin(async move {
                let go = async {
                    let s = socks_connect_via("127.0.0.1:1080", SERVER4.parse().unwrap()).await?;
                    loadgen::transfer(s, KB, down).await
                };
                tokio::time::timeout(Duration::from_secs(60), go)
                    .await
                    .map_err(|_| std::io::Error::other("timed out"))?
            })
        })
    };
    // Both trains at once, byte-checked.
    let t1 = {
        let client = bed.ns("client");
        std::thread::spawn(move || {
            in_ns(&client, || {
                Box::pin(async move {
                    tokio::time::timeout(
                        Duration::from_secs(60),
                        one(Via::Transparent4, KB, 8 * MB, None),
                    )
                    .await
                })
            })
        })
    };
    let r2 = fetch2(8 * MB);
    let r1 = t1.join().unwrap();
    assert!(
        matches!(r1, Ok(Ok(_))),
        "train 1: {r1:?}\n{}",
        tail(&stack.proxy.log())
    );
    assert!(r2.is_ok(), "train 2: {r2:?}\n{}", tail(&stack.proxy.log()));
    let log = stack.proxy.log();
    assert_eq!(
        log.matches("new relay session").count(),
        2,
        "one session per train:\n{}",
        tail(&log)
    );
    for relay in ["polycorn-relay", "train-2"] {
        assert!(
            log.contains(&format!("relay={relay} peer=")),
            "no session of {relay}:\n{}",
            tail(&log)
        );
    }
    // The proxy noticed train 2's certificate ends soon, and only that one.
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("the relay's certificate"))
        .collect();
    assert!(
        warned.len() == 1
            && warned[0].contains("(train-2): valid until")
            && warned[0].contains("days left: renew it")
            && warned[0].contains("polycorn tls relay --name train-2"),
        "{warned:?}"
    );
    let check = Command::new("ip")
        .args(["netns", "exec", &bed.ns("proxy"), bin(), "status", "proxy"])
        .arg(stack.dir.path().join("proxy.toml"))
        .arg("--check")
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{line}");
    assert!(
        line.starts_with("WARNING: ")
            && line.contains("TLS certificate of relay train-2 ends in 19 days"),
        "{line}"
    );
    // Metrics: each train's paths under its own name. `wait_paths` polls the proxy's
    // `polycorn_path_up` lines of both trains until `ok` holds (10 s).
    let up = |page: &str, relay: &str| -> Vec<String> {
        page.lines()
            .filter(|l| {
                l.starts_with("polycorn_path_up{") && l.contains(&format!("relay=\"{relay}\""))
            })
            .map(str::to_string)
            .collect()
    };
    let wait_paths = |ok: &dyn Fn(&[String], &[String]) -> bool, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let page = scrape_metrics(&bed.ns("proxy"));
            let (a, b) = (up(&page, "polycorn-relay"), up(&page, "train-2"));
            if ok(&a, &b) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "proxy metrics, {what}: got {a:?} {b:?}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    let all = |lines: &[String], v: &str| lines.iter().all(|l| l.ends_with(v));
    wait_paths(
        &|a, b| a.len() == 2 && b.len() == 1 && all(a, " 1") && all(b, " 1"),
        "want 2 paths up for polycorn-relay, 1 for train-2",
    );
    // Train 2's relay crashes and comes back: a new session under the same name. The old one
    // has every path down (the crashed relay's kernel closed its subflow), so the proxy ends it
    // at once instead of holding it for its hold time, and says so; train 2 carries again.
    let _ = relay2_daemon.child.kill();
    let _ = relay2_daemon.child.wait();
    relay2_daemon = start_train2("train-2-again.log");
    stack.proxy.wait_for(
        "the relay opened a new session and its earlier one had every path down",
        1,
    );
    let log = stack.proxy.log();
    assert!(
        log.lines()
            .any(|l| l.contains("earlier one had every path down") && l.contains("train-2")),
        "{}",
        tail(&log)
    );
    // The proxy counts train 2's sessions and how the first ended, for an operator's alert on
    // a crashing relay; train 1 opened one and nothing ended (its series there, at 0).
    let page = scrape_metrics(&bed.ns("proxy"));
    for want in [
        "polycorn_relay_sessions_total{relay=\"train-2\"} 2",
        "polycorn_relay_sessions_ended_total{relay=\"train-2\",how=\"restarted\"} 1",
        "polycorn_relay_sessions_total{relay=\"polycorn-relay\"} 1",
    ] {
        assert!(page.lines().any(|l| l == want), "no `{want}` in:\n{page}");
    }
    for how in ["closed", "restarted", "lost"] {
        let zero = format!(
            "polycorn_relay_sessions_ended_total{{relay=\"polycorn-relay\",how=\"{how}\"}} 0"
        );
        assert!(page.lines().any(|l| l == zero), "no `{zero}` in:\n{page}");
    }
    assert!(fetch2(MB).is_ok(), "train 2 after its restart");
    // Revoke train 2 only: its subflow is cut and refused, train 1 carries on untouched.
    let file = dir.join("proxy.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, revoking(&text, "train-2")).unwrap();
    let cut_before = stack
        .proxy
        .log()
        .matches("relay=polycorn-relay path=")
        .count();
    stack.proxy.hangup();
    stack
        .proxy
        .wait_for("relay revoked: its subflows were cut", 1);
    relay2_daemon.wait_for("the proxy refuses this relay's certificate as revoked", 1);
    // Train 2's passengers get a failure (after its relay's hold time, 3 s here), not a hang.
    let r = fetch2(KB);
    assert!(
        matches!(&r, Err(e) if e.to_string().contains("SOCKS5 reply")),
        "a passenger of a revoked train: {r:?}"
    );
    // The proxy shows train 2's path down (its session waits out the hold time), train 1's up.
    wait_paths(
        &|a, b| a.len() == 2 && all(a, " 1") && all(b, " 0"),
        "after revoking train-2",
    );
    fetch_ok(
        &bed,
        &stack,
        KB,
        8 * MB,
        "train 1 after train 2 was revoked",
    );
    let log = stack.proxy.log();
    assert_eq!(
        log.matches("relay=polycorn-relay path=").count(),
        cut_before,
        "train 1's subflows were touched by train 2's revocation:\n{}",
        tail(&log)
    );
    assert!(
        !log.contains("relay revoked: its subflows were cut; its passengers' flows end at the hold time relay=polycorn-relay"),
        "{}",
        tail(&log)
    );
    drop(relay2_daemon);
    drop(train);
}

/// A short blackout of an idle path (only probes in flight) cuts its subflow's slow-start
/// threshold to a few segments; the relay replaces that subflow with a fresh connection once
/// the path is back and idle, and traffic afterwards is byte-exact.
#[test]
fn idle_path_blackout_refreshes_its_subflow() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("f", 40, 20);
    start_server(&bed);
    let stack = start_stack(&bed, "polycorn", "minrtt", 2);
    std::thread::sleep(Duration::from_secs(2));
    {
        // Long enough for two RTOs of the probes in flight (which collapse the slow-start
        // threshold), and short enough that the second retransmission (about 0.7 s after the
        // first loss) gets through: the path then never stays silent for the stall time
        // (1.5 s), so the watchdog does not replace the subflow first. A 1.2 s blackout
        // pushed the next retransmission to about 1.7 s and raced the watchdog.
        let _b = Blackhole::new(&bed.ns("relay"), &["path0"]);
        std::thread::sleep(Duration::from_millis(650));
    }
    wait_for_relay_log(
        &stack,
        "congestion state collapsed",
        Some((
            "path silent",
            "the watchdog replaced the subflow before the refresh could",
        )),
        "no refresh after an idle blackout",
    );
    fetch_ok(&bed, &stack, KB, 8 * MB, "transfer after the refresh");
}

/// A timeout at the proxy's end of an idle subflow (its probes' answers lost for a moment,
/// the relay's probes and pure acknowledgements getting through): the proxy asks for a fresh
/// connection (protocol 4), the relay replaces the subflow, and traffic afterwards is
/// byte-exact. The relay's own socket often times out too (acknowledgements ride on the lost
/// answers), and its own check may then replace the subflow first; either replacement counts.
#[test]
fn a_timeout_at_the_proxys_end_of_an_idle_subflow_gets_it_refreshed_as_the_proxy_asks() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("ra", 40, 20);
    start_server(&bed);
    let stack = start_stack(&bed, "polycorn", "minrtt", 2);
    std::thread::sleep(Duration::from_secs(2));
    {
        // The proxy's data on path 0 (probes and their answers) is lost for 650 ms: at least
        // one retransmission timeout there, while the path never stays silent for the relay's
        // stall time (as in `idle_path_blackout_refreshes_its_subflow`).
        let _b = Blackhole::incoming_data(&bed.ns("relay"), "path0", 7700);
        std::thread::sleep(Duration::from_millis(650));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let relay = stack.relay.log();
        if relay.contains("replaced it with a fresh connection as the proxy asked")
            || relay
                .contains("congestion state collapsed; replaced it with a fresh connection path=p0")
        {
            break;
        }
        assert!(
            !relay.contains("path silent"),
            "the watchdog replaced the subflow before a refresh could:\n{}",
            tail(&relay)
        );
        assert!(
            Instant::now() < deadline,
            "no refresh after the proxy's timeout:\n{}\nproxy:\n{}",
            tail(&relay),
            tail(&stack.proxy.log())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let proxy = stack.proxy.log();
    assert!(
        proxy.contains("asked the relay for a fresh connection")
            && proxy.contains("path=0 path_name=p0"),
        "the proxy did not say it asked, naming the path:\n{}",
        tail(&proxy)
    );
    fetch_ok(&bed, &stack, KB, 8 * MB, "transfer after the refresh");
}

/// The server, and relay and proxy in polycorn mode with the testbed's two paths and a third,
/// `ghost`, whose device `nosuch0` does not exist.
fn start_with_a_ghost_path(bed: &Bed) -> Stack {
    start_server(bed);
    let ghost = "[[path]]\nname = \"ghost\"\ndevice = \"nosuch0\"\nsource = \"10.100.9.1\"\nproxy = \"10.100.0.2:7700\"\n\n";
    start_stack_with(
        bed,
        "polycorn",
        "polycorn",
        2,
        (ghost, ""),
        tempfile::tempdir().unwrap(),
    )
}

/// An operator misnames a path's device (or its modem is missing): the relay says so at once,
/// naming the path, the device and the cause, says it once rather than at every retry, and
/// carries passengers over the paths that work.
#[test]
fn a_path_whose_device_is_missing_is_reported_and_the_others_carry() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("g", 40, 20);
    let stack = start_with_a_ghost_path(&bed);
    wait_for_relay_log(
        &stack,
        "path has no subflow",
        None,
        "no warning about the path whose device is missing",
    );
    fetch_ok(
        &bed,
        &stack,
        256 * KB,
        4 * MB,
        "transfer over the two working paths",
    );
    let log = stack.relay.log();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("path has no subflow"))
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "warned once, not at every retry:\n{}",
        tail(&log)
    );
    for want in ["WARN", "ghost", "nosuch0", "No such device"] {
        assert!(warnings[0].contains(want), "`{want}` in {}", warnings[0]);
    }
    assert!(
        !log.lines()
            .any(|l| l.contains("subflow up") && l.contains("path=ghost"))
            && log.matches("subflow up").count() == 2,
        "only the two real paths came up:\n{}",
        tail(&log)
    );
}

/// `polycorn relay --check-paths`, run beside a working relay with the same configuration:
/// over each path it reaches the proxy (TCP pinned to the path, TLS, Hello) and says so with the
/// path's RTT; a path whose device is missing, or whose carrier drops everything, is named as
/// failed with why, and the exit status says some paths failed. The proxy answers the checks
/// without opening a session: the relay's own session, and a download it carries, go on.
#[test]
fn a_path_check_names_each_paths_outcome_and_leaves_the_running_session_alone() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("k", 40, 20);
    let stack = start_with_a_ghost_path(&bed);
    let relay_ns = bed.ns("relay");
    let check = || check_paths(&bed, &stack);
    let download = download_reaching_the_server(&bed, &stack, 32 * MB, 60);
    let (code, text) = check();
    eprintln!("{text}");
    assert_eq!(code, Some(1), "some paths failed:\n{text}");
    for i in 0..2 {
        let l = line(&text, &format!("p{i}"));
        let want = format!("p{i} (path{i}, 10.100.{i}.1): ok, proxy 10.100.{i}.2:7700 reached");
        assert!(l.starts_with(&want), "`{want}` in {l}");
        assert!(l.contains("answered by polycorn"), "{l}");
        // The emulated paths delay each direction by 20 ms.
        let rtt: f64 = l
            .split(", RTT ")
            .nth(1)
            .and_then(|r| r.split(" ms").next())
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no RTT in {l}"));
        assert!(rtt >= 35.0, "RTT {rtt} ms over a 2 × 20 ms path: {l}");
    }
    let l = line(&text, "ghost");
    for want in [
        "ghost (nosuch0): FAILED",
        "nosuch0",
        "configuration or credentials",
    ] {
        assert!(l.contains(want), "`{want}` in {l}");
    }
    assert!(text.contains("2 of 3 path(s) reach the proxy"), "{text}");
    // The same as JSON, one object per check.
    let out = Command::new("ip")
        .args(["netns", "exec", &relay_ns, bin(), "relay", "--config"])
        .arg(stack.dir.path().join("relay.toml"))
        .args(["--check-paths", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let checks: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(checks.len(), 3, "{checks:?}");
    for (c, i) in checks.iter().zip(0..2) {
        assert_eq!(c["path"], format!("p{i}"));
        assert_eq!(c["ok"], true, "{c}");
        assert_eq!(c["answer"], "checked", "{c}");
        assert_eq!(c["addr"], format!("10.100.{i}.2:7700"), "{c}");
        assert!(c["rtt_ms"].as_f64().unwrap() >= 35.0, "{c}");
        // `tls generate` makes certificates valid for ten years and more.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let end = c["proxy_cert_not_after"].as_i64().unwrap();
        assert!(end > now + 9 * 365 * 86_400, "{c}");
    }
    // Both daemons export when their certificates end, and the other end's, for monitoring.
    for (role, peer) in [
        ("relay", "polycorn_proxy_tls_not_after_seconds "),
        (
            "proxy",
            "polycorn_relay_tls_not_after_seconds{relay=\"polycorn-relay\"} ",
        ),
    ] {
        let page = scrape_metrics(&bed.ns(role));
        for key in ["{file=\"cert\"} ", "{file=\"ca\"} ", ""] {
            let key = if key.is_empty() {
                peer.to_string()
            } else {
                format!("polycorn_tls_not_after_seconds{key}")
            };
            let end: i64 = page
                .lines()
                .find_map(|l| l.strip_prefix(&key))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {key}in the {role}'s metrics:\n{page}"));
            assert!(end > 1_900_000_000, "{role} {key}: {end}");
        }
    }
    assert_eq!(checks[2]["ok"], false);
    assert!(
        checks[2]["error"].as_str().unwrap().contains("nosuch0"),
        "{}",
        checks[2]
    );
    let r = download.join().unwrap();
    assert!(
        matches!(r, Ok(Ok(()))),
        "the relay's download beside the check: {r:?}\n{}",
        tail(&stack_log(&stack))
    );
    let plog = stack.proxy.log();
    assert_eq!(
        plog.matches("path check from a relay answered").count(),
        4,
        "two checks of two paths each:\n{}",
        tail(&plog)
    );
    assert!(
        plog.matches("new relay session").count() == 1 && !plog.contains("WARN"),
        "the checks opened no session and disturbed none:\n{}",
        tail(&plog)
    );

    // Path 0's carrier drops full-size packets towards the train (the handshakes pass): the
    // proxy's answer is lost, and the check says so. Path 1's carrier drops everything: the
    // check says that path timed out.
    let hole = "  chain in_path0 { type filter hook ingress device \"path0\" priority 0; policy accept; ip length > 1400 drop; }\n  chain in_path1 { type filter hook ingress device \"path1\" priority 0; policy drop; }\n";
    let dark = Blackhole::with_rules(&relay_ns, hole);
    let (code, text) = check();
    eprintln!("{text}");
    assert_eq!(code, Some(2), "{text}");
    let l = line(&text, "p0");
    for want in [
        "p0 (path0, 10.100.0.1): FAILED: proxy 10.100.0.2:7700 reached",
        "KiB answer did not arrive",
        "path-MTU black hole",
        "`mtu`",
    ] {
        assert!(l.contains(want), "`{want}` in {l}");
    }
    let l = line(&text, "p1");
    assert!(
        l.starts_with("p1 (path1): FAILED to reach 10.100.1.2:7700") && l.contains("timed out"),
        "{l}"
    );
    drop(dark);
    fetch_ok(&bed, &stack, KB, 256 * KB, "a transfer after the checks");
}

/// `polycorn relay --config relay.toml --check-paths` in the relay's namespace, with the
/// stack's relay configuration: its exit status and its output.
fn check_paths(bed: &Bed, stack: &Stack) -> (Option<i32>, String) {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &bed.ns("relay"),
            bin(),
            "relay",
            "--config",
        ])
        .arg(stack.dir.path().join("relay.toml"))
        .arg("--check-paths")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

/// The line `check_paths` printed for `path`.
fn line(text: &str, path: &str) -> String {
    text.lines()
        .find(|l| l.starts_with(&format!("{path} (")))
        .unwrap_or_else(|| panic!("no line for {path}:\n{text}"))
        .to_string()
}

/// The proxy crashes and is started again while the relay keeps running and a download is in
/// flight. The new proxy knows nothing of the relay's session: the download is reset on the
/// relay as soon as the new proxy answers (not left hanging), and every later connection works.
#[test]
fn a_proxy_crash_and_restart_resets_the_connections_it_carried_and_new_ones_work() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("r", 40, 20);
    start_server(&bed);
    let stack = start_stack(&bed, "polycorn", "minrtt", 2);
    // A few connections first, so both ends' control frames have been numbered well past 0.
    for i in 0..3 {
        fetch_ok(
            &bed,
            &stack,
            KB,
            64 * KB,
            &format!("connection {i} before the restart"),
        );
    }
    // A download of about 80 s at 2 × 40 Mbit/s, in flight during the restart.
    let ns = bed.ns("client");
    let long = std::thread::spawn(move || {
        in_ns(&ns, move || {
            Box::pin(async move {
                let t0 = Instant::now();
                let r = tokio::time::timeout(
                    Duration::from_secs(60),
                    one(Via::Transparent4, KB, 800 * MB, None),
                )
                .await;
                (
                    r.map(|r| r.map(|_| ()).map_err(|e| e.to_string())),
                    t0.elapsed(),
                )
            })
        })
    });
    std::thread::sleep(Duration::from_secs(3));
    let Stack {
        dir,
        mut proxy,
        relay,
    } = stack;
    let config = dir.path().join("proxy.toml");
    // Killed: an orderly stop would tell the relay (see
    // `a_stopping_relay_or_proxy_tells_the_other_end_at_once`); here the relay learns it only
    // from the new proxy's Hello.
    proxy.crash();
    drop(proxy);
    let restarted = Instant::now();
    let mut proxy = Daemon::start(
        &bed.ns("proxy"),
        "proxy",
        &config,
        dir.path().join("proxy2.log"),
    );
    proxy.wait_for("proxy running", 1);
    let stack = Stack { dir, proxy, relay };
    wait_for_relay_log(
        &stack,
        "the proxy is another one, or lost this session's state",
        None,
        "the relay did not notice the new proxy",
    );
    let (r, took) = long.join().unwrap();
    match r {
        Ok(Err(_)) => {}
        other => panic!(
            "the download the old proxy carried should end in a reset, got {other:?} after \
             {took:?}\n{}",
            tail(&stack.relay.log())
        ),
    }
    assert!(
        restarted.elapsed() < Duration::from_secs(30),
        "the reset took {:?} after the restart",
        restarted.elapsed()
    );
    for i in 0..5 {
        fetch_ok(
            &bed,
            &stack,
            KB,
            256 * KB,
            &format!("connection {i} after the restart"),
        );
    }
}

/// Established TCP connections in namespace `ns` to `dst` (an address, as `ss` filters it).
fn established_to(ns: &str, dst: &str) -> usize {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "ss",
            "-Htn",
            "state",
            "established",
            "dst",
            dst,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// `systemctl stop` on either end tells the other one (a Close frame, then TLS close_notify):
/// a stopping relay has the proxy close its connections to the servers at once, and a
/// stopping proxy has the relay reset its passengers' connections at once — both far sooner
/// than the two-minute hold time configured here, which would otherwise keep them. Neither
/// side logs a warning about the other's subflows for it; a passenger connection opened while
/// no proxy answers is carried once the restarted proxy is up.
#[test]
fn a_stopping_relay_or_proxy_tells_the_other_end_at_once() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("q", 40, 20);
    start_server(&bed);
    let mut stack = start_with_keys(&bed, "hold_time_s = 120", "hold_time_s = 120");
    fetch_ok(&bed, &stack, KB, 64 * KB, "a connection first");
    let proxy_ns = bed.ns("proxy");

    // 1. The relay stops.
    let download = stop_during_a_download(&bed, &mut stack, true);
    let took = wait_until(
        30,
        "the proxy closes its connection to the server",
        || stack_log(&stack),
        || established_to(&proxy_ns, "10.0.2.2") == 0,
    );
    eprintln!("relay stop: server connection closed {took:?} later (hold time 120 s)");
    let r = download.join().unwrap();
    assert_cut(&r, &stack);
    wait_until(
        10,
        "the proxy logs the relay's close",
        || stack_log(&stack),
        || {
            stack
                .proxy
                .log()
                .contains("the relay closed the session; its passengers' connections were reset")
        },
    );
    let page = scrape_metrics(&proxy_ns);
    let closed = "polycorn_relay_sessions_ended_total{relay=\"polycorn-relay\",how=\"closed\"} 1";
    assert!(
        page.lines().any(|l| l == closed),
        "no `{closed}` in:\n{page}"
    );
    let plog_text = stack.proxy.log();
    let warned: Vec<&str> = plog_text
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("subflow ended"))
        .collect();
    assert!(
        warned.is_empty(),
        "a relay's orderly stop is no warning:\n{}",
        warned.join("\n")
    );
    assert!(
        !stack.relay.log().contains("WARN"),
        "the relay's own stop logs no warning:\n{}",
        tail(&stack.relay.log())
    );

    // 2. The relay runs again; then the proxy stops.
    stack.start_again(&bed, "relay", "relay2.log");
    stack.relay.wait_for("subflow up", 2);
    fetch_ok(
        &bed,
        &stack,
        KB,
        64 * KB,
        "a connection through the new relay",
    );
    let download = stop_during_a_download(&bed, &mut stack, false);
    let stopped = Instant::now();
    let r = download.join().unwrap();
    let took = stopped.elapsed();
    assert_cut(&r, &stack);
    assert!(
        took < Duration::from_secs(30),
        "the passenger's connection was reset {took:?} after the proxy stopped (hold time 120 s)"
    );
    eprintln!("proxy stop: passenger's connection reset {took:?} later (hold time 120 s)");
    wait_for_relay_log(
        &stack,
        "the proxy closed the session",
        None,
        "the relay did not log the proxy's close",
    );
    // 3. A passenger connects while no proxy answers, then the proxy comes back: that
    // connection is carried by the new proxy, and so are the next ones.
    let waiting = download_in_background(&bed, MB, 60);
    std::thread::sleep(Duration::from_secs(1));
    stack.start_again(&bed, "proxy", "proxy2.log");
    stack.proxy.wait_for("proxy running", 1);
    let r = waiting.join().unwrap();
    assert!(
        matches!(r, Ok(Ok(()))),
        "the connection opened while no proxy answered: {r:?}\n{}",
        stack_log(&stack)
    );
    for i in 0..3 {
        fetch_ok(
            &bed,
            &stack,
            KB,
            256 * KB,
            &format!("connection {i} through the restarted proxy"),
        );
    }
}

/// [`download_in_background`], returned once the proxy has connected it to the server.
fn download_reaching_the_server(
    bed: &Bed,
    stack: &Stack,
    down: u64,
    secs: u64,
) -> std::thread::JoinHandle<Result<Result<(), String>, tokio::time::error::Elapsed>> {
    let download = download_in_background(bed, down, secs);
    let proxy_ns = bed.ns("proxy");
    wait_until(
        20,
        "the proxy connects to the server",
        || stack_log(stack),
        || established_to(&proxy_ns, "10.0.2.2") > 0,
    );
    download
}

/// A transparent passenger download of `down` bytes on its own thread, given `secs` at most.
fn download_in_background(
    bed: &Bed,
    down: u64,
    secs: u64,
) -> std::thread::JoinHandle<Result<Result<(), String>, tokio::time::error::Elapsed>> {
    let ns = bed.ns("client");
    std::thread::spawn(move || {
        in_ns(&ns, move || {
            Box::pin(async move {
                tokio::time::timeout(
                    Duration::from_secs(secs),
                    one(Via::Transparent4, KB, down, None),
                )
                .await
                .map(|r| r.map(|_| ()).map_err(|e| e.to_string()))
            })
        })
    })
}

/// Starts a download of about 80 s, waits until the proxy has connected it to the server, then
/// stops the relay (`relay`) or the proxy with SIGTERM and checks that it exited cleanly.
/// Returns the download's thread.
fn stop_during_a_download(
    bed: &Bed,
    stack: &mut Stack,
    relay: bool,
) -> std::thread::JoinHandle<Result<Result<(), String>, tokio::time::error::Elapsed>> {
    let download = download_reaching_the_server(bed, stack, 800 * MB, 100);
    std::thread::sleep(Duration::from_secs(2));
    let daemon = if relay {
        &mut stack.relay
    } else {
        &mut stack.proxy
    };
    let st = daemon.stop();
    assert!(st.success(), "exit: {st}\n{}", tail(&daemon.log()));
    download
}

/// With `drain_s`, an orderly stop lets the connections open at that moment finish before the
/// session closes: a download under way when the proxy is stopped completes, byte for byte,
/// and the proxy exits after it; one that cannot finish within the relay's drain is reset at
/// its end.
#[test]
fn a_stop_with_a_drain_lets_open_connections_finish() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("dr", 40, 20);
    start_server(&bed);
    let mut stack = start_with_keys(&bed, "drain_s = 2", "drain_s = 8");
    fetch_ok(&bed, &stack, KB, 64 * KB, "a connection first");

    // 1. The proxy stops during a 20 MB download (about 2 s over two 40 Mbit/s paths).
    let download = download_reaching_the_server(&bed, &stack, 20 * MB, 60);
    let st = stack.proxy.stop();
    assert!(st.success(), "exit: {st}\n{}", tail(&stack.proxy.log()));
    let r = download.join().unwrap();
    assert!(
        matches!(r, Ok(Ok(()))),
        "the download under way when the proxy stopped: {r:?}\n{}",
        stack_log(&stack)
    );
    let plog = stack.proxy.log();
    assert!(
        plog.contains("draining: the flows open now may finish") && plog.contains("flows_reset=0"),
        "{}",
        tail(&plog)
    );

    // 2. The proxy runs again; the relay stops during a download too long for its 2 s drain.
    stack.start_again(&bed, "proxy", "proxy2.log");
    stack.proxy.wait_for("subflow up", 2);
    let download = stop_during_a_download(&bed, &mut stack, true);
    let r = download.join().unwrap();
    assert_cut(&r, &stack);
    let rlog = stack.relay.log();
    assert!(
        rlog.contains("draining: the passengers' connections open now may finish")
            && rlog.contains("drained flows_reset=1"),
        "{}",
        tail(&rlog)
    );
}

/// While the proxy drains before it stops, the relay holds the passenger connections it
/// accepts for the next proxy instead of opening them at the one that stops: a long download
/// that starts during the drain completes, byte for byte, through the proxy started after it
/// (carried by the old one it would have been reset at the drain's end), while the download
/// open when the stop began is cut at the drain's end as before.
#[test]
fn a_passenger_connecting_while_the_proxy_drains_is_carried_by_the_next_proxy() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("dn", 40, 20);
    start_server(&bed);
    let mut stack = start_with_keys(&bed, "", "drain_s = 4");
    fetch_ok(&bed, &stack, KB, 64 * KB, "a connection first");
    let open = download_reaching_the_server(&bed, &stack, 800 * MB, 60);
    stack.proxy.terminate();
    wait_for_relay_log(
        &stack,
        "the proxy drains before it stops",
        None,
        "the relay was not told of the drain",
    );
    // About 10 s over the two paths: far longer than what is left of the drain.
    let held = download_in_background(&bed, 100 * MB, 60);
    let st = stack.proxy.wait_exit();
    assert!(st.success(), "exit: {st}\n{}", tail(&stack.proxy.log()));
    let r = open.join().unwrap();
    assert_cut(&r, &stack);
    let plog = stack.proxy.log();
    assert!(
        plog.contains("draining: the flows open now may finish") && plog.contains("flows_reset=1"),
        "{}",
        tail(&plog)
    );
    stack.start_again(&bed, "proxy", "proxy2.log");
    stack.proxy.wait_for("proxy running", 1);
    let r = held.join().unwrap();
    assert!(
        matches!(r, Ok(Ok(()))),
        "the download started during the drain: {r:?}\n{}",
        stack_log(&stack)
    );
    let page = scrape_metrics(&bed.ns("relay"));
    assert!(
        page.lines().any(|l| l == "polycorn_flows_held_total 1"),
        "{page}"
    );
    fetch_ok(&bed, &stack, KB, MB, "a connection through the next proxy");
}

/// The download of [`stop_during_a_download`] ended in an error, not a timeout.
fn assert_cut(r: &Result<Result<(), String>, tokio::time::error::Elapsed>, stack: &Stack) {
    assert!(
        matches!(r, Ok(Err(_))),
        "the passenger's download was cut: {r:?}\n{}",
        stack_log(stack)
    );
}

/// Both daemons' logs' tails, for failure messages.
fn stack_log(stack: &Stack) -> String {
    format!(
        "proxy:\n{}\nrelay:\n{}",
        tail(&stack.proxy.log()),
        tail(&stack.relay.log())
    )
}

/// The local port of the relay's subflow to `proxy` (an established TCP connection).
fn subflow_port(ns: &str, proxy: &str) -> u16 {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ss", "-Htn", "state", "established"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let ports: Vec<u16> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (local, peer) = (f.get(2)?, f.get(3)?);
            (*peer == proxy).then(|| local.rsplit(':').next()?.parse().ok())?
        })
        .collect();
    assert_eq!(ports.len(), 1, "one subflow to {proxy}:\n{text}");
    ports[0]
}

/// The local ports of every subflow the relay in `ns` has to a proxy listening on port 7700.
fn subflow_ports(ns: &str) -> Vec<u16> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ss", "-Htn", "state", "established"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (local, peer) = (f.get(2)?, f.get(3)?);
            peer.ends_with(":7700")
                .then(|| local.rsplit(':').next()?.parse().ok())?
        })
        .collect()
}

/// A train's gateway loses power in the middle of a download: from that moment nothing of its
/// subflows reaches the proxy — no FIN, no RST, no answer to the proxy's probes (every packet
/// of those connections is dropped at the proxy's devices) — and a few seconds later the
/// gateway is back with a new relay process. The proxy ends the silent session as soon as the
/// new one opens (every path of it silent for the stall time, 1.5 s), resetting its connection
/// to the server far sooner than the two-minute hold time, and the new relay carries
/// passengers. (The same branch after a crash, where the kernel closes the subflows, is
/// `two_trains_share_one_proxy_and_one_is_revoked_alone`.)
#[test]
fn a_relay_that_lost_power_has_its_silent_session_ended_when_it_comes_back() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("pw", 40, 20);
    start_server(&bed);
    let mut stack = start_with_keys(&bed, "hold_time_s = 120", "hold_time_s = 120");
    fetch_ok(&bed, &stack, KB, 64 * KB, "a connection first");
    let proxy_ns = bed.ns("proxy");
    let download = download_reaching_the_server(&bed, &stack, 800 * MB, 100);
    let ports = subflow_ports(&bed.ns("relay"));
    assert_eq!(ports.len(), 2, "one subflow per path: {ports:?}");
    let set = ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let chains: String = (0..2)
        .map(|i| {
            format!(
                "  chain in_path{i} {{ type filter hook ingress device \"path{i}\" priority 0; policy accept; meta protocol ip ip protocol tcp tcp sport {{ {set} }} drop; }}\n  chain out_path{i} {{ type filter hook egress device \"path{i}\" priority 0; policy accept; meta protocol ip ip protocol tcp tcp dport {{ {set} }} drop; }}\n"
            )
        })
        .collect();
    let _silence = Blackhole::with_rules(&proxy_ns, &chains);
    // The power goes: the relay dies without a word reaching the proxy.
    let cut = Instant::now();
    stack.relay.crash();
    let r = download.join().unwrap();
    assert_cut(&r, &stack);
    assert_eq!(
        established_to(&proxy_ns, "10.0.2.2"),
        1,
        "the proxy still holds the server connection of the silent session"
    );
    // The gateway boots again.
    std::thread::sleep(Duration::from_secs(3));
    stack.start_again(&bed, "relay", "relay2.log");
    stack.relay.wait_for("subflow up", 2);
    wait_until(
        20,
        "the proxy closes the silent session's connection to the server",
        || stack_log(&stack),
        || established_to(&proxy_ns, "10.0.2.2") == 0,
    );
    let took = cut.elapsed();
    eprintln!("power cut: server connection closed {took:?} later (hold time 120 s, 3 s reboot)");
    assert!(took < Duration::from_secs(30), "{took:?} (hold time 120 s)");
    assert!(
        stack
            .proxy
            .log()
            .contains("the relay opened a new session and its earlier one had every path down"),
        "{}",
        tail(&stack.proxy.log())
    );
    // Silence, not a close: no subflow of the old session ended before it was ended.
    let plog = stack.proxy.log();
    let before = &plog[..plog.find("earlier one had every path down").unwrap()];
    assert!(
        !before.contains("subflow ended"),
        "the old subflows ended on their own, so the power cut was not silent:\n{plog}"
    );
    let page = scrape_metrics(&proxy_ns);
    let restarted =
        "polycorn_relay_sessions_ended_total{relay=\"polycorn-relay\",how=\"restarted\"} 1";
    assert!(
        page.lines().any(|l| l == restarted),
        "no `{restarted}` in:\n{page}"
    );
    fetch_ok(
        &bed,
        &stack,
        KB,
        MB,
        "a connection through the relay that came back",
    );
}

/// After a blackout the proxy's frames can get through again while the relay's own TCP on
/// that path still waits out a backed-off retransmission timer. Here only the data the relay
/// sends on path0's subflow is lost, on its way into the proxy (its acknowledgements and any
/// new connection pass), so
/// the path keeps receiving while that subflow backs off: the relay replaces it (it is
/// neither silent nor idle), and traffic afterwards is byte-exact.
#[test]
fn backed_off_subflow_on_a_working_path_is_replaced() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("g", 40, 20);
    start_server(&bed);
    let stack = start_stack(&bed, "polycorn", "minrtt", 2);
    std::thread::sleep(Duration::from_secs(2));
    let port = subflow_port(&bed.ns("relay"), "10.100.0.2:7700");
    {
        // Probes go out every 200 ms, so the relay always has data in flight to back off on.
        // Its RTOs come about 0.24, 0.72, 1.7 and 3.6 s after the first loss.
        let _b = Blackhole::incoming_data(&bed.ns("proxy"), "path0", port);
        std::thread::sleep(Duration::from_secs(4));
    }
    wait_for_relay_log(
        &stack,
        "waits in RTO back-off",
        Some((
            "path silent",
            "the path kept receiving, yet the watchdog took it for silent",
        )),
        "the backed-off subflow was not replaced",
    );
    fetch_ok(
        &bed,
        &stack,
        256 * KB,
        4 * MB,
        "transfer after the replacement",
    );
}

/// Packets and bytes both ways through `dev` in `ns` so far (its link counters).
fn link_traffic(ns: &str, dev: &str) -> (u64, u64) {
    let read = |name: &str| -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "cat"])
            .arg(format!("/sys/class/net/{dev}/statistics/{name}"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{ns} {dev} {name}: {text:?}"))
    };
    (
        read("rx_packets") + read("tx_packets"),
        read("rx_bytes") + read("tx_bytes"),
    )
}

/// Packets and bytes both ways through `path0` and `path1` of `ns` while `run` runs.
fn traffic_during(ns: &str, run: impl FnOnce()) -> Vec<(u64, u64)> {
    let paths = ["path0", "path1"];
    let before: Vec<_> = paths.iter().map(|d| link_traffic(ns, d)).collect();
    run();
    paths
        .iter()
        .zip(before)
        .map(|(d, (p0, b0))| {
            let (p1, b1) = link_traffic(ns, d);
            (p1 - p0, b1 - b0)
        })
        .collect()
}

/// A train with nobody on board (in the depot, at night) costs its SIMs little: a while after
/// the last passenger connection (`idle_probe_after_s`, 10 s here, 120 s by default), both ends
/// probe each path every 5 s (`idle_probe_s`) instead of every 200 ms, no subflow is replaced
/// for seeming silent meanwhile, and the first connection afterwards is carried.
#[test]
fn an_idle_train_probes_its_paths_every_few_seconds() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("ip", 40, 20);
    start_server(&bed);
    let after = "idle_probe_after_s = 10";
    let stack = start_with_keys(&bed, after, after);
    fetch_ok(&bed, &stack, KB, MB, "before the idle spell");
    let relay_ns = bed.ns("relay");
    let rate = |secs: u64| -> Vec<(f64, f64)> {
        traffic_during(&relay_ns, || std::thread::sleep(Duration::from_secs(secs)))
            .into_iter()
            .map(|(p, b)| (p as f64 / secs as f64, b as f64 / secs as f64))
            .collect()
    };
    // Within the first 10 s: probes every 200 ms from each end.
    std::thread::sleep(Duration::from_secs(1));
    let busy = rate(7);
    std::thread::sleep(Duration::from_secs(5));
    let ups = stack.relay.log().matches("subflow up").count();
    let idle = rate(15);
    eprintln!("per path (packets/s, bytes/s): probing every 200 ms {busy:?}, idle {idle:?}");
    for (p, ((bp, _), (ip, ib))) in busy.iter().zip(&idle).enumerate() {
        assert!(
            *bp > 20.0,
            "path{p}: {bp} packets/s while probing every 200 ms"
        );
        // Each end's probe every 5 s: probe, answer and acknowledgement, about 1.2 packets/s.
        assert!(
            *ip < 3.0 && *ib < 400.0,
            "path{p} idle: {ip} packets/s, {ib} bytes/s"
        );
    }
    assert_eq!(
        stack.relay.log().matches("subflow up").count(),
        ups,
        "a subflow was replaced while idle:\n{}",
        tail(&stack.relay.log())
    );
    fetch_ok(
        &bed,
        &stack,
        64 * KB,
        4 * MB,
        "the first connection after the idle spell",
    );
}

/// A subflow keeps the congestion window a big download grew through the pauses after it (the
/// session's probes keep it from counting as idle). The downloads that follow are spread over
/// both paths (at least 18% of the three downloads' bytes, acknowledgements and probes included,
/// on either, and at least 10% of each one's; measured 24–30% per download, once 15.6%) rather
/// than put whole on the one whose window they fit (as before 2026-11-30, or with
/// `window_gain = 0`: 13% on the other path, probes and acknowledgements, and twice the
/// completion time on these 20 Mbit/s paths). The three are judged together because one
/// download's split varies with where the windows stood when it began.
#[test]
fn downloads_after_a_big_one_are_spread_over_both_paths() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("wg", 20, 20);
    start_server(&bed);
    // minRTT alone: HRSCH's ORI would copy chunks onto an idle path and hide where they went.
    let stack = start_stack_with(
        &bed,
        "polycorn",
        "minrtt",
        2,
        ("", ""),
        tempfile::tempdir().unwrap(),
    );
    fetch_ok(&bed, &stack, KB, 8 * MB, "the big download");
    let relay_ns = bed.ns("relay");
    let mut all = [0u64; 2];
    for i in 0..3 {
        std::thread::sleep(Duration::from_secs(2));
        let carried: Vec<u64> = traffic_during(&relay_ns, || {
            fetch_ok(&bed, &stack, KB, 256 * KB, "a download after the big one")
        })
        .into_iter()
        .map(|(_, bytes)| bytes)
        .collect();
        let total: u64 = carried.iter().sum();
        eprintln!("download {i}: bytes on path0, path1 {carried:?}");
        assert!(
            carried.iter().all(|&c| c * 100 >= total * 10),
            "download {i}: path0 and path1 carried {carried:?} bytes, one of them almost none"
        );
        all[0] += carried[0];
        all[1] += carried[1];
    }
    let total = all[0] + all[1];
    assert!(
        all.iter().all(|&c| c * 100 >= total * 18),
        "the three downloads: path0 and path1 carried {all:?} bytes"
    );
}

/// With `idle_refresh = "used"`, a subflow that carried a download is replaced by a fresh
/// connection once the path is idle (the proxy's congestion state for it is from the past),
/// and traffic afterwards is byte-exact.
#[test]
fn used_subflow_is_refreshed_when_idle_if_configured() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("h", 40, 20);
    start_server(&bed);
    let stack = start_stack_with(
        &bed,
        "polycorn",
        "minrtt",
        2,
        ("idle_refresh = \"used\"\n", ""),
        tempfile::tempdir().unwrap(),
    );
    // Subflows are at least 5 s old before a refresh; 4 MB crosses both paths.
    std::thread::sleep(Duration::from_secs(4));
    fetch_ok(&bed, &stack, KB, 4 * MB, "first download");
    wait_for_relay_log(
        &stack,
        "carried data under past conditions",
        None,
        "no refresh of a used idle subflow",
    );
    fetch_ok(&bed, &stack, KB, 8 * MB, "download after the refresh");
}

/// `slow_start_after_idle = false` is applied to the daemons' own network namespaces at startup
/// (and to nothing else), and traffic over subflows that keep their window is byte-exact.
#[test]
fn slow_start_after_idle_false_applies_to_the_daemons_namespaces_only() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("w", 40, 20);
    start_server(&bed);
    let sysctl = |role: &str| {
        let out = Command::new("ip")
            .args(["netns", "exec", &bed.ns(role), "cat"])
            .arg("/proc/sys/net/ipv4/tcp_slow_start_after_idle")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(
        sysctl("proxy"),
        "1",
        "the kernel default before the daemons start"
    );
    let stack = start_stack_with(
        &bed,
        "polycorn",
        "minrtt",
        2,
        (
            "slow_start_after_idle = false\n",
            "slow_start_after_idle = false\n",
        ),
        tempfile::tempdir().unwrap(),
    );
    assert_eq!(sysctl("proxy"), "0");
    assert_eq!(sysctl("relay"), "0");
    assert_eq!(sysctl("server"), "1", "another namespace is left alone");
    assert!(
        stack.proxy.log().contains("tcp_slow_start_after_idle set"),
        "{}",
        tail(&stack.proxy.log())
    );
    fetch_ok(&bed, &stack, KB, 4 * MB, "download");
    // Idle for longer than an RTO, then again: the kept window carries the second download.
    std::thread::sleep(Duration::from_secs(2));
    fetch_ok(&bed, &stack, 64 * KB, 4 * MB, "download after an idle gap");
}

/// The congestion control of every established TCP connection in `ns` whose local or peer
/// address ends in `:port` (`ss -ti` prints it in the info line after the connection).
fn congestion_of(ns: &str, port: u16) -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ss", "-Htin", "state", "established"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    let suffix = format!(":{port}");
    let mut ccs = Vec::new();
    for (k, l) in lines.iter().enumerate() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let ours = f.len() >= 4 && (f[2].ends_with(&suffix) || f[3].ends_with(&suffix));
        if !ours {
            continue;
        }
        let info = lines.get(k + 1).copied().unwrap_or("");
        let cc = ["reno", "cubic", "bbr"]
            .into_iter()
            .find(|c| info.split_whitespace().any(|w| w == *c))
            .unwrap_or("?");
        ccs.push(cc.to_string());
    }
    ccs
}

/// The baselines' tunnels run the configured congestion control at both ends — on every
/// kernel-MPTCP subflow too. Until 2026-11-25 the proxy left its accepted tunnels on the
/// system default, so the bench's MPTCP downlink ran the host's default (BBR here) while its
/// report said CUBIC. `reno` is configured here because no host defaults to it.
#[test]
fn baseline_tunnels_use_the_configured_congestion_control_on_every_subflow() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("cc", 20, 20);
    start_server(&bed);
    let reno = "congestion = \"reno\"\n";
    let stack = start_stack_with(
        &bed,
        "mptcp",
        "minrtt",
        2,
        (reno, reno),
        tempfile::tempdir().unwrap(),
    );
    // A download long enough (16 MB at 2 × 20 Mbit/s: several seconds) to look at its
    // subflows while it runs.
    let ns = bed.ns("client");
    let dl = std::thread::spawn(move || {
        in_ns(&ns, move || {
            Box::pin(async move {
                tokio::time::timeout(
                    Duration::from_secs(60),
                    one(Via::Transparent4, KB, 16 * MB, None),
                )
                .await
            })
        })
    });
    let t0 = Instant::now();
    let (mut at_proxy, mut at_relay) = (Vec::new(), Vec::new());
    while t0.elapsed() < Duration::from_secs(10) {
        at_proxy = congestion_of(&bed.ns("proxy"), 7701);
        at_relay = congestion_of(&bed.ns("relay"), 7701);
        if at_proxy.len() >= 2 && at_relay.len() >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = dl.join().unwrap();
    assert!(
        matches!(r, Ok(Ok(_))),
        "download: {r:?}\n{}",
        tail(&stack.relay.log())
    );
    assert!(
        at_proxy.len() >= 2 && at_relay.len() >= 2,
        "both MPTCP subflows at both ends: proxy {at_proxy:?}, relay {at_relay:?}"
    );
    assert!(
        at_proxy.iter().chain(&at_relay).all(|c| c == "reno"),
        "proxy {at_proxy:?}, relay {at_relay:?}\n{}",
        tail(&stack.proxy.log())
    );
    assert!(!stack
        .proxy
        .log()
        .contains("keeps the system's congestion control"));
}

/// `/etc/netns/NS/hosts`, which `ip netns exec NS` mounts over `/etc/hosts` for the processes
/// it starts (so a name resolves inside the relay's namespace only); removed on drop, with
/// `/etc/netns` itself when this created it.
struct NetnsHosts {
    dir: PathBuf,
    created_parent: bool,
}

impl NetnsHosts {
    fn new(ns: &str) -> NetnsHosts {
        let parent = PathBuf::from("/etc/netns");
        let created_parent = !parent.exists();
        let dir = parent.join(ns);
        std::fs::create_dir_all(&dir).unwrap();
        NetnsHosts {
            dir,
            created_parent,
        }
    }
    /// Rewrites the file in place (same inode: a running daemon's mount sees the change).
    fn set(&self, name: &str, addr: &str) {
        std::fs::write(
            self.dir.join("hosts"),
            format!("127.0.0.1 localhost\n{addr} {name}\n"),
        )
        .unwrap();
    }
}

impl Drop for NetnsHosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if self.created_parent {
            // Only if empty: another namespace's entry made meanwhile stays.
            let _ = std::fs::remove_dir("/etc/netns");
        }
    }
}

/// The relay's configuration `relay` with the proxy given as `name` for every path (as an
/// operator writes it), and `keys` added to `[relay]`.
fn one_proxy_name(mut relay: String, name: &str, keys: &str) -> String {
    relay = relay.replacen(
        "proxy = \"10.100.0.2:7700\"\n",
        &format!("proxy = \"{name}:7700\"\n{keys}"),
        1,
    );
    for i in 0..2 {
        relay = relay.replace(&format!("proxy = \"10.100.{i}.2:7700\"\n"), "");
    }
    relay
}

/// An operator gives the proxy as a host name. Every path reaches the proxy at the address the
/// name resolves to; when the proxy moves (the name points elsewhere and the old address stops
/// answering), the relay looks the name up again and every path reconnects to the new address.
#[test]
fn a_proxy_host_name_is_resolved_and_followed_when_the_proxy_moves() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("n", 40, 20);
    start_server(&bed);
    let name = "proxy.polycorn.test";
    let hosts = NetnsHosts::new(&bed.ns("relay"));
    // The proxy listens on every address: its path-0 and path-1 addresses are both "it".
    hosts.set(name, "10.100.0.2");
    // One name for every path, as an operator writes it.
    let stack = start_edited(&bed, "polycorn", |r| one_proxy_name(r, name, ""), |p| p, 2);
    let ups = |log: &str, addr: &str| {
        log.lines()
            .filter(|l| {
                l.contains("subflow up")
                    && l.contains(&format!("proxy={name}:7700"))
                    && l.contains(&format!("addr={addr}:7700"))
            })
            .count()
    };
    assert_eq!(
        ups(&stack.relay.log(), "10.100.0.2"),
        2,
        "{}",
        stack.relay.log()
    );
    fetch_ok(&bed, &stack, 256 * KB, 4 * MB, "transfer via the name");

    // The proxy moves: the name now points at its path-1 address, and the old one is dead.
    hosts.set(name, "10.100.1.2");
    let rules: String = ["path0", "path1"]
        .iter()
        .map(|d| {
            format!(
                "  chain in_{d} {{ type filter hook ingress device \"{d}\" priority 0; policy accept; meta protocol ip ip daddr 10.100.0.2 drop; }}\n"
            )
        })
        .collect();
    let _old_gone = Blackhole::with_rules(&bed.ns("proxy"), &rules);
    let took = wait_until(
        90,
        "the paths did not follow the name",
        || stack.relay.log(),
        || ups(&stack.relay.log(), "10.100.1.2") >= 2,
    );
    eprintln!(
        "both paths reconnected to the new address {:.1} s after the move",
        took.as_secs_f64()
    );
    let log = stack.relay.log();
    assert!(
        log.lines().any(|l| l.contains("proxy address")
            && l.contains("addr=10.100.1.2:7700")
            && l.contains("was=10.100.0.2:7700")),
        "the relay logs the new address:\n{}",
        tail(&log)
    );
    fetch_ok(&bed, &stack, 256 * KB, 4 * MB, "transfer after the move");
}

/// Two proxy processes with the fleet's credentials for one relay whose paths all name the proxy
/// by `name` (`relay_keys` added to its `[relay]`): the stack's proxy on 10.100.0.2, its
/// configuration edited by `edit` too, and a second one (returned) on 10.100.1.2, configured
/// alike with its metrics on port 9101.
fn two_proxies(
    bed: &Bed,
    name: &str,
    relay_keys: &str,
    edit: impl Fn(String) -> String,
) -> (Stack, Daemon) {
    let on = |i: usize, t: String| {
        t.replace("0.0.0.0:770", &format!("10.100.{i}.2:770"))
            .replace("127.0.0.1:9100", &format!("127.0.0.1:910{i}"))
    };
    let one_name = |r| one_proxy_name(r, name, relay_keys);
    let stack = start_edited(bed, "polycorn", one_name, |p| edit(on(0, p)), 2);
    let p1_config = stack.dir.path().join("proxy1.toml");
    let p0_text = std::fs::read_to_string(stack.dir.path().join("proxy.toml")).unwrap();
    std::fs::write(
        &p1_config,
        on(1, p0_text.replace("10.100.0.2:770", "0.0.0.0:770")),
    )
    .unwrap();
    let mut proxy1 = Daemon::start(
        &bed.ns("proxy"),
        "proxy",
        &p1_config,
        stack.dir.path().join("proxy1.log"),
    );
    proxy1.wait_for("proxy running", 1);
    (stack, proxy1)
}

/// How many subflows `relay` has brought up to proxy address `addr` (port 7700) so far.
fn subflows_up_at(relay: &Daemon, addr: &str) -> usize {
    relay
        .log()
        .lines()
        .filter(|l| l.contains("subflow up") && l.contains(&format!("addr={addr}:7700")))
        .count()
}

/// nftables chains (for [`Blackhole::with_rules`] in the proxy's namespace) that drop whatever
/// arrives over `devices` for `addr`: the host there is lost, silently.
fn cut_off(addr: &str, devices: &[&str]) -> String {
    devices
        .iter()
        .map(|d| {
            format!(
                "  chain in_{d} {{ type filter hook ingress device \"{d}\" priority 0; policy accept; meta protocol ip ip daddr {addr} drop; }}\n"
            )
        })
        .collect()
}

/// Failover: the proxy's name lists two proxy hosts (two processes here, each on its own
/// address with the fleet's credentials). While the one in use answers, the relay stays; when
/// its address goes silent (its host lost: every packet to it dropped), the download it
/// carried ends with the relay's hold time, and once no path has reached it for the hold time
/// (10 s at least) the relay moves every path to the other address, where new connections are
/// carried. When that one's process dies in turn (refusing, not silent) and the first host is
/// back, the relay moves back to the first proxy, which kept the session's old state: the
/// relay's renewed epoch makes it start afresh.
#[test]
fn a_relay_moves_to_the_names_other_proxy_when_its_own_is_gone() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("f", 40, 20);
    start_server(&bed);
    let name = "proxies.polycorn.test";
    let hosts = NetnsHosts::new(&bed.ns("relay"));
    std::fs::write(
        hosts.dir.join("hosts"),
        format!("127.0.0.1 localhost\n10.100.0.2 {name}\n10.100.1.2 {name}\n"),
    )
    .unwrap();
    // Proxy 0 on 10.100.0.2, proxy 1 on 10.100.1.2.
    let (stack, proxy1) = two_proxies(&bed, name, "hold_time_s = 5\n", |p| p);
    let ups = |addr: &str| subflows_up_at(&stack.relay, addr);
    // The resolver's order decides which comes first; every path is on that one.
    let (used, other) = if ups("10.100.0.2") > 0 {
        ("10.100.0.2", "10.100.1.2")
    } else {
        ("10.100.1.2", "10.100.0.2")
    };
    assert_eq!(ups(used), 2, "{}", stack.relay.log());
    assert_eq!(ups(other), 0, "{}", stack.relay.log());
    fetch_ok(&bed, &stack, 256 * KB, 4 * MB, "transfer before the loss");
    // The pre-service check tries every path at both proxies, the one in use first.
    let (code, text) = check_paths(&bed, &stack);
    eprintln!("{text}");
    assert_eq!(code, Some(0), "{text}");
    let at = |text: &str, addr: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains(&format!(" {addr}:7700")))
            .map(String::from)
            .collect()
    };
    for addr in [used, other] {
        let lines = at(&text, addr);
        assert_eq!(lines.len(), 2, "{addr}:\n{text}");
        assert!(lines.iter().all(|l| l.contains(": ok,")), "{text}");
    }
    assert!(
        text.contains("4 of 4 checks passed (2 path(s), 2 proxy address(es))"),
        "{text}"
    );
    let p0: Vec<&str> = text.lines().filter(|l| l.starts_with("p0 (")).collect();
    assert!(p0[0].contains(used) && p0[1].contains(other), "{text}");
    let download = download_reaching_the_server(&bed, &stack, 800 * MB, 120);

    // The host of the proxy in use is lost: nothing reaches its address any more.
    let gone = Blackhole::with_rules(&bed.ns("proxy"), &cut_off(used, &["path0", "path1"]));
    let (code, text) = check_paths(&bed, &stack);
    eprintln!("{text}");
    assert_eq!(code, Some(1), "{text}");
    let lost = at(&text, used);
    assert!(
        lost.len() == 2
            && lost
                .iter()
                .all(|l| l.contains("FAILED") && l.contains("timed out")),
        "{text}"
    );
    assert!(
        at(&text, other).iter().all(|l| l.contains(": ok,")),
        "{text}"
    );
    let moved = |log: &str| {
        log.lines().any(|l| {
            l.contains("moving to the name's next address")
                && l.contains(&format!("addr={other}:7700"))
                && l.contains(&format!("was={used}:7700"))
        })
    };
    let took = wait_until(
        90,
        "the relay did not move to the other proxy",
        || stack.relay.log(),
        || moved(&stack.relay.log()) && ups(other) >= 2,
    );
    eprintln!(
        "both paths up at the other proxy {:.1} s after the loss",
        took.as_secs_f64()
    );
    let log = stack.relay.log();
    let line = log
        .lines()
        .find(|l| l.contains("moving to the name's next address"))
        .unwrap();
    let unreached: u64 = line
        .split("unreached_s=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no unreached_s: {line}"));
    assert!(
        unreached >= 10,
        "moved after {unreached} s unreached: the hold time (at least 10 s) comes first\n{line}"
    );
    assert_eq!(
        log.matches("moving to the name's next address").count(),
        1,
        "one move:\n{}",
        tail(&log)
    );
    let page = scrape_metrics(&bed.ns("relay"));
    assert!(
        page.lines()
            .any(|l| l == "polycorn_proxy_failovers_total 1"),
        "the relay counts the move:\n{page}"
    );
    // The download the lost proxy carried was reset (with the relay's hold time), not left
    // hanging.
    match download.join().unwrap() {
        Ok(Err(_)) => {}
        other => panic!(
            "the lost proxy's download should end in a reset, got {other:?}\n{}",
            tail(&log)
        ),
    }
    for i in 0..3 {
        fetch_ok(
            &bed,
            &stack,
            64 * KB,
            4 * MB,
            &format!("transfer {i} after the move"),
        );
    }
    let survivor = if other == "10.100.1.2" {
        proxy1.log()
    } else {
        stack.proxy.log()
    };
    assert!(
        survivor.contains("new relay session"),
        "the other proxy carries the relay now:\n{}",
        tail(&survivor)
    );

    // The first host is back, and the other proxy's process dies (its host answers, refusing
    // every connection): the relay moves back around the list.
    drop(gone);
    let pid = if other == "10.100.1.2" {
        proxy1.child.id()
    } else {
        stack.proxy.child.id()
    };
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let moves = |log: &str| log.matches("moving to the name's next address").count();
    wait_until(
        90,
        "the relay did not move back",
        || stack.relay.log(),
        || moves(&stack.relay.log()) == 2 && ups(used) >= 4,
    );
    let log = stack.relay.log();
    assert!(
        log.lines()
            .any(|l| l.contains("moving to the name's next address")
                && l.contains(&format!("addr={used}:7700"))
                && l.contains(&format!("was={other}:7700"))),
        "{}",
        tail(&log)
    );
    fetch_ok(&bed, &stack, 64 * KB, 4 * MB, "transfer after moving back");
    let page = scrape_metrics(&bed.ns("relay"));
    assert!(
        page.lines()
            .any(|l| l == "polycorn_proxy_failovers_total 2"),
        "{page}"
    );
    drop(proxy1);
}

/// The proxy's host name moves to another proxy while the first one still works, and one path
/// loses its subflow: that path reaches the other proxy but waits, since the other path still
/// carries the session at the first proxy, so the passenger's download there goes on. When the
/// operator stops the first proxy (drain, then Close), every path moves to the other proxy.
#[test]
fn a_path_that_reaches_another_proxy_waits_until_the_sessions_proxy_stops() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("ew", 40, 20);
    start_server(&bed);
    let name = "proxy.polycorn.test";
    let hosts = NetnsHosts::new(&bed.ns("relay"));
    hosts.set(name, "10.100.0.2");
    let drain = |t: String| t.replacen("\n\n[tls]", "\ndrain_s = 2\n\n[tls]", 1);
    let (mut stack, proxy1) = two_proxies(&bed, name, "", drain);
    let ups = |addr: &str| subflows_up_at(&stack.relay, addr);
    assert_eq!(ups("10.100.0.2"), 2, "{}", stack.relay.log());
    let download = download_reaching_the_server(&bed, &stack, 800 * MB, 120);

    // The name moves; path 0 no longer reaches the first proxy.
    hosts.set(name, "10.100.1.2");
    let cut = Blackhole::with_rules(&bed.ns("proxy"), &cut_off("10.100.0.2", &["path0"]));
    let waits = |log: &str| {
        log.lines().any(|l| {
            l.contains("the path reached another proxy than the session's")
                && l.contains("path=p0")
                && l.contains("addr=10.100.1.2:7700")
        })
    };
    wait_until(
        60,
        "path 0 did not reach the other proxy",
        || stack.relay.log(),
        || waits(&stack.relay.log()),
    );
    std::thread::sleep(Duration::from_secs(3));
    let log = stack.relay.log();
    assert!(
        !download.is_finished(),
        "the download at the first proxy goes on:\n{}",
        tail(&log)
    );
    assert_eq!(ups("10.100.1.2"), 0, "{}", tail(&log));
    assert!(
        !log.contains("starts afresh") && !log.contains("flows_reset"),
        "nothing was reset:\n{}",
        tail(&log)
    );
    // The other proxy was told at once, and freed what the Hello set up.
    let other = proxy1.log();
    assert!(
        other.contains("this relay's session is with another proxy")
            && other.contains("no passenger connection was open")
            && !other.contains("connections were reset")
            && !other.contains("WARN"),
        "{}",
        tail(&other)
    );

    // The operator stops the first proxy: every path moves to the other one.
    drop(cut);
    stack.proxy.terminate();
    let st = stack.proxy.wait_exit();
    assert!(st.success(), "exit: {st}\n{}", tail(&stack.proxy.log()));
    assert_cut(&download.join().unwrap(), &stack);
    let took = wait_until(
        60,
        "the relay did not move to the other proxy",
        || stack.relay.log(),
        || ups("10.100.1.2") >= 2,
    );
    eprintln!(
        "both paths up at the other proxy {:.1} s after the first proxy's exit",
        took.as_secs_f64()
    );
    for i in 0..2 {
        fetch_ok(
            &bed,
            &stack,
            64 * KB,
            4 * MB,
            &format!("transfer {i} at the other proxy"),
        );
    }
    assert!(
        !stack
            .relay
            .log()
            .contains("starts afresh under a new epoch"),
        "the first proxy closed the session: the other one's answer is a first one\n{}",
        tail(&stack.relay.log())
    );
    drop(proxy1);
}

/// The proxy's host name moves (DNS, one address at a time, no failover) to another proxy
/// while the first one's host is unreachable, and later back while the first proxy still holds
/// the session from before. The relay learns from the other proxy's epoch that it speaks to
/// another proxy and renews its own epoch, so the first proxy, met again, sees a restarted
/// relay and starts afresh instead of taking the relay's new control frames for repeats of
/// old ones (which left every new connection hanging).
#[test]
fn a_relay_follows_its_proxy_name_to_another_proxy_and_back() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("mv", 40, 20);
    start_server(&bed);
    let name = "proxy.polycorn.test";
    let hosts = NetnsHosts::new(&bed.ns("relay"));
    hosts.set(name, "10.100.0.2");
    // Both proxies hold a relay's session for 120 s.
    let hold = |t: String| t.replacen("\n\n[tls]", "\nhold_time_s = 120\n\n[tls]", 1);
    let (stack, proxy1) = two_proxies(&bed, name, "", hold);
    let p0_text = std::fs::read_to_string(stack.dir.path().join("proxy.toml")).unwrap();
    assert!(p0_text.contains("hold_time_s = 120"), "{p0_text}");
    let ups = |addr: &str| subflows_up_at(&stack.relay, addr);
    assert_eq!(ups("10.100.0.2"), 2, "{}", stack.relay.log());
    fetch_ok(
        &bed,
        &stack,
        256 * KB,
        4 * MB,
        "transfer at the first proxy",
    );

    // The name moves to the other proxy, and the first one's host is cut off.
    hosts.set(name, "10.100.1.2");
    let gone = Blackhole::with_rules(
        &bed.ns("proxy"),
        &cut_off("10.100.0.2", &["path0", "path1"]),
    );
    let renewed = |log: &str| {
        log.matches("the session starts afresh under a new epoch")
            .count()
    };
    let took = wait_until(
        90,
        "the relay did not follow the name to the other proxy",
        || stack.relay.log(),
        || ups("10.100.1.2") >= 2 && renewed(&stack.relay.log()) >= 1,
    );
    eprintln!(
        "both paths up at the other proxy {:.1} s after the move",
        took.as_secs_f64()
    );
    for i in 0..2 {
        fetch_ok(
            &bed,
            &stack,
            64 * KB,
            4 * MB,
            &format!("transfer {i} at the other proxy"),
        );
    }
    assert!(
        proxy1.log().contains("new relay session"),
        "{}",
        tail(&proxy1.log())
    );

    // Back: the name points at the first proxy again, its host answers again, and the other
    // proxy's process is gone. The first proxy still holds the session from before.
    hosts.set(name, "10.100.0.2");
    drop(gone);
    let killed = Command::new("kill")
        .args(["-KILL", &proxy1.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let took = wait_until(
        90,
        "the relay did not follow the name back",
        || stack.relay.log(),
        || ups("10.100.0.2") >= 4 && renewed(&stack.relay.log()) >= 2,
    );
    eprintln!(
        "both paths up at the first proxy again {:.1} s after the move back",
        took.as_secs_f64()
    );
    for i in 0..3 {
        fetch_ok(
            &bed,
            &stack,
            64 * KB,
            4 * MB,
            &format!("transfer {i} back at the first proxy"),
        );
    }
    let page = scrape_metrics(&bed.ns("relay"));
    assert!(
        page.lines()
            .any(|l| l == "polycorn_session_renewals_total 2"),
        "two fresh starts, one at each proxy:\n{page}"
    );
    let first = stack.proxy.log();
    assert!(
        first.contains("the peer lost this session's state"),
        "the first proxy saw the relay start afresh:\n{}",
        tail(&first)
    );
    assert_eq!(
        first.matches("new relay session").count(),
        1,
        "the first proxy kept its session:\n{}",
        tail(&first)
    );
    drop(proxy1);
}

/// A minimal Debian 12 with systemd, for booting under `systemd-nspawn`: built once with
/// debootstrap (from Debian's mirror, `POLYCORN_TEST_DEBIAN_MIRROR` to choose another) and
/// kept under /var/tmp for later runs. `None` (with the reason) where the tools are missing
/// or the mirror cannot be reached.
fn debian_rootfs() -> Result<PathBuf, String> {
    let dir = PathBuf::from("/var/tmp/polycorn-test/rootfs-bookworm");
    if dir.join(".complete").exists() {
        return Ok(dir);
    }
    for tool in ["debootstrap", "systemd-nspawn", "nsenter"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Err(format!(
                "{tool} not found (Debian packages debootstrap, systemd-container)"
            ));
        }
    }
    let mirror = std::env::var("POLYCORN_TEST_DEBIAN_MIRROR")
        .unwrap_or_else(|_| "http://deb.debian.org/debian".into());
    let building = dir.with_extension("building");
    let _ = std::fs::remove_dir_all(&building);
    std::fs::create_dir_all(building.parent().unwrap()).map_err(|e| e.to_string())?;
    let out = Command::new("debootstrap")
        .args([
            "--variant=minbase",
            "--include=systemd,systemd-sysv,dbus,nftables,iproute2",
            "bookworm",
        ])
        .arg(&building)
        .arg(&mirror)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&building);
        return Err(format!(
            "debootstrap from {mirror} failed: {}",
            tail(&String::from_utf8_lossy(&out.stdout))
        ));
    }
    std::fs::write(building.join(".complete"), "").map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&building, &dir).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// A Debian container booted with systemd as its PID 1 inside the network namespace `netns`
/// (`systemd-nspawn -b`, the root file system read-only under a throwaway overlay), with
/// `bin` at /usr/local/bin/polycorn and the directory `etc` at /etc/polycorn. Shut down on drop.
struct Container {
    nspawn: Child,
    leader: u32,
    log: PathBuf,
    /// `relay` or `proxy`: whose units it runs.
    role: String,
}

impl Container {
    fn boot(
        rootfs: &Path,
        netns: &str,
        bin: &str,
        etc: &Path,
        log: PathBuf,
        role: &str,
    ) -> Container {
        let mut nspawn = Command::new("systemd-nspawn")
            .args([
                "--quiet",
                "--register=no",
                "--keep-unit",
                "--volatile=overlay",
                // systemd's own network powers for the relay (nftables, TPROXY sockets).
                "--capability=CAP_NET_ADMIN",
                "--boot",
            ])
            .arg(format!("--machine=polycorn-test-{role}"))
            .arg(format!("--directory={}", rootfs.display()))
            .arg(format!("--network-namespace-path=/run/netns/{netns}"))
            .arg(format!("--bind-ro={bin}:/usr/local/bin/polycorn"))
            .arg(format!("--bind={}:/etc/polycorn", etc.display()))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new().append(true).open(&log).unwrap(),
            ))
            .spawn()
            .unwrap();
        // The container's systemd: the first descendant of systemd-nspawn that runs it (the
        // processes before it are nspawn's own).
        let systemd_below = |pid: u32| -> Option<u32> {
            let mut at = pid;
            for _ in 0..4 {
                let children = std::fs::read_to_string(format!("/proc/{at}/task/{at}/children"))
                    .unwrap_or_default();
                at = children.split_whitespace().next()?.parse().ok()?;
                let comm = std::fs::read_to_string(format!("/proc/{at}/comm")).unwrap_or_default();
                if comm.trim() == "systemd" {
                    return Some(at);
                }
            }
            None
        };
        let t0 = Instant::now();
        let leader = loop {
            if let Some(pid) = systemd_below(nspawn.id()) {
                break pid;
            }
            if let Ok(Some(st)) = nspawn.try_wait() {
                panic!(
                    "systemd-nspawn exited: {st}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no container");
            std::thread::sleep(Duration::from_millis(50));
        };
        let c = Container {
            nspawn,
            leader,
            log,
            role: role.to_string(),
        };
        // Until its bus is up, systemctl cannot ask it; until it has made /run/systemd/system
        // (just after its exec), systemctl says `offline`.
        let t0 = Instant::now();
        let mut state = c.sh("systemctl is-system-running --wait");
        while (state.contains("Failed to connect to bus") || state.trim() == "offline")
            && t0.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(200));
            state = c.sh("systemctl is-system-running --wait");
        }
        assert!(
            state.contains("running") || state.contains("degraded"),
            "container boot: {state}\n{}",
            c.console()
        );
        c
    }

    /// Runs `script` with `sh -c` inside the container (all of its namespaces); its stdout and
    /// stderr.
    fn sh(&self, script: &str) -> String {
        let out = Command::new("nsenter")
            .args(["-t", &self.leader.to_string(), "-a", "sh", "-c", script])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    /// The journal of the role's units, with microsecond times.
    fn journal(&self) -> String {
        let r = &self.role;
        self.sh(&format!(
            "journalctl -o short-precise -u polycorn-{r}.socket -u polycorn-{r} --no-pager"
        ))
    }

    /// Installs the role's service and socket units as the README says, checks them with
    /// `systemd-analyze verify`, and starts them.
    fn start_units(&self) {
        let r = &self.role;
        let out = self.sh(&format!(
            "set -e
             polycorn config example {r}.service > /etc/systemd/system/polycorn-{r}.service
             polycorn config example {r}.socket --config /etc/polycorn/{r}.toml \
                 > /etc/systemd/system/polycorn-{r}.socket
             systemd-analyze verify /etc/systemd/system/polycorn-{r}.socket \
                 /etc/systemd/system/polycorn-{r}.service
             systemctl daemon-reload
             systemctl enable --now polycorn-{r}.socket
             systemctl restart polycorn-{r}
             echo units-started"
        ));
        assert!(out.contains("units-started"), "{out}\n{}", self.journal());
    }

    fn console(&self) -> String {
        tail(&std::fs::read_to_string(&self.log).unwrap_or_default())
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // SIGTERM asks systemd-nspawn for an orderly shutdown of the container.
        let _ = Command::new("kill")
            .args(["-TERM", &self.nspawn.id().to_string()])
            .status();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(_)) = self.nspawn.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.nspawn.kill();
        let _ = self.nspawn.wait();
    }
}

/// The relay's and the proxy's systemd units (`config example relay.service`, `relay.socket`,
/// `proxy.service`, `proxy.socket`) under systemd as PID 1, each in a Debian 12 container in its
/// namespace of the testbed: the relay's socket unit's transparent listeners
/// (`Transparent=yes`) take passengers' connections and start the relay, which installs its
/// interception and carries them; `relay --check-paths` passes beside it; restarts of either
/// service keep the listeners; stopping the relay's two units as the README says lets a
/// download open at that moment finish within `drain_s` before the socket unit's
/// `--remove-interception` removes the rules, which it leaves in place until the relay has
/// exited (systemd stops the two units side by side), and nothing of the relay stays
/// installed.
#[test]
fn the_relay_and_proxy_units_run_under_systemd_as_pid_1() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let rootfs = match debian_rootfs() {
        Ok(d) => d,
        Err(why) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("no container for the systemd test: {why}")
        }
        Err(why) => {
            eprintln!("skipping the systemd test: {why}");
            return;
        }
    };
    let bed = Bed::constant("sd", 40, 20);
    start_server(&bed);
    let dir = tempfile::tempdir().unwrap();
    generate_credentials(dir.path());
    let (relay_toml, proxy_toml) = configs(
        &bed,
        dir.path(),
        "polycorn",
        "polycorn",
        2,
        (
            "drain_s = 5\n",
            // What the nightly LinkDB unit learns from and stores into (below).
            "[context]\nrecord = \"/var/lib/polycorn/context\"\n\n[linkdb]\n\
             db = \"sqlite:/var/lib/polycorn/linkdb.sqlite\"\nroute = \"north\"\n\
             carriers = [\"A\", \"B\"]\ntrack_origin = [39.0, 116.0]\ntrack_heading_deg = 0.0\n",
        ),
    );
    // A ride north, as a proxy records it, for the LinkDB unit: 30 fixes 78 m apart, B handing
    // over once.
    let mut ride =
        String::from("t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A,cell_B,rsrp_dbm_B\n");
    for k in 0..30u32 {
        ride += &format!(
            "{},{:.7},116.0000000,78.00,0.0,1,-90.0,{},-95.0\n",
            k * 1000,
            39.0 + 0.0007 * f64::from(k),
            if k < 15 { 7 } else { 8 }
        );
    }
    std::fs::write(dir.path().join("ride.csv"), ride).unwrap();
    // Both containers see this directory as /etc/polycorn.
    let _ = (relay_toml, proxy_toml);
    let boot = |role: &str| {
        Container::boot(
            &rootfs,
            &bed.ns(role),
            bin(),
            dir.path(),
            dir.path().join(format!("console-{role}.log")),
            role,
        )
    };
    let proxy = boot("proxy");
    proxy.start_units();
    let c = boot("relay");
    c.start_units();
    let up = |n: usize| {
        wait_until(
            30,
            "the relay's subflows under systemd",
            || c.journal(),
            || c.journal().matches("subflow up").count() >= n,
        )
    };
    up(2);
    let pj = proxy.journal();
    assert!(
        pj.contains("socket passed by systemd") && pj.contains("subflow up"),
        "{}",
        tail(&pj)
    );
    let check =
        c.sh("polycorn relay --config /etc/polycorn/relay.toml --check-paths; echo status=$?");
    assert!(
        check.contains("2 of 2 path(s) reach the proxy") && check.contains("status=0"),
        "{check}"
    );
    let fetch = |down: u64, what: &str| fetch_ok_or_show(&bed, KB, down, what, &c.journal());
    fetch(
        4 * MB,
        "a transparent download through the relay under systemd",
    );
    let journal = c.journal();
    assert!(
        journal.contains("transparent (TPROXY) listener, passed by systemd"),
        "{}",
        tail(&journal)
    );

    // A restart of the service: the listener stays systemd's, the relay comes back.
    let out = c.sh("systemctl restart polycorn-relay && echo restarted");
    assert!(out.contains("restarted"), "{out}");
    up(4);
    fetch(4 * MB, "a download after the relay's restart");
    // The proxy's restart: its listener stays systemd's too, the relay's paths come back.
    let out = proxy.sh("systemctl restart polycorn-proxy && echo restarted");
    assert!(out.contains("restarted"), "{out}");
    up(6);
    fetch(4 * MB, "a download after the proxy's restart");
    // A reload of each (ExecReload: the file checked, then SIGHUP): nothing restarts, and the
    // TLS files, unchanged, are said to be.
    let main_pid = |c: &Container, unit: &str| {
        c.sh(&format!("systemctl show -p MainPID --value {unit}"))
            .trim()
            .to_string()
    };
    let pids = (
        main_pid(&c, "polycorn-relay"),
        main_pid(&proxy, "polycorn-proxy"),
    );
    for (box_, unit) in [(&c, "polycorn-relay"), (&proxy, "polycorn-proxy")] {
        let out = box_.sh(&format!("systemctl reload {unit} && echo reloaded"));
        assert!(
            out.contains("reloaded"),
            "{unit}: {out}\n{}",
            tail(&box_.journal())
        );
        wait_until(
            20,
            "the reload is applied",
            || box_.journal(),
            || {
                box_.journal()
                    .contains("reload: the TLS files are unchanged")
            },
        );
    }
    assert_eq!(
        (
            main_pid(&c, "polycorn-relay"),
            main_pid(&proxy, "polycorn-proxy")
        ),
        pids,
        "a reload restarted a service"
    );
    fetch(MB, "a download after the reloads");

    // LinkDB's nightly round on the proxy's host, as the README installs it: the timer enabled,
    // the service run once now: it learns the past day's ride the proxy recorded, then reloads
    // the proxy, which rebuilds its predictor without a restart.
    let out = proxy.sh(
        "set -e
         mkdir -p /var/lib/polycorn/context/train-1
         cp /etc/polycorn/ride.csv /var/lib/polycorn/context/train-1/context-20200101T060000Z.csv
         polycorn config example linkdb-learn.service \
             > /etc/systemd/system/polycorn-linkdb-learn.service
         polycorn config example linkdb-learn.timer > /etc/systemd/system/polycorn-linkdb-learn.timer
         systemd-analyze verify /etc/systemd/system/polycorn-linkdb-learn.service \
             /etc/systemd/system/polycorn-linkdb-learn.timer
         systemctl daemon-reload
         systemctl enable --now polycorn-linkdb-learn.timer
         systemctl start polycorn-linkdb-learn
         journalctl -u polycorn-linkdb-learn --no-pager
         systemctl list-timers --all --no-pager
         echo learnt",
    );
    assert!(
        out.contains("learnt")
            && out.contains("1 trips (1 new, 0 already stored), 1 handovers")
            && out.contains("polycorn-linkdb-learn.timer"),
        "{out}"
    );
    wait_until(
        20,
        "the proxy rebuilds LinkDB after the nightly import",
        || proxy.journal(),
        || proxy.journal().contains("LinkDB predictor rebuilt"),
    );
    assert!(
        proxy.journal().contains("rides=1"),
        "{}",
        tail(&proxy.journal())
    );
    assert_eq!(
        main_pid(&proxy, "polycorn-proxy"),
        pids.1,
        "the nightly round restarted the proxy"
    );
    // The timer itself starts the service: its calendar moved to every 10 s for a moment (a
    // drop-in), one run it starts is awaited, then the nightly calendar is back.
    let out = proxy.sh(
        "set -e
         mkdir -p /etc/systemd/system/polycorn-linkdb-learn.timer.d
         printf '[Timer]\nOnCalendar=\nOnCalendar=*:*:0/10\nRandomizedDelaySec=0\nAccuracySec=1s\n' \
             > /etc/systemd/system/polycorn-linkdb-learn.timer.d/soon.conf
         systemctl daemon-reload
         systemctl restart polycorn-linkdb-learn.timer
         echo armed",
    );
    assert!(out.contains("armed"), "{out}");
    let runs = || {
        proxy
            .sh("journalctl -u polycorn-linkdb-learn --no-pager")
            .matches("1 files imported before, not read again")
            .count()
    };
    wait_until(
        30,
        "the timer starts the nightly import",
        || {
            proxy.sh("systemctl list-timers --all --no-pager; journalctl -u polycorn-linkdb-learn --no-pager")
        },
        || runs() >= 1,
    );
    let out = proxy.sh("set -e
         rm -r /etc/systemd/system/polycorn-linkdb-learn.timer.d
         systemctl daemon-reload
         systemctl restart polycorn-linkdb-learn.timer
         while [ \"$(systemctl show -p ActiveState --value polycorn-linkdb-learn)\" = activating ]
         do sleep 0.2; done
         systemctl show polycorn-linkdb-learn.timer -p TimersCalendar --no-pager");
    assert!(
        out.contains("OnCalendar=*-*-* 00:30:00 UTC"),
        "the nightly calendar is not back: {out}"
    );

    // Stop both units, as the README says, while a download runs.
    let download = download_in_background(&bed, 24 * MB, 60);
    wait_until(
        20,
        "the proxy connects to the server",
        || c.journal(),
        || established_to(&bed.ns("proxy"), "10.0.2.2") > 0,
    );
    let out = c.sh("systemctl stop polycorn-relay.socket polycorn-relay && echo stopped");
    assert!(out.contains("stopped"), "{out}");
    let r = download.join().unwrap();
    let journal = c.journal();
    assert!(
        matches!(r, Ok(Ok(()))),
        "the download open at the stop finishes within drain_s: {r:?}\n{}",
        tail(&journal)
    );
    eprintln!("{}", tail(&journal));
    // The last of each (the restart drained too).
    let at = |what: &str| {
        journal
            .lines()
            .enumerate()
            .filter(|(_, l)| l.contains(what))
            .map(|(i, _)| i)
            .last()
            .unwrap_or_else(|| panic!("no `{what}` in:\n{journal}"))
    };
    assert!(
        at("drained") < at("removed the relay's interception"),
        "the rules stayed until the relay had drained:\n{journal}"
    );
    let tables = Command::new("ip")
        .args(["netns", "exec", &bed.ns("relay"), "nft", "list", "tables"])
        .output()
        .unwrap();
    let tables = String::from_utf8_lossy(&tables.stdout);
    assert!(!tables.contains("polycorn_relay"), "{tables}");
    drop(c);
}

/// A Prometheus server (Debian's, see `support/prometheus.rs`) in a namespace of the testbed,
/// scraping the daemon there (`127.0.0.1:9100`) and evaluating the shipped alerting rules, both
/// every second; its API on `127.0.0.1:9190` of that namespace. Killed on drop.
struct Prometheus {
    ns: String,
    child: Child,
    log: PathBuf,
}

/// An alert as Prometheus's API lists it: name, state (`pending` or `firing`), labels.
type Alert = (String, String, std::collections::BTreeMap<String, String>);
/// An alert expected: name, state, and labels it must carry (among others).
type Expected<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

impl Prometheus {
    fn start(prometheus: &Path, ns: &str, dir: &Path, role: &str) -> Prometheus {
        let cfg = dir.join(format!("prometheus-{role}.yml"));
        std::fs::write(
            &cfg,
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [alerts.yml]\n\
             scrape_configs:\n  - job_name: polycorn\n    static_configs:\n      - targets: [\"127.0.0.1:9100\"]\n",
        )
        .unwrap();
        let log = dir.join(format!("prometheus-{role}.log"));
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(prometheus)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join(format!("tsdb-{role}")).display()
            ))
            .arg("--web.listen-address=127.0.0.1:9190")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let p = Prometheus {
            ns: ns.to_string(),
            child,
            log,
        };
        p.wait(30, "Prometheus ready", |p| p.try_get("/-/ready").is_some());
        p
    }

    /// The body of `GET path` on the API, when it answers 200.
    fn try_get(&self, path: &str) -> Option<String> {
        let req = format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n");
        in_ns(&self.ns, move || {
            Box::pin(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut s = TcpStream::connect("127.0.0.1:9190").await.ok()?;
                s.write_all(req.as_bytes()).await.ok()?;
                let mut all = String::new();
                s.read_to_string(&mut all).await.ok()?;
                let (head, body) = all.split_once("\r\n\r\n")?;
                head.starts_with("HTTP/1.0 200").then(|| body.to_string())
            })
        })
    }

    /// `data` of an API answer.
    fn api(&self, path: &str) -> serde_json::Value {
        let body = self
            .try_get(path)
            .unwrap_or_else(|| panic!("{path}:\n{}", tail(&self.log())));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{body}");
        v["data"].clone()
    }

    fn alerts(&self) -> Vec<Alert> {
        let data = self.api("/api/v1/alerts");
        let mut out: Vec<Alert> = data["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let labels = a["labels"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .filter(|(k, _)| *k != "alertname")
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                (
                    a["labels"]["alertname"].as_str().unwrap().to_string(),
                    a["state"].as_str().unwrap().to_string(),
                    labels,
                )
            })
            .collect();
        out.sort();
        out
    }

    /// Every alerting rule loaded, as (name, health, last error).
    fn rules(&self) -> Vec<(String, String, String)> {
        let data = self.api("/api/v1/rules");
        let mut out = Vec::new();
        for g in data["groups"].as_array().unwrap() {
            for r in g["rules"].as_array().unwrap() {
                out.push((
                    r["name"].as_str().unwrap().to_string(),
                    r["health"].as_str().unwrap().to_string(),
                    r["lastError"].as_str().unwrap_or("").to_string(),
                ));
            }
        }
        out
    }

    /// Waits up to `secs` for `done`, polling every 200 ms.
    fn wait(&self, secs: u64, what: &str, done: impl Fn(&Prometheus) -> bool) {
        wait_until(secs, what, || self.log(), || done(self));
    }

    /// Waits up to `secs` for the active alerts to be exactly `want` (name, state, and the
    /// labels given, which each alert must carry).
    fn wait_alerts(&self, secs: u64, what: &str, want: &[Expected]) {
        let matches = |got: &[Alert]| {
            got.len() == want.len()
                && want.iter().all(|(name, state, labels)| {
                    got.iter().any(|(n, s, l)| {
                        n == name
                            && s == state
                            && labels
                                .iter()
                                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
                    })
                })
        };
        let t0 = Instant::now();
        loop {
            let got = self.alerts();
            if matches(&got) {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(secs),
                "{what}: within {secs} s on {}, alerts {want:?} expected, got {got:?}",
                self.ns
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The alerting rules `polycorn config example alerts` ships, loaded by a real Prometheus at
/// each end and evaluated on what the running relay and proxy export: every rule evaluates
/// without error, a healthy pair raises nothing, one carrier dark raises the path alert at both
/// ends (pending: it waits 10 minutes), every carrier dark raises the relay's offline alert and
/// nothing on the proxy (there a train switched off looks the same), and a relay killed and
/// started again raises the proxy's restart alert. (`tests/alerts.rs` runs promtool's unit
/// tests of the same rules, the durations included.)
#[test]
fn the_shipped_alerting_rules_judge_a_running_relay_and_proxy() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let Some(prometheus) = prometheus::tool("prometheus") else {
        return;
    };
    let bed = Bed::constant("al", 40, 20);
    start_server(&bed);
    let mut stack = start_stack(&bed, "polycorn", "polycorn", 2);
    let rules = prometheus::shipped_rules(bin());
    let alerting_rules = rules.matches("- alert: ").count();
    std::fs::write(stack.dir.path().join("alerts.yml"), &rules).unwrap();
    let ends = [
        (
            "relay",
            Prometheus::start(&prometheus, &bed.ns("relay"), stack.dir.path(), "relay"),
        ),
        (
            "proxy",
            Prometheus::start(&prometheus, &bed.ns("proxy"), stack.dir.path(), "proxy"),
        ),
    ];
    for (role, p) in &ends {
        p.wait(
            30,
            &format!("the {role} scraped and known by its role"),
            |p| {
                let v = p.api(&format!(
                    "/api/v1/query?query=polycorn_build_info%7Brole%3D%22{role}%22%7D"
                ));
                v["result"].as_array().is_some_and(|r| r.len() == 1)
            },
        );
    }
    // A few evaluations on what both daemons export.
    std::thread::sleep(Duration::from_secs(3));
    for (role, p) in &ends {
        let rules = p.rules();
        assert_eq!(rules.len(), alerting_rules, "{role}: {rules:?}");
        for (name, health, error) in &rules {
            assert_eq!(health, "ok", "{role}: {name}: {error}");
        }
        assert!(p.alerts().is_empty(), "{role}, healthy: {:?}", p.alerts());
    }
    // The relay names its paths as configured, and the proxy as the relay's Hellos did.
    let dark = Blackhole::new(&bed.ns("relay"), &["path1"]);
    for ((_, p), path) in ends.iter().zip(["p1", "p1"]) {
        p.wait_alerts(
            30,
            "one carrier dark",
            &[(
                "PolycornPathDown",
                "pending",
                &[("path", path), ("relay", "polycorn-relay")],
            )],
        );
    }
    drop(dark);
    for (_, p) in &ends {
        p.wait_alerts(30, "the carrier back", &[]);
    }
    let dark = Blackhole::new(&bed.ns("relay"), &["path0", "path1"]);
    let (_, relay) = &ends[0];
    let (_, proxy) = &ends[1];
    relay.wait_alerts(
        30,
        "every carrier dark",
        &[(
            "PolycornRelayOffline",
            "pending",
            &[("relay", "polycorn-relay")],
        )],
    );
    std::thread::sleep(Duration::from_secs(3));
    relay.wait_alerts(
        0,
        "every carrier dark, 3 s on",
        &[("PolycornRelayOffline", "pending", &[])],
    );
    proxy.wait_alerts(0, "every carrier dark, on the proxy", &[]);
    drop(dark);
    for (_, p) in &ends {
        p.wait_alerts(30, "the carriers back", &[]);
    }
    stack.relay.crash();
    stack.start_again(&bed, "relay", "relay-after-crash.log");
    stack.relay.wait_for("subflow up", 2);
    proxy.wait_alerts(
        30,
        "the relay killed and started again",
        &[(
            "PolycornRelayRestarted",
            "firing",
            &[("relay", "polycorn-relay"), ("how", "restarted")],
        )],
    );
    relay.wait_alerts(30, "the relay started again", &[]);
}

/// The proxy's allow list of [`configs`], and one that also opens the relay's path addresses:
/// on a carrier with public addresses (IPv6, public-IP APNs) nothing else keeps the proxy from
/// connecting to them.
const ALLOW: &str = "allow = [\"10.0.2.0/24\", \"fd00:2::/64\"]";
const ALLOW_PATHS: &str =
    "allow = [\"10.0.2.0/24\", \"fd00:2::/64\", \"10.100.0.0/16\", \"fd00:100::/32\"]";

/// Connect to `dst` and read until the connection ends (at most `secs`): what came back, or
/// the error that ended it.
async fn connect_and_read(dst: &str, secs: u64) -> Result<Vec<u8>, String> {
    use tokio::io::AsyncReadExt;
    let dst: SocketAddr = dst.parse().unwrap();
    let run = async {
        let mut s = TcpStream::connect(dst).await.map_err(|e| e.to_string())?;
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.map_err(|e| e.to_string())?;
        Ok(got)
    };
    tokio::time::timeout(Duration::from_secs(secs), run)
        .await
        .unwrap_or_else(|_| Err("still open".into()))
}

/// The SOCKS5 reply code to a CONNECT to `dst` through the relay (0: succeeded).
async fn socks_reply_code(dst: &str) -> u8 {
    match socks_connect(dst.parse().unwrap()).await {
        Ok(_) => 0,
        Err(e) => e
            .to_string()
            .strip_prefix("SOCKS5 reply ")
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("SOCKS5 to {dst}: {e}")),
    }
}

/// A service on the proxy's host bound to every address (as metrics endpoints and databases
/// often are) on port 9911: it answers `host` to each connection. Returns how many it accepted.
fn start_host_service(bed: &Bed) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    let (ns, count) = (bed.ns("proxy"), accepted.clone());
    std::thread::spawn(move || {
        let _g = InNamespace::enter(&ns).unwrap();
        // Dual-stack (net.ipv6.bindv6only = 0): IPv4 connections arrive here too.
        let l = std::net::TcpListener::bind("[::]:9911").unwrap();
        tx.send(()).unwrap();
        for s in l.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            let _ = (&s).write_all(b"host");
        }
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    accepted
}

/// Hardening: a connection to one of the relay's own addresses never becomes a flow (carried,
/// the proxy would connect back to the train and the relay would carry that again, without
/// end), and no passenger reaches the proxy's own host, whichever way they ask.
#[test]
fn connections_to_the_relays_or_the_proxys_own_addresses_are_refused_without_a_loop() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("o", 100, 10);
    start_server(&bed);
    let host = start_host_service(&bed);
    let stack = start_edited(
        &bed,
        "polycorn",
        |t| t,
        |t| {
            assert!(t.contains(ALLOW));
            t.replace(ALLOW, ALLOW_PATHS)
        },
        2,
    );
    let flows = || metric_value(&bed.ns("relay"), "polycorn_flows_total").unwrap_or(0);
    let refused = |reason: &str| {
        metric_value(
            &bed.ns("relay"),
            &format!("polycorn_passenger_refusals_total{{reason=\"{reason}\"}}"),
        )
        .unwrap_or(0)
    };

    // From the Internet side, to the relay's path addresses at its transparent port: the
    // listener takes only the LAN's connections, so the kernel refuses these.
    let from_outside = in_ns(&bed.ns("proxy"), || {
        Box::pin(async {
            let mut out = Vec::new();
            for dst in ["10.100.0.1:7070", "10.100.1.1:7070", "[fd00:100:0::1]:7070"] {
                out.push((dst, connect_and_read(dst, 5).await));
            }
            out
        })
    });
    for (dst, r) in &from_outside {
        assert!(
            r.as_ref().is_err_and(|e| e.contains("refused")),
            "{dst} from outside: {r:?}"
        );
    }
    // From the LAN, by transparent interception and by SOCKS5, to the relay's own addresses
    // (its paths' and its LAN address): refused at the relay, no flow.
    let from_lan = in_ns(&bed.ns("client"), || {
        Box::pin(async {
            let mut out = Vec::new();
            for dst in ["10.100.0.1:7070", "[fd00:100:0::1]:7070", "10.0.1.1:7070"] {
                out.push((dst, connect_and_read(dst, 5).await.map(|b| b.len())));
            }
            let mut socks = Vec::new();
            for dst in [
                "10.100.0.1:7070",
                "[fd00:100:1::1]:7070",
                "[::ffff:10.100.1.1]:7070",
            ] {
                socks.push((dst, socks_reply_code(dst).await));
            }
            (out, socks)
        })
    });
    for (dst, r) in &from_lan.0 {
        assert!(
            matches!(r, Ok(0)) || r.is_err(),
            "{dst} from the LAN was answered: {r:?}"
        );
    }
    for (dst, code) in &from_lan.1 {
        assert_eq!(
            *code, 2,
            "SOCKS5 to {dst}: reply {code}, not 2 (not allowed)"
        );
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        flows(),
        0,
        "connections to the relay's own addresses became flows:\n{}",
        tail(&stack.relay.log())
    );
    assert!(
        refused("own_address") >= 6,
        "{from_lan:?}\n{}",
        scrape_metrics(&bed.ns("relay"))
    );
    // One warning line for the lot (once per 10 s).
    assert_eq!(
        stack
            .relay
            .log()
            .matches("refused a connection to one of the relay's own addresses")
            .count(),
        1,
        "{}",
        tail(&stack.relay.log())
    );

    // The proxy's own host, by every route: its server-side and path-side addresses, IPv4,
    // IPv6 and IPv4-mapped, transparent and SOCKS5 (address and host name).
    let to_proxy = in_ns(&bed.ns("client"), || {
        Box::pin(async {
            let mut out = Vec::new();
            for dst in ["10.0.2.1:9911", "[fd00:2::1]:9911", "10.100.0.2:9911"] {
                out.push((dst, connect_and_read(dst, 8).await));
            }
            let mut socks = Vec::new();
            for dst in [
                "10.0.2.1:9911",
                "[fd00:2::1]:9911",
                "[::ffff:10.0.2.1]:9911",
            ] {
                socks.push((dst, socks_reply_code(dst).await));
            }
            (out, socks)
        })
    });
    for (dst, r) in &to_proxy.0 {
        assert!(
            r.as_ref().map_or(true, |b| b.is_empty()),
            "{dst}: a passenger reached the proxy's host: {r:?}"
        );
    }
    for (dst, code) in &to_proxy.1 {
        assert_eq!(
            *code, 2,
            "SOCKS5 to {dst}: reply {code}, not 2 (not allowed)"
        );
    }
    assert_eq!(
        host.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the proxy's host service was reached"
    );
    assert!(
        stack.proxy.log().contains("the proxy's own host"),
        "{}",
        tail(&stack.proxy.log())
    );
    // And passengers are carried as before.
    fetch_ok(&bed, &stack, 10 * KB, MB, "transfer after the refusals");
}

/// Hardening: one passenger past its open-connection cap or its new-connection rate is
/// refused (counted, one log line per 10 s) while another passenger is carried; the refused
/// passenger gets through again once under its limits; a DNS query whose resolver accepts and
/// never answers has its flow reset after the query timeout, leaving nothing open.
#[test]
fn a_passenger_over_its_limits_is_refused_alone_and_unanswered_dns_leaves_nothing_open() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let bed = Bed::constant("q", 100, 10);
    start_server(&bed);
    ip_in(
        &bed.ns("client"),
        &["addr", "add", "10.0.1.50/24", "dev", "lan0"],
    )
    .unwrap();
    // A resolver that accepts over TCP and never answers.
    {
        let (ns, (tx, rx)) = (bed.ns("server"), std::sync::mpsc::channel());
        std::thread::spawn(move || {
            let _g = InNamespace::enter(&ns).unwrap();
            let l = std::net::TcpListener::bind("10.0.2.2:5353").unwrap();
            tx.send(()).unwrap();
            let mut held = Vec::new();
            for s in l.incoming().flatten() {
                held.push(s);
            }
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
    }
    let stack = start_edited(
        &bed,
        "polycorn",
        |t| {
            let t = t.replace("upstream = \"10.0.2.2:53\"", "upstream = \"10.0.2.2:5353\"");
            t + "\n[limits]\npassenger_max_flows = 8\npassenger_flow_rate = 1\npassenger_flow_burst = 10\n"
        },
        |t| t,
        2,
    );
    let relay_ns = bed.ns("relay");
    let metric = |key: &str| metric_value(&relay_ns, key).unwrap_or(0);

    // Passenger A (10.0.1.2) holds 8 connections open; its 9th is refused, B's is carried.
    let (held, ninth, other) = in_ns(&bed.ns("client"), || {
        Box::pin(async {
            let mut held = Vec::new();
            for _ in 0..8 {
                held.push(TcpStream::connect(SERVER4).await.unwrap());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let ninth = connect_and_read(SERVER4, 5).await.map(|b| b.len());
            let other = one(
                Via::Transparent4,
                10 * KB,
                200 * KB,
                Some("10.0.1.50".parse().unwrap()),
            )
            .await
            .map(|_| ());
            (held.len(), ninth, other.map_err(|e| e.to_string()))
        })
    });
    assert_eq!(held, 8);
    assert!(
        matches!(ninth, Ok(0)) || ninth.is_err(),
        "9th connection: {ninth:?}"
    );
    assert!(
        other.is_ok(),
        "another passenger was not carried: {other:?}"
    );
    assert_eq!(
        metric("polycorn_passenger_refusals_total{reason=\"flows\"}"),
        1
    );
    // Its connections closed (the runtime above is gone), A opens new ones again; then, past
    // its burst of 10 new connections (it spent 8) and 1 a second, it is refused by rate.
    std::thread::sleep(Duration::from_secs(1));
    let (ok, refused) = in_ns(&bed.ns("client"), || {
        Box::pin(async {
            let (mut ok, mut refused) = (0, 0);
            for _ in 0..45 {
                match one(Via::Transparent4, 100, 100, None).await {
                    Ok(_) => ok += 1,
                    Err(_) => refused += 1,
                }
            }
            (ok, refused)
        })
    });
    assert!(ok >= 2 && refused >= 20, "{ok} carried, {refused} refused");
    assert!(metric("polycorn_passenger_refusals_total{reason=\"rate\"}") >= 20);
    let log = stack.relay.log();
    assert_eq!(
        log.matches("passenger at its limit of open connections")
            .count(),
        1,
        "{}",
        tail(&log)
    );
    assert!(
        log.matches("passenger opening connections faster than")
            .count()
            <= 1,
        "{}",
        tail(&log)
    );

    // Unanswered DNS: B sends 6 queries (within its burst); after the 5 s query timeout their
    // flows are reset and the proxy's connections to the resolver closed.
    in_ns(&bed.ns("client"), || {
        Box::pin(async {
            let u = tokio::net::UdpSocket::bind("10.0.1.50:0").await.unwrap();
            for id in 0..6u16 {
                let mut q = id.to_be_bytes().to_vec();
                q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
                q.extend_from_slice(b"\x07example\x03com\x00\x00\x01\x00\x01");
                u.send_to(&q, "10.0.1.1:53").await.unwrap();
            }
        })
    });
    // The proxy's side is half-closed (it passed the query's end on), so counted in any state.
    let to_resolver = || {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &bed.ns("proxy"),
                "ss",
                "-Htn",
                "dst",
                "10.0.2.2:5353",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    wait_until(
        5,
        "the proxy connecting to the silent resolver",
        || stack.proxy.log(),
        || to_resolver() >= 1,
    );
    wait_until(
        12,
        "every unanswered query's flow closed at both ends",
        || stack.relay.log(),
        || metric("polycorn_flows_open") == 0 && to_resolver() == 0,
    );
}
