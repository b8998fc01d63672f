//! Transparent interception in real network namespaces (needs root, nft and ip).
//!
//! Each test builds its own pair of namespaces, `pcn-t<pid>-<tag>-c` (a passenger) and
//! `pcn-t<pid>-<tag>-r` (the relay), joined by a veth; the client's default routes point at the
//! relay. The destinations (198.51.100.7, 2001:db8::7) exist nowhere: only interception can
//! answer. The namespaces (and with them every link, table and rule inside) are deleted by
//! name when the test ends, also on failure.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::process::Command;
use std::thread;
use std::time::Duration;

use nix::sched::{setns, CloneFlags};
use polycorn_net::intercept::{transparent_listener, NftTproxy, TproxyOptions};
use polycorn_net::sockopt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::sh;

/// Root, nft and ip.
fn can_run() -> bool {
    common::can_run(&[("nft", "--version"), ("ip", "-V")])
}

const PORT: u16 = 7001;
const CLIENT_V4: &str = "10.77.0.1";
const RELAY_V4: &str = "10.77.0.2";
const CLIENT_V6: &str = "fd77::1";
const RELAY_V6: &str = "fd77::2";
const DST_V4: &str = "198.51.100.7:80";
const DST_V6: &str = "[2001:db8::7]:80";
const PAYLOAD_BYTES: usize = 100_000;

/// A named network namespace, deleted by name on drop.
struct Ns(String);

impl Ns {
    fn create(name: String) -> Ns {
        sh("ip", &["netns", "add", &name]);
        Ns(name)
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// While alive, the calling thread is inside a namespace.
struct InNs(File);

impl InNs {
    fn enter(ns: &str) -> InNs {
        let original = File::open("/proc/thread-self/ns/net").unwrap();
        let target = File::open(format!("/run/netns/{ns}")).unwrap();
        setns(target.as_fd(), CloneFlags::CLONE_NEWNET).unwrap();
        InNs(original)
    }
}

impl Drop for InNs {
    fn drop(&mut self) {
        setns(self.0.as_fd(), CloneFlags::CLONE_NEWNET).expect("return to the original netns");
    }
}

/// A passenger namespace and a relay namespace joined by a veth.
struct TestNet {
    tag: String,
    client: Ns,
    relay: Ns,
    relay_dev: String,
}

impl TestNet {
    fn new(tag: &str) -> TestNet {
        let pid = std::process::id();
        // Drop order deletes both namespaces even if setup fails half-way.
        let client = Ns::create(format!("pcn-t{pid}-{tag}-c"));
        let relay = Ns::create(format!("pcn-t{pid}-{tag}-r"));
        let (cdev, rdev) = (format!("pc{pid}{tag}c"), format!("pc{pid}{tag}r"));
        let (c, r) = (client.0.as_str(), relay.0.as_str());
        sh(
            "ip",
            &[
                "link", "add", &cdev, "netns", c, "type", "veth", "peer", "name", &rdev, "netns", r,
            ],
        );
        for (ns, dev, v4, v6) in [
            (c, &cdev, CLIENT_V4, CLIENT_V6),
            (r, &rdev, RELAY_V4, RELAY_V6),
        ] {
            sh("ip", &["-n", ns, "link", "set", "lo", "up"]);
            sh(
                "ip",
                &["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", dev],
            );
            sh(
                "ip",
                &[
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{v6}/64"),
                    "dev",
                    dev,
                    "nodad",
                ],
            );
            sh("ip", &["-n", ns, "link", "set", dev, "up"]);
        }
        sh("ip", &["-n", c, "route", "add", "default", "via", RELAY_V4]);
        sh(
            "ip",
            &["-n", c, "-6", "route", "add", "default", "via", RELAY_V6],
        );
        TestNet {
            tag: tag.to_string(),
            client,
            relay,
            relay_dev: rdev,
        }
    }

    fn table(&self) -> String {
        format!("pcn_t{}_{}", std::process::id(), self.tag)
    }

    fn in_relay<T>(&self, f: impl FnOnce() -> T) -> T {
        let _in = InNs::enter(&self.relay.0);
        f()
    }

    /// Run `f` on a thread inside the client namespace.
    fn in_client<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let ns = self.client.0.clone();
        thread::spawn(move || {
            let _in = InNs::enter(&ns);
            f()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    fn relay_sh(&self, program: &str, args: &[&str]) -> String {
        let mut full = vec!["netns", "exec", &self.relay.0, program];
        full.extend_from_slice(args);
        sh("ip", &full)
    }

    /// Assert the relay namespace holds no trace of interception with `opts`.
    fn assert_clean(&self, opts: &TproxyOptions) {
        let tables = self.relay_sh("nft", &["list", "tables"]);
        assert!(!tables.contains(&opts.table), "{tables}");
        let mark = format!("fwmark {:#x}", opts.fwmark);
        for fam in ["-4", "-6"] {
            let rules = self.relay_sh("ip", &[fam, "rule"]);
            assert!(!rules.contains(&mark), "{fam}: {rules}");
            let table = opts.route_table.to_string();
            // A table that never had a route "does not exist": clean too.
            let out = Command::new("ip")
                .args(["-n", &self.relay.0, fam, "route", "show", "table", &table])
                .output()
                .unwrap();
            let (stdout, stderr) = (
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
            assert!(
                stdout.trim().is_empty()
                    && (out.status.success() || stderr.contains("does not exist")),
                "{fam}: {stdout} {stderr}"
            );
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn payload(seed: u8) -> Vec<u8> {
    (0..PAYLOAD_BYTES)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Send a datagram over a connected UDP socket and report what the next receive says.
fn udp_probe(dst: SocketAddr, wait: Duration) -> std::io::Result<usize> {
    let bind: SocketAddr = if dst.is_ipv4() {
        "0.0.0.0:0".parse().unwrap()
    } else {
        "[::]:0".parse().unwrap()
    };
    let u = UdpSocket::bind(bind).unwrap();
    u.connect(dst).unwrap();
    u.set_read_timeout(Some(wait)).unwrap();
    u.send(b"quic?").unwrap();
    let mut buf = [0u8; 64];
    u.recv(&mut buf)
}

#[test]
fn tproxy_intercepts_v4_and_v6_blocks_udp_and_uninstalls() {
    if !can_run() {
        return;
    }
    let net = TestNet::new("tp");
    let rt = runtime();
    let _rt = rt.enter();
    let mut opts = TproxyOptions::new(net.table(), net.relay_dev.clone());
    opts.v4_port = Some(PORT);
    opts.v6_port = Some(PORT);
    opts.udp_block = true;
    // Exclusions that do not cover the test's destinations (they must still parse and load).
    opts.exclude = vec![
        "203.0.113.0/24".parse().unwrap(),
        "2001:db8:ffff::/48".parse().unwrap(),
    ];
    // Bound to the LAN device, as the relay binds them: TPROXY still finds them.
    let lan = net.relay_dev.clone();
    let (mut tproxy, l4, l6, local_udp, local_tcp) = net.in_relay(|| {
        (
            NftTproxy::install(opts.clone()).unwrap(),
            transparent_listener(SocketAddr::from(([0, 0, 0, 0], PORT)), Some(&lan)).unwrap(),
            transparent_listener(SocketAddr::from(([0u16; 8], PORT)), Some(&lan)).unwrap(),
            UdpSocket::bind((RELAY_V4, 4433)).unwrap(),
            std::net::TcpListener::bind((RELAY_V4, 7005)).unwrap(),
        )
    });
    // TCP to the relay's own address reaches the relay's own service, not the interceptor.
    let s = net.in_client(|| {
        TcpStream::connect_timeout(
            &format!("{RELAY_V4}:7005").parse().unwrap(),
            Duration::from_secs(5),
        )
    });
    s.unwrap();
    local_tcp.set_nonblocking(true).unwrap();
    let accepted = (0..200).any(|_| {
        thread::sleep(Duration::from_millis(10));
        local_tcp.accept().is_ok()
    });
    assert!(accepted, "relay-local connection was intercepted");

    // Passenger side: connect to servers that do not exist, send, read the answer.
    let dsts: [SocketAddr; 2] = [DST_V4.parse().unwrap(), DST_V6.parse().unwrap()];
    let ns = net.client.0.clone();
    let client = thread::spawn(move || {
        let _in = InNs::enter(&ns);
        for dst in dsts {
            let mut s = TcpStream::connect_timeout(&dst, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("connect {dst}: {e}"));
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(&payload(1)).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            let mut back = Vec::new();
            s.read_to_end(&mut back).unwrap();
            assert!(back == payload(2), "{dst}: {} bytes back", back.len());
        }
    });
    rt.block_on(async {
        for (l, dst, client_ip) in [(l4, dsts[0], CLIENT_V4), (l6, dsts[1], CLIENT_V6)] {
            let (mut s, peer) = tokio::time::timeout(Duration::from_secs(10), l.accept())
                .await
                .unwrap_or_else(|_| panic!("no intercepted connection for {dst}"))
                .unwrap();
            assert_eq!(s.local_addr().unwrap(), dst, "original destination");
            assert_eq!(peer.ip(), client_ip.parse::<IpAddr>().unwrap());
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            assert!(got == payload(1), "{dst}: {} bytes", got.len());
            s.write_all(&payload(2)).await.unwrap();
            s.shutdown().await.unwrap();
        }
    });
    client
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p));

    // UDP: QUIC to the internet is refused; DNS and the relay's own services are not.
    net.in_client(|| {
        for dst in ["198.51.100.7:443", "[2001:db8::7]:443"] {
            let e = udp_probe(dst.parse().unwrap(), Duration::from_secs(3)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{dst}: {e}");
        }
        let e = udp_probe(
            "198.51.100.7:53".parse().unwrap(),
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "port 53 must not be rejected: {e}"
        );
        let _ = udp_probe(
            format!("{RELAY_V4}:4433").parse().unwrap(),
            Duration::from_millis(10),
        );
    });
    local_udp
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut buf = [0u8; 16];
    let n = local_udp
        .recv(&mut buf)
        .expect("UDP to the relay itself is delivered");
    assert_eq!(&buf[..n], b"quic?");

    tproxy.uninstall().unwrap();
    tproxy.uninstall().unwrap(); // idempotent
    net.assert_clean(&opts);
    net.in_client(|| {
        let e = udp_probe(
            "198.51.100.7:443".parse().unwrap(),
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert_ne!(e.kind(), ErrorKind::ConnectionRefused, "rule still active");
    });
}

#[test]
fn install_replaces_leftovers_and_drop_cleans_from_another_namespace() {
    if !can_run() {
        return;
    }
    let net = TestNet::new("st");
    let mut opts = TproxyOptions::new(net.table(), net.relay_dev.clone());
    opts.v4_port = Some(PORT);
    opts.v6_port = Some(PORT);
    // A relay that crashed: its interception is never removed.
    std::mem::forget(net.in_relay(|| NftTproxy::install(opts.clone()).unwrap()));
    let again = net.in_relay(|| NftTproxy::install(opts.clone()).unwrap());
    assert_eq!(again.options(), &opts);
    let tables = net.relay_sh("nft", &["list", "tables"]);
    assert_eq!(tables.matches(&opts.table).count(), 1, "{tables}");
    for fam in ["-4", "-6"] {
        let rules = net.relay_sh("ip", &[fam, "rule"]);
        assert_eq!(rules.matches("fwmark 0x70c").count(), 1, "{fam}: {rules}");
        let routes = net.relay_sh("ip", &[fam, "route", "show", "table", "7070"]);
        assert_eq!(routes.lines().count(), 1, "{fam}: {routes}");
    }
    // Dropped on this thread, which is in the original namespace: teardown still happens in
    // the relay namespace and nowhere else.
    drop(again);
    net.assert_clean(&opts);
    let root_tables = sh("nft", &["list", "tables"]);
    assert!(!root_tables.contains(&opts.table), "{root_tables}");
}

#[test]
fn install_errors_carry_the_tools_message_and_roll_back() {
    if !can_run() {
        return;
    }
    let net = TestNet::new("er");
    // A table name nft refuses (a keyword): the error carries nft's own message.
    let mut opts = TproxyOptions::new("counter", net.relay_dev.clone());
    opts.v4_port = Some(PORT);
    let err = net
        .in_relay(|| NftTproxy::install(opts.clone()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nft -f -") && err.contains("syntax error"),
        "{err}"
    );
    net.assert_clean(&opts);

    // A step after the ruleset fails (table 7070 already has a default route): what had been
    // installed is removed again.
    opts.table = net.table();
    net.relay_sh(
        "ip",
        &[
            "-4",
            "route",
            "add",
            "blackhole",
            "0.0.0.0/0",
            "table",
            "7070",
        ],
    );
    let err = net
        .in_relay(|| NftTproxy::install(opts.clone()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("ip -4 route add local 0.0.0.0/0"), "{err}");
    let tables = net.relay_sh("nft", &["list", "tables"]);
    assert!(!tables.contains(&opts.table), "{tables}");
    let rules = net.relay_sh("ip", &["-4", "rule"]);
    assert!(!rules.contains("fwmark 0x70c"), "{rules}");
}

#[test]
fn redirect_and_original_dst() {
    if !can_run() {
        return;
    }
    let net = TestNet::new("rd");
    let table = net.table();
    let dev = &net.relay_dev;
    let ruleset = format!(
        "table inet {table} {{\n\
         \tchain pre {{\n\
         \t\ttype nat hook prerouting priority dstnat; policy accept;\n\
         \t\tiifname \"{dev}\" tcp dport 81 redirect to :7003\n\
         \t}}\n}}\n"
    );
    let path = std::env::temp_dir().join(format!("{table}.nft"));
    std::fs::write(&path, ruleset).unwrap();
    net.relay_sh("nft", &["-f", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    // One dual-stack listener: IPv4 connections arrive as IPv4-mapped addresses.
    let listener = net.in_relay(|| std::net::TcpListener::bind("[::]:7003").unwrap());
    let dsts: [SocketAddr; 2] = [
        "198.51.100.7:81".parse().unwrap(),
        "[2001:db8::7]:81".parse().unwrap(),
    ];
    let ns = net.client.0.clone();
    let client = thread::spawn(move || {
        let _in = InNs::enter(&ns);
        dsts.map(|d| TcpStream::connect_timeout(&d, Duration::from_secs(5)).unwrap())
    });
    for dst in dsts {
        let (s, _) = listener.accept().unwrap();
        assert_eq!(sockopt::original_dst(s.as_fd()).unwrap(), dst);
    }
    drop(client.join().unwrap());
    net.relay_sh("nft", &["delete", "table", "inet", &table]);
}
