//! Socket options on real loopback sockets.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
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
