//! SOCKS5 server handshakes over in-memory streams.

use std::net::SocketAddr;
use std::time::Duration;

use polycorn_net::socks5::{self, Reply, Socks5Error, Socks5Request, Target};
use proptest::prelude::*;
use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};

/// Run a handshake against `client_bytes` (then EOF); return its result and everything the
/// server wrote.
async fn run(client_bytes: &[u8]) -> (Result<Socks5Request, Socks5Error>, Vec<u8>) {
    let (mut client, mut server) = duplex(4096);
    client.write_all(client_bytes).await.unwrap();
    client.shutdown().await.unwrap();
    let res = tokio::time::timeout(Duration::from_secs(5), socks5::handshake(&mut server))
        .await
        .expect("handshake hung on a closed stream");
    drop(server);
    let mut out = Vec::new();
    client.read_to_end(&mut out).await.unwrap();
    (res, out)
}

fn request(atyp: u8, addr: &[u8], port: u16) -> Vec<u8> {
    let mut b = vec![5, 1, 0, 5, 1, 0, atyp];
    b.extend_from_slice(addr);
    b.extend_from_slice(&port.to_be_bytes());
    b
}

#[tokio::test]
async fn connect_ipv4() {
    let (res, out) = run(&request(1, &[192, 0, 2, 7], 443)).await;
    let want: SocketAddr = "192.0.2.7:443".parse().unwrap();
    assert_eq!(res.unwrap().target, Target::Addr(want));
    assert_eq!(out, [5, 0]);
}

#[tokio::test]
async fn connect_ipv6() {
    let ip: std::net::Ipv6Addr = "2001:db8::7".parse().unwrap();
    let (res, out) = run(&request(4, &ip.octets(), 80)).await;
    let target = res.unwrap().target;
    assert_eq!(target, Target::Addr("[2001:db8::7]:80".parse().unwrap()));
    assert_eq!(target.to_string(), "[2001:db8::7]:80");
    assert_eq!(out, [5, 0]);
}

#[tokio::test]
async fn connect_domain() {
    let name = b"www.example.com";
    let mut addr = vec![name.len() as u8];
    addr.extend_from_slice(name);
    let (res, _) = run(&request(3, &addr, 8443)).await;
    let target = res.unwrap().target;
    assert_eq!(target, Target::Name("www.example.com".into(), 8443));
    assert_eq!(target.to_string(), "www.example.com:8443");
    assert_eq!(target.port(), 8443);
}

#[tokio::test]
async fn domain_ip_literals_become_addresses() {
    for (lit, want) in [("192.0.2.9", "192.0.2.9:25"), ("::1", "[::1]:25")] {
        let mut addr = vec![lit.len() as u8];
        addr.extend_from_slice(lit.as_bytes());
        let (res, _) = run(&request(3, &addr, 25)).await;
        assert_eq!(res.unwrap().target, Target::Addr(want.parse().unwrap()));
    }
}

#[tokio::test]
async fn longest_domain_is_accepted() {
    // 255 bytes: labels of 63 bytes separated by dots.
    let label = "a".repeat(63);
    let name = format!("{label}.{label}.{label}.{}", "b".repeat(63));
    assert_eq!(name.len(), 255);
    let mut addr = vec![255u8];
    addr.extend_from_slice(name.as_bytes());
    let (res, _) = run(&request(3, &addr, 1)).await;
    assert_eq!(res.unwrap().target, Target::Name(name, 1));
}

#[tokio::test]
async fn bad_domains_get_general_failure() {
    for name in [&b""[..], b"bad name", b"\xff\xfe", b"a..b"] {
        let mut addr = vec![name.len() as u8];
        addr.extend_from_slice(name);
        let (res, out) = run(&request(3, &addr, 80)).await;
        assert!(
            matches!(res, Err(Socks5Error::BadDomain { .. })),
            "{name:?}: {res:?}"
        );
        assert_eq!(out[..2], [5, 0]);
        assert_eq!(out[2..4], [5, 1], "{name:?}");
    }
}

#[tokio::test]
async fn no_acceptable_method_gets_ff() {
    // Offers only username/password (0x02) and GSSAPI (0x01).
    let (res, out) = run(&[5, 2, 2, 1]).await;
    match res {
        Err(Socks5Error::NoAcceptableMethod { offered }) => assert_eq!(offered, [2, 1]),
        other => panic!("{other:?}"),
    }
    assert_eq!(out, [5, 0xFF]);
    let (res, out) = run(&[5, 0]).await;
    assert!(matches!(res, Err(Socks5Error::NoAcceptableMethod { .. })));
    assert_eq!(out, [5, 0xFF]);
}

#[tokio::test]
async fn no_auth_among_others_is_chosen() {
    let mut bytes = vec![5, 3, 2, 1, 0];
    bytes.extend_from_slice(&request(1, &[10, 0, 0, 1], 22)[3..]);
    let (res, out) = run(&bytes).await;
    assert!(res.is_ok(), "{res:?}");
    assert_eq!(out, [5, 0]);
}

#[tokio::test]
async fn bind_and_udp_associate_get_07() {
    for cmd in [2u8, 3] {
        let mut b = request(1, &[10, 0, 0, 1], 22);
        b[4] = cmd;
        let (res, out) = run(&b).await;
        assert!(
            matches!(res, Err(Socks5Error::CommandNotSupported(c)) if c == cmd),
            "{res:?}"
        );
        assert_eq!(out, [5, 0, 5, 7, 0, 1, 0, 0, 0, 0, 0, 0]);
    }
}

#[tokio::test]
async fn unknown_address_type_gets_08() {
    let (res, out) = run(&request(9, &[1, 2, 3, 4], 22)).await;
    assert!(matches!(res, Err(Socks5Error::AddressTypeNotSupported(9))));
    assert_eq!(out[2..4], [5, 8]);
}

#[tokio::test]
async fn wrong_versions() {
    // SOCKS4 greeting: no answer at all.
    let (res, out) = run(&[4, 1, 0, 80, 192, 0, 2, 1, 0]).await;
    assert!(matches!(
        res,
        Err(Socks5Error::BadVersion {
            stage: "greeting",
            version: 4
        })
    ));
    assert!(out.is_empty());
    // Wrong version in the request: general failure.
    let mut b = request(1, &[10, 0, 0, 1], 22);
    b[3] = 4;
    let (res, out) = run(&b).await;
    assert!(matches!(
        res,
        Err(Socks5Error::BadVersion {
            stage: "request",
            ..
        })
    ));
    assert_eq!(out[2..4], [5, 1]);
}

#[tokio::test]
async fn truncated_input_at_every_length() {
    let name = b"example.org";
    let mut addr = vec![name.len() as u8];
    addr.extend_from_slice(name);
    for full in [
        request(1, &[192, 0, 2, 1], 80),
        request(4, &[0; 16], 80),
        request(3, &addr, 80),
    ] {
        for cut in 0..full.len() {
            let (res, _) = run(&full[..cut]).await;
            match res {
                Err(Socks5Error::Truncated { .. }) => {}
                other => panic!("cut at {cut} of {full:?}: {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn reply_writes_the_rfc_layout() {
    let (mut a, mut b): (DuplexStream, DuplexStream) = duplex(64);
    socks5::reply(&mut a, Reply::Succeeded("10.1.2.3:4567".parse().unwrap()))
        .await
        .unwrap();
    socks5::reply(&mut a, Reply::HostUnreachable).await.unwrap();
    drop(a);
    let mut out = Vec::new();
    b.read_to_end(&mut out).await.unwrap();
    assert_eq!(
        out,
        [5, 0, 0, 1, 10, 1, 2, 3, 0x11, 0xD7, 5, 4, 0, 1, 0, 0, 0, 0, 0, 0]
    );
}

#[test]
fn connect_errors_map_to_replies() {
    use std::io::{Error, ErrorKind};
    let r = |k| Reply::for_connect_error(&Error::from(k));
    assert_eq!(r(ErrorKind::ConnectionRefused), Reply::ConnectionRefused);
    assert_eq!(r(ErrorKind::TimedOut), Reply::HostUnreachable);
    assert_eq!(r(ErrorKind::NetworkUnreachable), Reply::NetworkUnreachable);
    assert_eq!(r(ErrorKind::Other), Reply::GeneralFailure);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Garbage, and garbage after a valid greeting, never panics or hangs.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600),
                                greet in any::<bool>()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let mut input = if greet { vec![5, 1, 0] } else { Vec::new() };
        input.extend_from_slice(&bytes);
        let (res, out) = rt.block_on(run(&input));
        // Whatever happened, the server wrote at most a method selection and one reply.
        prop_assert!(out.len() <= 2 + 22);
        if let Ok(req) = res {
            prop_assert!(!req.target.to_string().is_empty());
        }
    }
}
