//! The harness: a testbed of namespaces ([`Bed`]), the daemons run in it ([`Daemon`],
//! [`Stack`]) from generated configurations, and byte-checked passenger transfers through them.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use polycorn_emu::netns::InNamespace;
use polycorn_lab::harness;
use polycorn_net::loadgen;
use tokio::net::{TcpSocket, TcpStream};

/// The configuration types the tests build the daemons' files from.
pub(crate) use polycorn_net::config::{
    ContextSource, IdleRefresh, InterceptConfig, LinkDbConfig, PathConfig, ProxyConfig,
    ProxySection, RelayConfig, RelayMode, RelaySection, TlsFiles,
};

pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

pub(crate) fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_polycorn")
}

pub(crate) fn is_root() -> bool {
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

/// A testbed built by `polycorn testbed up` (namespaces and a background emulator); a leftover
/// of the same name (a crashed run's) is removed first, and the testbed is removed on drop,
/// also when the test panics ([`harness::Guard`]).
pub(crate) struct Bed {
    pub(crate) name: String,
    _guard: harness::Guard,
}

impl Bed {
    pub(crate) fn up(tag: &str, model: &[&str]) -> Bed {
        let name = format!("rp{}{tag}", std::process::id() % 10_000);
        let guard = harness::Guard::claim(&name).unwrap_or_else(|e| {
            eprintln!("testbed down: {e}");
            harness::Guard::adopt(&name)
        });
        let mut args = vec!["testbed", "up", "--name", &name];
        args.extend_from_slice(model);
        let out = Command::new(bin()).args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "testbed up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Bed {
            name,
            _guard: guard,
        }
    }
    /// Two paths of constant capacity and one-way delay.
    pub(crate) fn constant(tag: &str, mbit: u32, delay_ms: u32) -> Bed {
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
    pub(crate) fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.name)
    }
}

/// A `polycorn relay|proxy` process in a namespace ([`harness::Daemon`]: SIGTERM, then SIGKILL,
/// on drop), its log filter from `POLYCORN_TEST_LOG` (default `info`; raises the daemons' log
/// level when debugging a failure), with the tests' panicking waits.
pub(crate) struct Daemon(harness::Daemon);

impl std::ops::Deref for Daemon {
    type Target = harness::Daemon;
    fn deref(&self) -> &harness::Daemon {
        &self.0
    }
}

impl std::ops::DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut harness::Daemon {
        &mut self.0
    }
}

impl Daemon {
    pub(crate) fn start(ns: &str, role: &str, config: &Path, log: PathBuf) -> Daemon {
        Daemon(
            harness::Daemon::start_exe(
                Path::new(bin()),
                "POLYCORN_TEST_LOG",
                ns,
                role,
                config,
                log,
            )
            .unwrap(),
        )
    }
    /// SIGKILL: a crash, or the machine losing power (no goodbye to the peer).
    pub(crate) fn crash(&mut self) {
        let st = self
            .0
            .signal_and_wait(harness::Signal::SIGKILL, Duration::from_secs(10))
            .unwrap();
        assert!(st.is_some(), "no exit within 10 s of SIGKILL");
    }
    /// SIGTERM (what `systemctl stop` sends); waits up to 10 s for the exit and returns it.
    pub(crate) fn stop(&mut self) -> std::process::ExitStatus {
        self.terminate();
        self.wait_exit()
    }
    /// SIGTERM, without waiting.
    pub(crate) fn terminate(&self) {
        self.0.signal(harness::Signal::SIGTERM).unwrap();
    }
    /// Waits up to 10 s for the exit and returns it.
    pub(crate) fn wait_exit(&mut self) -> std::process::ExitStatus {
        match self.0.wait_exit(Duration::from_secs(10)).unwrap() {
            Some(st) => st,
            None => panic!("no exit within 10 s of SIGTERM:\n{}", tail(&self.log())),
        }
    }
    /// SIGHUP (what `systemctl reload` sends).
    pub(crate) fn hangup(&self) {
        self.0.signal(harness::Signal::SIGHUP).unwrap();
    }
    pub(crate) fn wait_for(&mut self, what: &str, count: usize) {
        let until = Instant::now() + Duration::from_secs(20);
        if let Err(e) = self.0.wait_for(what, count, until) {
            panic!("`{what}` ×{count} within 20 s: {e}:\n{}", self.log());
        }
    }
}

pub(crate) struct Stack {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) proxy: Daemon,
    pub(crate) relay: Daemon,
}

impl Stack {
    /// Starts `role` (`relay` or `proxy`) again with its configuration, logging to `log` in the
    /// stack's directory (after a stop or a crash).
    pub(crate) fn start_again(&mut self, bed: &Bed, role: &str, log: &str) {
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

/// The relay's and the proxy's configurations of a stack in mode `mode` (`polycorn`, `mptcp`
/// or `single`) with scheduler `spec` at both ends and `paths` paths: path `i` named `p{i}` on
/// device `path{i}` from 10.100.{i}.1 to the proxy at 10.100.{i}.2:7700; passengers intercepted
/// transparently (IPv4 and IPv6, nftables installed) and over SOCKS5 at 10.0.1.1:1080, their DNS
/// answered at 10.0.1.1:53 by the server's resolver; cubic at both ends; the credentials of
/// `polycorn tls generate` beside the files; metrics on 127.0.0.1:9100 of each namespace.
pub(crate) fn configs(mode: &str, spec: &str, paths: usize) -> (RelayConfig, ProxyConfig) {
    let mut relay = RelayConfig::new(parsed("10.100.0.2:7700"));
    relay.relay.mode = match mode {
        "polycorn" => RelayMode::Polycorn,
        "mptcp" => RelayMode::Mptcp,
        "single" => RelayMode::Single,
        other => panic!("no relay mode {other:?}"),
    };
    relay.relay.scheduler = spec.into();
    relay.relay.congestion = Some("cubic".into());
    relay.paths = (0..paths)
        .map(|i| PathConfig {
            name: format!("p{i}"),
            device: format!("path{i}"),
            source: Some(parsed(&format!("10.100.{i}.1"))),
            proxy: Some(parsed(&format!("10.100.{i}.2:7700"))),
            mtu: None,
            modem: None,
            at_port: None,
        })
        .collect();
    relay.intercept = InterceptConfig {
        transparent: Some(parsed("0.0.0.0:7070")),
        transparent6: Some(parsed("[::]:7070")),
        socks5: Some(parsed("10.0.1.1:1080")),
        install_nft: true,
        lan_device: Some("lan0".into()),
        ..InterceptConfig::default()
    };
    relay.dns.listen = Some(parsed("10.0.1.1:53"));
    relay.dns.upstream = Some(parsed("10.0.2.2:53"));
    relay.tls = Some(TlsFiles::new("ca.pem", "relay.pem", "relay.key"));
    relay.metrics.listen = Some(parsed("127.0.0.1:9100"));
    let mut proxy = ProxyConfig::new(TlsFiles::new("ca.pem", "proxy.pem", "proxy.key"));
    proxy.proxy.listen = vec![parsed("0.0.0.0:7700")];
    proxy.proxy.tunnel_listen = Some(parsed("0.0.0.0:7701"));
    proxy.proxy.tunnel_peers = vec![parsed("10.100.0.0/16")];
    proxy.proxy.scheduler = spec.into();
    proxy.proxy.congestion = Some("cubic".into());
    proxy.policy.allow = vec![parsed("10.0.2.0/24"), parsed("fd00:2::/64")];
    proxy.metrics.listen = Some(parsed("127.0.0.1:9100"));
    (relay, proxy)
}

/// `text` parsed as an address, a network or a proxy address (the type the field takes).
pub(crate) fn parsed<T: std::str::FromStr>(text: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    text.parse()
        .unwrap_or_else(|e| panic!("{text:?} is not an address: {e:?}"))
}

/// Writes `relay` and `proxy` as `relay.toml` and `proxy.toml` in `dir` and returns their
/// paths; each file reads back as the configuration it was written from.
pub(crate) fn write_configs(
    dir: &Path,
    relay: &RelayConfig,
    proxy: &ProxyConfig,
) -> (PathBuf, PathBuf) {
    let r = dir.join("relay.toml");
    let p = dir.join("proxy.toml");
    write_relay_config(&r, relay);
    write_proxy_config(&p, proxy);
    (r, p)
}

/// Writes `config` to `file` with `to_toml`, checking that it reads back as it was.
pub(crate) fn write_relay_config(file: &Path, config: &RelayConfig) {
    let text = config.to_toml();
    let back = RelayConfig::from_toml(&text, &file.display().to_string());
    assert_eq!(back.as_ref().ok(), Some(config), "{back:?}\n{text}");
    std::fs::write(file, text).unwrap();
}

/// Writes `config` to `file` with `to_toml`, checking that it reads back as it was.
pub(crate) fn write_proxy_config(file: &Path, config: &ProxyConfig) {
    let text = config.to_toml();
    let back = ProxyConfig::from_toml(&text, &file.display().to_string());
    assert_eq!(back.as_ref().ok(), Some(config), "{back:?}\n{text}");
    std::fs::write(file, text).unwrap();
}

/// The proxy configuration in `file`, parsed (not validated).
pub(crate) fn read_proxy_config(file: &Path) -> ProxyConfig {
    let text = std::fs::read_to_string(file).unwrap();
    ProxyConfig::from_toml(&text, &file.display().to_string()).unwrap()
}

pub(crate) fn start_stack(bed: &Bed, mode: &str, spec: &str, paths: usize) -> Stack {
    start_stack_with(
        bed,
        mode,
        spec,
        paths,
        |_, _| {},
        tempfile::tempdir().unwrap(),
    )
}

/// [`configs`] changed by `edit`, written in `dir` with a fresh credential set, and both daemons
/// started (as [`start_daemons`]; every path's subflow in polycorn mode).
pub(crate) fn start_stack_with(
    bed: &Bed,
    mode: &str,
    spec: &str,
    paths: usize,
    edit: impl FnOnce(&mut RelayConfig, &mut ProxyConfig),
    dir: tempfile::TempDir,
) -> Stack {
    generate_credentials(dir.path());
    let (mut relay, mut proxy) = configs(mode, spec, paths);
    edit(&mut relay, &mut proxy);
    let (r, p) = write_configs(dir.path(), &relay, &proxy);
    let subflows = if mode == "polycorn" { paths } else { 0 };
    start_daemons(bed, dir, &r, &p, subflows)
}

/// A fresh credential set (`polycorn tls generate`) in `dir`.
pub(crate) fn generate_credentials(dir: &Path) {
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
pub(crate) fn start_daemons(
    bed: &Bed,
    dir: tempfile::TempDir,
    r: &Path,
    p: &Path,
    subflows: usize,
) -> Stack {
    let mut proxy = Daemon::start(&bed.ns("proxy"), "proxy", p, dir.path().join("proxy.log"));
    proxy.wait_for("proxy running", 1);
    let mut relay = Daemon::start(&bed.ns("relay"), "relay", r, dir.path().join("relay.log"));
    relay.wait_for("relay running", 1);
    if subflows > 0 {
        relay.wait_for("subflow up", subflows);
    }
    Stack { dir, proxy, relay }
}

/// [`configs`] for two paths in mode `mode` (scheduler `polycorn`) in a fresh credentials
/// directory, the relay's changed by `relay` and the proxy's by `proxy` before both daemons
/// start (as [`start_daemons`]).
pub(crate) fn start_edited(
    bed: &Bed,
    mode: &str,
    relay: impl FnOnce(&mut RelayConfig),
    proxy: impl FnOnce(&mut ProxyConfig),
    subflows: usize,
) -> Stack {
    let dir = tempfile::tempdir().unwrap();
    generate_credentials(dir.path());
    let (mut r, mut p) = configs(mode, "polycorn", 2);
    relay(&mut r);
    proxy(&mut p);
    let (r, p) = write_configs(dir.path(), &r, &p);
    start_daemons(bed, dir, &r, &p, subflows)
}

/// [`start_edited`] in polycorn mode with two subflows, `relay` changing the relay's `[relay]`
/// and `proxy` the proxy's `[proxy]`.
pub(crate) fn start_with_keys(
    bed: &Bed,
    relay: impl FnOnce(&mut RelaySection),
    proxy: impl FnOnce(&mut ProxySection),
) -> Stack {
    start_edited(
        bed,
        "polycorn",
        |r| relay(&mut r.relay),
        |p| proxy(&mut p.proxy),
        2,
    )
}

/// Polls `done` every 200 ms until it holds; panics after `secs` with `what` and `log`'s tail.
pub(crate) fn wait_until(
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
pub(crate) fn in_ns<T: Send + 'static>(
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
pub(crate) fn start_server(bed: &Bed) {
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
pub(crate) async fn dns_over_tcp(l: tokio::net::TcpListener) {
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

pub(crate) const SERVER4: &str = "10.0.2.2:9000";
pub(crate) const SERVER6: &str = "[fd00:2::2]:9000";

pub(crate) async fn socks_connect(dst: SocketAddr) -> std::io::Result<TcpStream> {
    socks_connect_via("10.0.1.1:1080", dst).await
}

/// A SOCKS5 CONNECT to `dst` through the listener at `socks`.
pub(crate) async fn socks_connect_via(socks: &str, dst: SocketAddr) -> std::io::Result<TcpStream> {
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
pub(crate) enum Via {
    Transparent4,
    Transparent6,
    Socks5,
}

pub(crate) async fn one(
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

pub(crate) fn transfers(bed: &Bed, list: Vec<(Via, u64, u64)>, label: &str, stack: &Stack) {
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
pub(crate) fn scrape_metrics(ns: &str) -> String {
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

pub(crate) fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

pub(crate) const KB: u64 = 1024;
pub(crate) const MB: u64 = 1024 * 1024;
