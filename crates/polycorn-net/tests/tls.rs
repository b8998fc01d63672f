//! Mutual TLS: generated material, real handshakes on 127.0.0.1, refusals, file errors.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use polycorn_net::tls::{self, Generated, TlsError, ALPN, PROXY_SERVER_NAME};
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

fn generated(dir: &Path) -> Generated {
    tls::generate(
        dir,
        &["127.0.0.1".into(), "proxy.example.net".into()],
        false,
    )
    .unwrap()
}

/// Runs one handshake: the server reads 5 bytes and answers `world`. Returns the server's
/// result (peer certificates on success) and whether the client read the answer.
async fn handshake(
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
) -> (Result<Vec<CertificateDer<'static>>, std::io::Error>, bool) {
    let (server, client) = handshake_errors(server, client).await;
    (server, client.unwrap_or(false))
}

/// [`handshake`] with the client's error.
async fn handshake_errors(
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
) -> (
    Result<Vec<CertificateDer<'static>>, std::io::Error>,
    Result<bool, std::io::Error>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server_task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut tls = TlsAcceptor::from(server).accept(tcp).await?;
        let mut buf = [0u8; 5];
        tls.read_exact(&mut buf).await?;
        assert_eq!(&buf, b"hello");
        tls.write_all(b"world").await?;
        tls.shutdown().await?;
        let (_, conn) = tls.get_ref();
        assert_eq!(conn.alpn_protocol(), Some(ALPN));
        Ok::<_, std::io::Error>(conn.peer_certificates().unwrap_or_default().to_vec())
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    let client_ok = async {
        let mut tls = TlsConnector::from(client)
            .connect(tls::proxy_server_name(), tcp)
            .await?;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(ALPN));
        tls.write_all(b"hello").await?;
        let mut buf = [0u8; 5];
        tls.read_exact(&mut buf).await?;
        Ok::<_, std::io::Error>(&buf == b"world")
    }
    .await;
    (server_task.await.unwrap(), client_ok)
}

#[tokio::test]
async fn generated_material_handshakes_and_exchanges_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    let g = generated(&dir);
    for key in [&g.ca_key, &g.proxy_key, &g.relay_key] {
        let mode = std::fs::metadata(key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", key.display());
    }
    for name in tls::FILES {
        assert!(dir.join(name).is_file(), "{name}");
    }
    let server = tls::server_config(&g.ca_cert, &g.proxy_cert, &g.proxy_key).unwrap();
    let client = tls::client_config(&g.ca_cert, &g.relay_cert, &g.relay_key).unwrap();
    let (server_result, client_ok) = handshake(server, client).await;
    let peer = server_result.expect("server side handshake");
    assert_eq!(peer.len(), 1, "relay presents its certificate");
    assert!(client_ok, "client exchanged bytes");
    assert_eq!(tls::proxy_server_name().to_str(), PROXY_SERVER_NAME);
}

#[tokio::test]
async fn client_without_certificate_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let g = generated(tmp.path());
    let server = tls::server_config(&g.ca_cert, &g.proxy_cert, &g.proxy_key).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for c in tls::load_certs(&g.ca_cert).unwrap() {
        roots.add(c).unwrap();
    }
    let mut client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    client.alpn_protocols = vec![ALPN.to_vec()];
    let (server_result, client_ok) = handshake(server, Arc::new(client)).await;
    let err = server_result.expect_err("server must refuse a client without certificate");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
    assert!(!client_ok);
}

#[tokio::test]
async fn client_from_another_ca_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ours = generated(&tmp.path().join("ours"));
    let theirs = generated(&tmp.path().join("theirs"));
    let server = tls::server_config(&ours.ca_cert, &ours.proxy_cert, &ours.proxy_key).unwrap();
    // Trusts our proxy, but presents a relay certificate signed by another CA.
    let client = tls::client_config(&ours.ca_cert, &theirs.relay_cert, &theirs.relay_key).unwrap();
    let (server_result, client_ok) = handshake(server, client).await;
    let err = server_result.expect_err("server must refuse a foreign relay certificate");
    assert!(
        err.to_string()
            .contains("invalid peer certificate: UnknownIssuer"),
        "{err}"
    );
    assert!(!client_ok);
}

/// Rotating the CA without a flag day: with the old and the new CA in one `tls.ca` file (old
/// first), each end accepts the other's certificate from either CA, so trains move to the new
/// set one by one; then the old CA is taken out.
#[tokio::test]
async fn a_ca_file_with_the_old_and_the_new_ca_accepts_both_sets() {
    let tmp = tempfile::tempdir().unwrap();
    let old = generated(&tmp.path().join("old"));
    let new = generated(&tmp.path().join("new"));
    let both = tmp.path().join("both.pem");
    let text = [
        std::fs::read_to_string(&old.ca_cert).unwrap(),
        std::fs::read_to_string(&new.ca_cert).unwrap(),
    ]
    .concat();
    std::fs::write(&both, text).unwrap();
    for (proxy, relay) in [(&old, &old), (&old, &new), (&new, &old), (&new, &new)] {
        let server = tls::server_config(&both, &proxy.proxy_cert, &proxy.proxy_key).unwrap();
        let client = tls::client_config(&both, &relay.relay_cert, &relay.relay_key).unwrap();
        let (server_result, client_ok) = handshake(server, client).await;
        server_result.expect("the proxy accepts a relay of either CA");
        assert!(client_ok, "the relay trusts a proxy of either CA");
    }
    // Once the old CA is out of the file, the old set is refused.
    let server = tls::server_config(&new.ca_cert, &new.proxy_cert, &new.proxy_key).unwrap();
    let client = tls::client_config(&both, &old.relay_cert, &old.relay_key).unwrap();
    let (server_result, _) = handshake(server, client).await;
    assert!(server_result.is_err(), "a relay of the old CA got in");
    // `tls relay` signs with the first CA of its directory's ca.pem, as before.
    let dir = tmp.path().join("new");
    let issued = tls::issue_relay(&dir, "train-7", &dir, false).unwrap();
    let server = tls::server_config(&both, &old.proxy_cert, &old.proxy_key).unwrap();
    let client = tls::client_config(&both, &issued.cert, &issued.key).unwrap();
    let (server_result, client_ok) = handshake(server, client).await;
    server_result.expect("a train of the new CA reaches a proxy of the old one");
    assert!(client_ok);
}

#[tokio::test]
async fn proxy_certificate_cannot_pose_as_a_relay() {
    let tmp = tempfile::tempdir().unwrap();
    let g = generated(tmp.path());
    let server = tls::server_config(&g.ca_cert, &g.proxy_cert, &g.proxy_key).unwrap();
    let client = tls::client_config(&g.ca_cert, &g.proxy_cert, &g.proxy_key).unwrap();
    let (server_result, client_ok) = handshake(server, client).await;
    assert!(
        server_result.is_err(),
        "serverAuth-only certificate used as client"
    );
    assert!(!client_ok);
}

#[test]
fn overwrite_refused_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    let first = generated(tmp.path());
    let ca_before = std::fs::read(&first.ca_cert).unwrap();
    let err = tls::generate(tmp.path(), &[], false).unwrap_err();
    assert!(matches!(err, TlsError::Exists { .. }), "{err:?}");
    assert!(err.to_string().contains("ca.pem"), "{err}");
    assert_eq!(
        std::fs::read(&first.ca_cert).unwrap(),
        ca_before,
        "nothing written"
    );

    // One leftover file is enough to refuse.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("relay.key"), b"keep me").unwrap();
    let err = tls::generate(other.path(), &[], false).unwrap_err();
    assert!(err.to_string().contains("relay.key"), "{err}");
    assert!(!other.path().join("ca.pem").exists(), "nothing written");

    // With force the whole set is replaced and keys are made private again.
    std::fs::set_permissions(&first.relay_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let again = tls::generate(tmp.path(), &[], true).unwrap();
    assert_ne!(std::fs::read(&again.ca_cert).unwrap(), ca_before);
    let mode = std::fs::metadata(&again.relay_key)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    tls::server_config(&again.ca_cert, &again.proxy_cert, &again.proxy_key).unwrap();
}

#[test]
fn invalid_san_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let err = tls::generate(tmp.path(), &["not a name!".into()], false).unwrap_err();
    assert!(err.to_string().contains("not a name!"), "{err}");
    assert!(!tmp.path().join("ca.pem").exists());
    tls::generate(tmp.path(), &["::1".into(), "proxy-1.example".into()], false).unwrap();
}

#[test]
fn file_errors_name_the_file_and_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let g = generated(tmp.path());
    let garbage = tmp.path().join("garbage.pem");
    std::fs::write(&garbage, b"this is not PEM\n").unwrap();
    let missing = tmp.path().join("missing.pem");

    let cases: Vec<(Result<_, TlsError>, &Path, &str)> = vec![
        (
            tls::server_config(&missing, &g.proxy_cert, &g.proxy_key).map(|_| ()),
            &missing,
            "not found",
        ),
        (
            tls::server_config(&g.ca_cert, &garbage, &g.proxy_key).map(|_| ()),
            &garbage,
            "not a PEM file",
        ),
        (
            tls::client_config(&garbage, &g.relay_cert, &g.relay_key).map(|_| ()),
            &garbage,
            "not a PEM file",
        ),
        (
            tls::client_config(&g.ca_cert, &g.relay_cert, &g.relay_cert).map(|_| ()),
            &g.relay_cert,
            "no private key",
        ),
        (
            tls::client_config(&g.ca_cert, &g.relay_cert, &g.proxy_key).map(|_| ()),
            &g.proxy_key,
            "does not match",
        ),
        (
            tls::server_config(&g.ca_cert, &g.proxy_cert, &g.relay_key).map(|_| ()),
            &g.relay_key,
            "does not match",
        ),
    ];
    for (result, file, what) in cases {
        let msg = result.unwrap_err().to_string();
        assert!(msg.contains(&file.display().to_string()), "{msg}");
        assert!(msg.contains(what), "{msg} should say {what}");
    }
}

/// What a relay's subflow connect reports when the credentials do not match the proxy's: an
/// error that names the certificate problem and counts as a setup error (the relay warns
/// about those at once instead of retrying quietly), never a timeout.
#[tokio::test]
async fn mismatched_credentials_fail_the_relay_connect_as_setup_errors() {
    use polycorn_net::subflow::{self, ConnectTimeouts, SubflowSockopts};
    use polycorn_proto::{Role, Session, SessionConfig};
    let tmp = tempfile::tempdir().unwrap();
    let ours = generated(&tmp.path().join("ours"));
    let theirs = generated(&tmp.path().join("theirs"));
    let cases = [
        (
            "the relay trusts another CA",
            &theirs.ca_cert,
            &ours.relay_cert,
            &ours.relay_key,
        ),
        (
            "the relay's certificate is from another CA",
            &ours.ca_cert,
            &theirs.relay_cert,
            &theirs.relay_key,
        ),
    ];
    for (what, ca, cert, key) in cases {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = TlsAcceptor::from(
            tls::server_config(&ours.ca_cert, &ours.proxy_cert, &ours.proxy_key).unwrap(),
        );
        let proxy = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            subflow::proxy_accept(&acceptor, tcp, &SubflowSockopts::default())
                .await
                .map(|_| ())
        });
        let session = Session::new(SessionConfig::new(Role::Relay, 1, "minrtt")).unwrap();
        let hello = session.hello(0).to_vec();
        let connector = TlsConnector::from(tls::client_config(ca, cert, key).unwrap());
        let e = subflow::relay_connect(
            &connector,
            addr,
            None,
            None,
            &SubflowSockopts::default(),
            &hello,
            (session.session_id(), 0, session.epoch()),
            ConnectTimeouts::DEFAULT,
        )
        .await
        .expect_err(what);
        assert!(e.is_setup(), "{what}: {e} ({e:?})");
        assert!(
            e.to_string().to_lowercase().contains("certificate")
                || e.to_string().to_lowercase().contains("alert"),
            "{what}: {e}"
        );
        assert!(proxy.await.unwrap().is_err(), "{what}: the proxy accepted");
    }
}

/// One certificate per train: signed by the set's CA, accepted by the set's proxy, and the
/// proxy reads the train's name from it.
#[tokio::test]
async fn a_relay_certificate_per_train_handshakes_and_carries_its_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    let g = generated(&dir);
    let out = tmp.path().join("train-042");
    let issued = tls::issue_relay(&dir, "train-042", &out, false).unwrap();
    assert_eq!(issued.cert, out.join("train-042.pem"));
    let mode = std::fs::metadata(&issued.key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let server = tls::server_config(&g.ca_cert, &g.proxy_cert, &g.proxy_key).unwrap();
    let client = tls::client_config(&g.ca_cert, &issued.cert, &issued.key).unwrap();
    let (server_result, client_ok) = handshake(server, client).await;
    let peer = server_result.expect("the proxy accepts the train's certificate");
    assert!(client_ok);
    assert_eq!(tls::relay_name(&peer[0]).as_deref(), Some("train-042"));
    assert_eq!(tls::relay_name_of_file(&issued.cert).unwrap(), "train-042");
    assert_eq!(
        tls::relay_name_of_file(&g.relay_cert).unwrap(),
        tls::RELAY_NAME
    );
    // Issued again: refused unless forced, and nothing is overwritten.
    let before = std::fs::read(&issued.key).unwrap();
    let e = tls::issue_relay(&dir, "train-042", &out, false).unwrap_err();
    assert!(matches!(e, TlsError::Exists { .. }), "{e}");
    assert_eq!(std::fs::read(&issued.key).unwrap(), before);
    tls::issue_relay(&dir, "train-042", &out, true).unwrap();
    assert_ne!(std::fs::read(&issued.key).unwrap(), before);
}

/// A proxy certificate renewed from the CA of the set: the trains' files, unchanged, trust
/// it; its names and end are the ones asked for; nothing is overwritten unless forced.
#[tokio::test]
async fn a_renewed_proxy_certificate_is_trusted_by_the_relays_as_they_are() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    let g = generated(&dir);
    let e = tls::issue_proxy(&dir, &[], &dir, false, None).unwrap_err();
    assert!(
        matches!(&e, TlsError::Exists { file, .. } if file == &g.proxy_cert),
        "{e}"
    );
    assert!(e.to_string().contains("--force"), "{e}");
    let out = tmp.path().join("renewed");
    let issued = tls::issue_proxy(&dir, &["10.9.8.7".into()], &out, false, Some(40)).unwrap();
    assert_eq!(issued.cert, out.join("proxy.pem"));
    let mode = std::fs::metadata(&issued.key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let end = tls::validity_of_file("cert", &issued.cert)
        .unwrap()
        .not_after;
    let left = end - tls::unix_now();
    assert!((39 * 86_400..=40 * 86_400).contains(&left), "{left}");
    // The relay's configuration of the original set accepts it.
    let server = tls::server_config(&g.ca_cert, &issued.cert, &issued.key).unwrap();
    let client = tls::client_config(&g.ca_cert, &g.relay_cert, &g.relay_key).unwrap();
    let (server_result, client_ok) = handshake(server, client).await;
    server_result.expect("the renewed proxy accepts the relay");
    assert!(client_ok, "the relay trusts the renewed proxy certificate");
    let der = tls::load_certs(&issued.cert).unwrap().swap_remove(0);
    let (_, parsed) = x509_parser::parse_x509_certificate(&der).unwrap();
    let names = format!(
        "{:?}",
        parsed.subject_alternative_name().unwrap().unwrap().value
    );
    assert!(
        names.contains(PROXY_SERVER_NAME) && names.contains("[10, 9, 8, 7]"),
        "{names}"
    );
    // A name that is neither an address nor a DNS name.
    let e = tls::issue_proxy(&dir, &["not a name".into()], &out, true, None).unwrap_err();
    assert!(matches!(e, TlsError::InvalidSan { .. }), "{e}");
    // Forced: replaced in place.
    let before = std::fs::read(&issued.key).unwrap();
    tls::issue_proxy(&dir, &[], &out, true, None).unwrap();
    assert_ne!(std::fs::read(&issued.key).unwrap(), before);
}

/// A revoked name is refused in the handshake with the alert `certificate_revoked`, which the
/// relay can tell apart; the list changes while the configuration is in use.
#[tokio::test]
async fn a_revoked_relay_is_refused_in_the_handshake_and_told_why() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    let g = generated(&dir);
    let train = tls::issue_relay(&dir, "train-7", &dir, false).unwrap();
    let revoked = Arc::new(tls::Revoked::new(vec!["train-7".into()]));
    let server =
        tls::server_config_revoking(&g.ca_cert, &g.proxy_cert, &g.proxy_key, revoked.clone())
            .unwrap();
    let client = tls::client_config(&g.ca_cert, &train.cert, &train.key).unwrap();
    let (server_result, client_result) = handshake_errors(server.clone(), client.clone()).await;
    let e = server_result.expect_err("a revoked relay is refused");
    assert!(tls::is_revoked_refusal(&e), "{e}");
    let e = client_result.expect_err("the relay hears of it");
    assert!(tls::is_revoked_alert(&e), "{e}");
    // Another train of the same set is let in.
    let other = tls::client_config(&g.ca_cert, &g.relay_cert, &g.relay_key).unwrap();
    let (server_result, client_result) = handshake_errors(server.clone(), other).await;
    server_result.expect("a relay not on the list is accepted");
    assert!(client_result.unwrap());
    // Taken off the list while the configuration is in use: let in.
    revoked.replace(Vec::new());
    let (server_result, client_result) = handshake_errors(server.clone(), client.clone()).await;
    server_result.expect("let in again");
    assert!(client_result.unwrap());
    // Revoked again: the relay's next connection (which would resume the session it just had,
    // skipping the certificate check, if the proxy allowed resumption) is refused.
    revoked.replace(vec!["train-7".into()]);
    let (server_result, client_result) = handshake_errors(server, client).await;
    let e = server_result.expect_err("no way back in by session resumption");
    assert!(tls::is_revoked_refusal(&e), "{e}");
    assert!(tls::is_revoked_alert(&client_result.unwrap_err()));
    // A refusal for another reason (a certificate of another CA) is not a revocation.
    let stranger = tmp.path().join("stranger");
    let s = generated(&stranger);
    let server = tls::server_config(&g.ca_cert, &g.proxy_cert, &g.proxy_key).unwrap();
    let foreign = tls::client_config(&g.ca_cert, &s.relay_cert, &s.relay_key).unwrap();
    let (server_result, client_result) = handshake_errors(server, foreign).await;
    let e = server_result.unwrap_err();
    assert!(!tls::is_revoked_refusal(&e), "{e}");
    let e = client_result.unwrap_err();
    assert!(!tls::is_revoked_alert(&e), "{e}");
}

#[test]
fn relay_names_and_ca_files_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    generated(&dir);
    for (name, why) in [
        ("", "empty"),
        ("Train-1", "only a-z"),
        ("train 1", "only a-z"),
        ("train_1", "only a-z"),
        ("-train", "must not start or end"),
        (&"x".repeat(64), "longer than 63"),
    ] {
        let e = tls::issue_relay(&dir, name, &dir, false).unwrap_err();
        let text = e.to_string();
        assert!(text.contains(why), "{name:?}: {text}");
        assert!(text.contains(&format!("`{name}`")), "{text}");
    }
    tls::check_relay_name(&"x".repeat(63)).unwrap();
    // The CA key of another set: refused, naming both files.
    let other = tmp.path().join("other");
    generated(&other);
    std::fs::copy(other.join("ca.key"), dir.join("ca.key")).unwrap();
    let e = tls::issue_relay(&dir, "train-1", &dir, false).unwrap_err();
    assert!(matches!(e, TlsError::CaKeyMismatch { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("ca.key") && text.contains("ca.pem"), "{text}");
    assert!(!dir.join("train-1.pem").exists());
    // No CA key at all (a proxy's directory): the file is named.
    std::fs::remove_file(dir.join("ca.key")).unwrap();
    let e = tls::issue_relay(&dir, "train-1", &dir, false).unwrap_err();
    assert!(e.to_string().contains("ca.key: file not found"), "{e}");
}

/// How long certificate files stay valid: a generated set ten years and more, without a
/// warning; a certificate that ended, or ends within 30 days, is told with its date; the file's
/// earliest end counts when it holds a chain.
#[test]
fn certificate_validity_is_read_and_told_with_its_date() {
    let dir = tempfile::tempdir().unwrap();
    let g = generated(dir.path());
    let now = tls::unix_now();
    let v = tls::validity_of_file("tls.cert", &g.relay_cert).unwrap();
    assert!(v.left(now) > 9 * 365 * 86_400, "{v:?}");
    assert!(!v.needs_warning(now));
    let text = v.describe(now);
    assert!(
        text.starts_with("tls.cert (")
            && text.contains("valid until ")
            && text.contains("-01-01 ("),
        "{text}"
    );

    // A certificate that ended on 2020-01-01, alone and in a chain before the generated one.
    let mut p = rcgen::CertificateParams::new(vec!["old.example".into()]).unwrap();
    p.not_before = rcgen::date_time_ymd(2019, 1, 1);
    p.not_after = rcgen::date_time_ymd(2020, 1, 1);
    let key = rcgen::KeyPair::generate().unwrap();
    let old = p.self_signed(&key).unwrap().pem();
    let file = dir.path().join("old.pem");
    std::fs::write(&file, &old).unwrap();
    let v = tls::validity_of_file("tls.ca", &file).unwrap();
    assert_eq!(v.not_after, 1_577_836_800);
    assert!(v.needs_warning(now));
    let text = v.describe(now);
    assert!(
        text.contains("validity ENDED on 2020-01-01") && text.contains("renew it"),
        "{text}"
    );
    let chain = dir.path().join("chain.pem");
    std::fs::write(
        &chain,
        std::fs::read_to_string(&g.relay_cert).unwrap() + &old,
    )
    .unwrap();
    assert_eq!(
        tls::validity_of_file("tls.cert", &chain).unwrap().not_after,
        1_577_836_800
    );

    // Nine days before its end: a warning with what is left.
    let soon = tls::Validity {
        key: "tls.cert",
        file: "relay.pem".into(),
        not_after: 1_577_836_800,
    };
    let text = soon.describe(1_577_836_800 - 9 * 86_400 - 3_600);
    assert!(soon.needs_warning(1_577_836_800 - 9 * 86_400));
    assert!(!soon.needs_warning(1_577_836_800 - 31 * 86_400));
    assert_eq!(
        text,
        "tls.cert (relay.pem): valid until 2020-01-01, only 9 days left: renew it"
    );
}
