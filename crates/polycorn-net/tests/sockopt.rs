//! Socket options on real loopback sockets.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use polycorn_net::sockopt::{self, TCP_STATE_ESTABLISHED};
use socket2::{Domain, Protocol};

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Skip (return true) with a message, or fail when CI=true.
fn skip(why: &str) -> bool {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("cannot run under CI: {why}");
    }
    eprintln!("SKIPPED: {why}");
    true
}

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

#[test]
fn tcp_info_after_sending_shows_progress() {
    let (mut c, mut s) = pair();
    const BYTES: usize = 256 * 1024;
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; BYTES];
        s.read_exact(&mut buf).unwrap();
        s
    });
    c.write_all(&vec![7u8; BYTES]).unwrap();
    let _s = reader.join().unwrap();
    // ACKs of the last bytes may still be in flight; wait (bounded) for them.
    let deadline = Instant::now() + Duration::from_secs(2);
    let info = loop {
        let info = sockopt::tcp_info(c.as_fd()).unwrap();
        if info.bytes_acked >= BYTES as u64 || Instant::now() > deadline {
            break info;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(info.state, TCP_STATE_ESTABLISHED, "{info:?}");
    assert!(info.bytes_acked >= BYTES as u64, "{info:?}");
    assert!(info.bytes_sent >= BYTES as u64, "{info:?}");
    assert!(info.snd_mss > 0, "{info:?}");
    assert!(info.rtt_us > 0, "{info:?}");
    assert!(info.snd_cwnd > 0, "{info:?}");
    let sample = info.to_sample();
    assert_eq!(sample.mss_bytes, info.snd_mss);
    assert_eq!(
        sample.cwnd_bytes,
        u64::from(info.snd_cwnd) * u64::from(info.snd_mss)
    );
    assert_eq!(sample.srtt.as_micros(), u64::from(info.rtt_us));
    assert_eq!(sample.bytes_acked, info.bytes_acked);
    assert!(sample.min_rtt.is_some(), "{info:?}");
}

#[test]
fn tcp_info_fails_on_a_non_tcp_socket() {
    let u = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let e = sockopt::tcp_info(u.as_fd()).unwrap_err();
    assert!(e.to_string().contains("TCP_INFO"), "{e}");
}

#[test]
fn notsent_lowat_reads_back() {
    let (c, _s) = pair();
    sockopt::set_notsent_lowat(c.as_fd(), 128 * 1024).unwrap();
    assert_eq!(sockopt::notsent_lowat(c.as_fd()).unwrap(), 128 * 1024);
    sockopt::set_notsent_lowat(c.as_fd(), 16_384).unwrap();
    assert_eq!(sockopt::notsent_lowat(c.as_fd()).unwrap(), 16_384);
}

#[test]
fn congestion_reads_back_and_unknown_names_the_algorithm() {
    let (c, _s) = pair();
    for cc in ["reno", "cubic"] {
        sockopt::set_congestion(c.as_fd(), cc).unwrap();
        assert_eq!(sockopt::congestion(c.as_fd()).unwrap(), cc);
    }
    let e = sockopt::set_congestion(c.as_fd(), "nosuchcc").unwrap_err();
    assert!(e.to_string().contains("nosuchcc"), "{e}");
    let e = sockopt::set_congestion(c.as_fd(), "").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

#[test]
fn startup_check_of_a_congestion_control_accepts_reno_and_names_a_missing_one() {
    sockopt::check_congestion("reno").unwrap();
    let e = sockopt::check_congestion("nosuchcc").unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("nosuchcc") && text.contains("reno"),
        "names the algorithm and the available ones: {text}"
    );
}

#[test]
fn linger_zero_close_resets_the_peer() {
    let (c, mut s) = pair();
    sockopt::set_linger_zero(c.as_fd()).unwrap();
    drop(c);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 16];
    let e = s.read(&mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
}

#[test]
fn original_dst_of_a_plain_connection_is_an_error() {
    let (c, _s) = pair();
    let e = sockopt::original_dst(c.as_fd()).unwrap_err();
    assert!(e.to_string().contains("SO_ORIGINAL_DST"), "{e}");
}

#[test]
fn mptcp_socket_connects_over_loopback() {
    let enabled = std::fs::read_to_string("/proc/sys/net/mptcp/enabled").unwrap_or_default();
    if enabled.trim() != "1" {
        skip(&format!(
            "kernel MPTCP is off (net.mptcp.enabled={:?})",
            enabled.trim()
        ));
        return;
    }
    let server = sockopt::mptcp_socket(Domain::IPV4).unwrap();
    server
        .bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())
        .unwrap();
    server.listen(4).unwrap();
    let addr = server.local_addr().unwrap();
    let client = sockopt::mptcp_socket(Domain::IPV4).unwrap();
    client.connect(&addr).unwrap();
    assert_eq!(client.protocol().unwrap(), Some(Protocol::MPTCP));
    let (accepted, _) = server.accept().unwrap();
    let mut a: TcpStream = accepted.into();
    let mut c: TcpStream = client.into();
    c.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    a.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping");
    a.write_all(b"pong").unwrap();
    c.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"pong");
}

#[test]
fn pinned_socket_connects_through_its_device() {
    if !is_root() && skip("SO_BINDTODEVICE needs root") {
        return;
    }
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let sock = sockopt::pinned_tcp_socket(Ipv4Addr::LOCALHOST.into(), "lo").unwrap();
    assert!(sock.nonblocking().unwrap());
    assert_eq!(sock.device().unwrap().as_deref(), Some(&b"lo"[..]));
    let local = sock.local_addr().unwrap().as_socket().unwrap();
    assert_eq!(local.ip(), Ipv4Addr::LOCALHOST);
    assert_ne!(local.port(), 0);
    sock.set_nonblocking(false).unwrap();
    sock.connect(&l.local_addr().unwrap().into()).unwrap();
    let (_s, peer) = l.accept().unwrap();
    assert_eq!(peer, local);

    let e = sockopt::pinned_tcp_socket(Ipv4Addr::LOCALHOST.into(), "pcn-nodev0").unwrap_err();
    assert!(e.to_string().contains("pcn-nodev0"), "{e}");
    let e =
        sockopt::pinned_tcp_socket(Ipv4Addr::LOCALHOST.into(), "a-name-far-too-long").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

#[test]
fn ipv6_transparent_reads_back() {
    if !is_root() && skip("IPV6_TRANSPARENT needs CAP_NET_ADMIN") {
        return;
    }
    let s = socket2::Socket::new(Domain::IPV6, socket2::Type::STREAM, None).unwrap();
    assert!(!sockopt::ipv6_transparent(s.as_fd()).unwrap());
    sockopt::set_ipv6_transparent(s.as_fd(), true).unwrap();
    assert!(sockopt::ipv6_transparent(s.as_fd()).unwrap());
}

#[test]
fn rto_max_reads_back_and_refuses_values_the_kernel_refuses() {
    let (c, _s) = pair();
    let e = sockopt::set_rto_max(c.as_fd(), 500).unwrap_err();
    assert!(e.to_string().contains("1000..=120000"), "{e}");
    match sockopt::set_rto_max(c.as_fd(), 1000) {
        Ok(()) => assert_eq!(sockopt::rto_max(c.as_fd()).unwrap(), 1000),
        // A kernel before 6.15: the error must say so (CI's machine has the option).
        Err(e) => {
            assert!(e.to_string().contains("6.15"), "{e}");
            let _ = skip("this kernel has no TCP_RTO_MAX_MS");
        }
    }
}

/// A network namespace created for one test and deleted by name when dropped.
struct TestNs(String);

impl TestNs {
    fn new(tag: &str) -> TestNs {
        let name = format!("pct-{tag}-{}", std::process::id());
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &name])
            .output();
        run("ip", &["netns", "add", &name]);
        let ns = TestNs(name);
        run("ip", &["-n", &ns.0, "link", "set", "lo", "up"]);
        ns
    }
    fn nft(&self, script: &str) {
        run("ip", &["netns", "exec", &self.0, "nft", script]);
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

fn run(program: &str, args: &[&str]) {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn rto_max_keeps_retransmitting_every_second_through_a_blackout() {
    use nix::sched::{setns, CloneFlags};
    if !is_root() {
        skip("needs root (a network namespace and nftables)");
        return;
    }
    if sockopt::check_rto_max(1000).is_err() {
        skip("this kernel has no TCP_RTO_MAX_MS (Linux 6.15 or later)");
        return;
    }
    let ns = TestNs::new("rto");
    let path = format!("/run/netns/{}", ns.0);
    // Two connections over the namespace's loopback (RTO starts at the kernel's 200 ms
    // minimum), one capped at 1 s; then every data segment towards the server is dropped for
    // 6 s. Uncapped, the timer doubles: retransmissions at 0.2, 0.6, 1.4, 3.0 s (the next at
    // 6.2 s); capped, after 1.4 s one every second, 7 by 5.4 s.
    let (mut capped, mut plain, ports, _servers) = std::thread::spawn(move || {
        let target = std::fs::File::open(&path).unwrap();
        setns(target.as_fd(), CloneFlags::CLONE_NEWNET).unwrap();
        let (mut capped, mut cs) = pair();
        let (mut plain, mut ps) = pair();
        sockopt::set_rto_max(capped.as_fd(), 1000).unwrap();
        // Warm both up so each has an RTT sample.
        for (c, s) in [(&mut capped, &mut cs), (&mut plain, &mut ps)] {
            c.write_all(&[1u8; 1000]).unwrap();
            let mut buf = [0u8; 1000];
            s.read_exact(&mut buf).unwrap();
        }
        let ports = [&cs, &ps].map(|s| s.local_addr().unwrap().port());
        (capped, plain, ports, (cs, ps))
    })
    .join()
    .unwrap();
    ns.nft(&format!(
        "add table inet pct_rto; add chain inet pct_rto inp {{ type filter hook input \
         priority 0; }}; add rule inet pct_rto inp tcp dport {{ {}, {} }} drop",
        ports[0], ports[1]
    ));
    capped.write_all(&[2u8; 1000]).unwrap();
    plain.write_all(&[2u8; 1000]).unwrap();
    std::thread::sleep(Duration::from_secs(6));
    let (capped, plain) = (
        sockopt::tcp_info(capped.as_fd()).unwrap(),
        sockopt::tcp_info(plain.as_fd()).unwrap(),
    );
    ns.nft("delete table inet pct_rto");
    println!(
        "after 6 s of blackout: capped retransmitted {} times (backoff {}), uncapped {} (backoff {})",
        capped.total_retrans, capped.backoff, plain.total_retrans, plain.backoff
    );
    // Both are in RTO recovery of data the network lost (not held back locally).
    assert!(
        capped.unacked > 0 && plain.unacked > 0,
        "{capped:?} {plain:?}"
    );
    // A tail-loss probe may add one to each count.
    assert!(capped.total_retrans >= 6, "capped at 1 s: {capped:?}");
    assert!(plain.total_retrans <= 6, "uncapped: {plain:?}");
    assert!(
        capped.total_retrans >= plain.total_retrans + 2,
        "capped {capped:?}, uncapped {plain:?}"
    );
    // The back-off count still grows (the scheduler reads it); only the timer is capped.
    assert!(capped.backoff >= 5, "{capped:?}");
    drop(ns);
}

/// A path without `source` takes its interface's address: loopback's is 127.0.0.1; an interface
/// that does not exist is an error naming it.
#[test]
fn device_address_reads_the_interfaces_current_address() {
    assert_eq!(
        sockopt::device_address("lo").unwrap(),
        Some(Ipv4Addr::LOCALHOST.into())
    );
    // Both families when the interface has both, IPv4 first.
    let all = sockopt::device_addresses("lo").unwrap();
    assert_eq!(all.first(), Some(&IpAddr::from(Ipv4Addr::LOCALHOST)));
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        assert_eq!(
            all,
            [
                IpAddr::from(Ipv4Addr::LOCALHOST),
                IpAddr::from(std::net::Ipv6Addr::LOCALHOST)
            ]
        );
    }
    let e = sockopt::device_address("nosuchdev0").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(e.to_string().contains("nosuchdev0"), "{e}");
}
