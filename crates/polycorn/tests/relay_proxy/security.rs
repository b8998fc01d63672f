//! Hardening: hostile peers, connections to the relay's or the proxy's own addresses, and
//! passengers over their limits.

use std::io::Write;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use polycorn_emu::netns::{ip_in, InNamespace};
use tokio::net::TcpStream;

use crate::bed::*;
use crate::support::*;

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
        |_, p| p.proxy.revoked_relays = vec!["train-7".into()],
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

/// The proxy's allow list of [`configs`], and one that also opens the relay's path addresses:
/// on a carrier with public addresses (IPv6, public-IP APNs) nothing else keeps the proxy from
/// connecting to them.
const ALLOW: &[&str] = &["10.0.2.0/24", "fd00:2::/64"];
const ALLOW_PATHS: &[&str] = &[
    "10.0.2.0/24",
    "fd00:2::/64",
    "10.100.0.0/16",
    "fd00:100::/32",
];

/// `list` parsed as networks.
fn nets<T: std::str::FromStr>(list: &[&str]) -> Vec<T>
where
    T::Err: std::fmt::Debug,
{
    list.iter().map(|n| parsed(n)).collect()
}

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
        |_| {},
        |p| {
            let allow: Vec<String> = p.policy.allow.iter().map(ToString::to_string).collect();
            assert_eq!(allow, ALLOW);
            p.policy.allow = nets(ALLOW_PATHS);
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
        |r| {
            assert_eq!(r.dns.upstream, Some(parsed("10.0.2.2:53")));
            r.dns.upstream = Some(parsed("10.0.2.2:5353"));
            r.limits.passenger_max_flows = 8;
            r.limits.passenger_flow_rate = 1;
            r.limits.passenger_flow_burst = 10;
        },
        |_| {},
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
