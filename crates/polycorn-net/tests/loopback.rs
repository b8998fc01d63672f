//! Relay and proxy in one process over loopback (no namespaces): SOCKS5 passengers, two paths
//! (two proxy listeners), byte-exact transfers both ways, refused destinations.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use polycorn_net::live::Live;
use polycorn_net::policy::DestinationPolicy;
use polycorn_net::proxy::{self, ProxyOptions};
use polycorn_net::relay::{self, Mode, RelayOptions, RelayPath, Tuning};
use polycorn_net::tls;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

async fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server that reads a 16-byte request (8 bytes: response length, 8 bytes: request length),
/// reads the request body, checks it, and answers with the response pattern.
async fn server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let mut hdr = [0u8; 16];
                s.read_exact(&mut hdr).await.unwrap();
                let down = u64::from_be_bytes(hdr[..8].try_into().unwrap()) as usize;
                let up = u64::from_be_bytes(hdr[8..].try_into().unwrap()) as usize;
                let mut body = vec![0u8; up];
                s.read_exact(&mut body).await.unwrap();
                assert!(
                    body == pattern(up as u64, up),
                    "server got corrupted upload"
                );
                s.write_all(&pattern(down as u64 + 1, down)).await.unwrap();
                s.shutdown().await.unwrap();
            });
        }
    });
    addr
}

async fn socks_connect(socks: SocketAddr, dst: SocketAddr) -> Result<TcpStream, u8> {
    let mut s = TcpStream::connect(socks).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut r = [0u8; 2];
    s.read_exact(&mut r).await.unwrap();
    assert_eq!(r, [5, 0]);
    let SocketAddr::V4(d) = dst else { panic!() };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&d.ip().octets());
    req.extend_from_slice(&d.port().to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).await.unwrap();
    if rep[1] != 0 {
        return Err(rep[1]);
    }
    Ok(s)
}

async fn transfer(socks: SocketAddr, dst: SocketAddr, up: usize, down: usize) {
    let mut s = socks_connect(socks, dst).await.expect("SOCKS5 connect");
    let mut hdr = Vec::new();
    hdr.extend_from_slice(&(down as u64).to_be_bytes());
    hdr.extend_from_slice(&(up as u64).to_be_bytes());
    s.write_all(&hdr).await.unwrap();
    let (mut r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        w.write_all(&pattern(up as u64, up)).await.unwrap();
        w.shutdown().await.unwrap();
    });
    let mut got = Vec::new();
    r.read_to_end(&mut got).await.unwrap();
    writer.await.unwrap();
    assert_eq!(got.len(), down);
    assert!(got == pattern(down as u64 + 1, down), "download corrupted");
}

async fn setup(spec: &str) -> (SocketAddr, tempfile::TempDir) {
    let pair = start_pair(spec, Tuning::default()).await;
    std::mem::forget(pair.proxy_tasks);
    std::mem::forget(pair.relay_tasks);
    std::mem::forget(pair.relay_listeners);
    (pair.socks, pair.dir)
}

/// A relay and a proxy joined over loopback.
struct Pair {
    socks: SocketAddr,
    /// The proxy's subflow listeners.
    listen: Vec<SocketAddr>,
    /// The relay's paths, one to each of the proxy's listeners.
    relay_paths: Vec<RelayPath>,
    dir: tempfile::TempDir,
    proxy_tasks: tokio::task::JoinSet<()>,
    sessions: polycorn_net::proxy::Sessions,
    relay_tasks: tokio::task::JoinSet<()>,
    relay_listeners: tokio::task::JoinSet<()>,
    relay: relay::Carrier,
    /// The relay's TLS credentials, replaceable as a reload does.
    relay_tls: Live<tls::ClientConfig>,
}

async fn start_pair(spec: &str, tuning: Tuning) -> Pair {
    start_pair_with(spec, tuning, None, proxy::no_recording(), None).await
}

/// [`start_pair`] with the proxy's metrics counted in `metrics`, the relays' context recorded
/// as `record` says, and the relay's train context from `context`.
async fn start_pair_with(
    spec: &str,
    tuning: Tuning,
    metrics: Option<Arc<polycorn_net::metrics::Metrics>>,
    record: proxy::LiveRecording,
    context: Option<tokio::sync::mpsc::Receiver<polycorn_proto::ContextInfo>>,
) -> Pair {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    tls::generate(dir.path(), &[], false).unwrap();
    let p = |f: &str| dir.path().join(f);
    let listen: Vec<SocketAddr> = vec![
        SocketAddr::from(([127, 0, 0, 1], free_port().await)),
        SocketAddr::from(([127, 0, 0, 1], free_port().await)),
    ];
    let popts = ProxyOptions {
        listen: listen.clone(),
        tunnel_listen: None,
        tunnel_peers: vec![],
        tls: tls::server_config(&p("ca.pem"), &p("proxy.pem"), &p("proxy.key"))
            .unwrap()
            .into(),
        pipeline: spec.into(),
        tuning: tuning.clone(),
        policy: Arc::new(DestinationPolicy::new(
            &["127.0.0.0/8".parse().unwrap()],
            &[],
            false,
        ))
        .into(),
        connect_timeout: Duration::from_secs(3),
        predictor: proxy::no_predictor(),
        record,
        metrics,
        revoked_relays: Default::default(),
        ask_refresh: true,
        max_sessions_per_relay: 1,
    };
    let (proxy_tasks, sessions) = proxy::start(popts, polycorn_net::activation::Inherited::none())
        .await
        .unwrap();
    let socks = SocketAddr::from(([127, 0, 0, 1], free_port().await));
    let relay_paths: Vec<RelayPath> = listen
        .iter()
        .enumerate()
        .map(|(i, a)| RelayPath {
            name: format!("p{i}"),
            device: None,
            source: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            proxy: (*a).into(),
            mtu: None,
        })
        .collect();
    let relay_tls =
        Live::new(tls::client_config(&p("ca.pem"), &p("relay.pem"), &p("relay.key")).unwrap());
    let ropts = relay_options(spec, &relay_paths, &relay_tls, socks, tuning);
    let (relay, relay_tasks, relay_listeners) =
        relay::start(ropts, context, polycorn_net::activation::Inherited::none())
            .await
            .unwrap();
    Pair {
        socks,
        listen,
        relay_paths,
        dir,
        proxy_tasks,
        sessions,
        relay_tasks,
        relay_listeners,
        relay,
        relay_tls,
    }
}

/// A relay in polycorn mode over `paths` with `tls`, its SOCKS5 listener on `socks`.
fn relay_options(
    spec: &str,
    paths: &[RelayPath],
    tls: &Live<tls::ClientConfig>,
    socks: SocketAddr,
    tuning: Tuning,
) -> RelayOptions {
    RelayOptions {
        mode: Mode::Polycorn,
        pipeline: spec.into(),
        paths: paths.to_vec(),
        tls: Some(tls.clone()),
        transparent: vec![],
        lan_device: None,
        passenger_limits: Default::default(),
        metrics: None,
        socks5: Some(socks),
        dns: None,
        tunnel_port: 0,
        tuning,
        idle_refresh: Default::default(),
        predictor: None,
    }
}

/// Wait up to `secs` seconds for `done`, checking every 50 ms.
async fn eventually(secs: u64, mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..secs * 20 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

/// The proxy's `polycorn_relay_tls_not_after_seconds` of the relay `polycorn-relay`.
fn relay_cert_end(m: &polycorn_net::metrics::Metrics) -> Option<i64> {
    let key = format!(
        "polycorn_relay_tls_not_after_seconds{{relay=\"{}\"}} ",
        tls::RELAY_NAME
    );
    m.encode()
        .lines()
        .find_map(|l| l.strip_prefix(&key)?.trim().parse().ok())
}

/// A train's certificate renewed while it carries passengers (what `systemctl reload` does
/// with new files): every path replaces its subflow with one made with the new certificate
/// once it is idle, so the proxy sees the new end date, and no passenger byte is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_renews_its_certificate_while_carrying_passengers() {
    let srv = server().await;
    let metrics = Arc::new(polycorn_net::metrics::Metrics::new());
    let pair = start_pair_with(
        "hrsch",
        Tuning::default(),
        Some(metrics.clone()),
        proxy::no_recording(),
        None,
    )
    .await;
    tokio::time::timeout(
        Duration::from_secs(30),
        transfer(pair.socks, srv, 1000, 1000),
    )
    .await
    .expect("transfer timed out");
    let relay::Carrier::Session(engine) = &pair.relay else {
        panic!("polycorn mode has a session")
    };
    let attaches = |path: u8| engine.inspect(|s| s.path_counters(path).unwrap().attaches);
    // Both paths up before counting (the first transfer may have gone over one path alone).
    assert!(
        eventually(30, || attaches(0) >= 1 && attaches(1) >= 1).await,
        "both paths attach"
    );
    let now = tls::unix_now();
    let first = relay_cert_end(&metrics).expect("the proxy exports the relay's certificate end");
    assert!(
        first - now > 300 * 86_400,
        "generated certificates last years"
    );
    let before = [attaches(0), attaches(1)];

    let issued = tls::issue_relay_valid_for(
        pair.dir.path(),
        tls::RELAY_NAME,
        &pair.dir.path().join("renewed"),
        false,
        Some(20),
    )
    .unwrap();
    let renewed =
        tls::client_config(&pair.dir.path().join("ca.pem"), &issued.cert, &issued.key).unwrap();
    assert_eq!(pair.relay_tls.replace(renewed), 1);
    // A download under way while the paths renew (each waits for an idle moment).
    let (socks, big) = (pair.socks, 8 << 20);
    let during = tokio::spawn(async move {
        tokio::time::timeout(Duration::from_secs(60), transfer(socks, srv, 1000, big)).await
    });
    let seen = eventually(30, || {
        relay_cert_end(&metrics).is_some_and(|end| (end - now - 20 * 86_400).abs() < 86_400)
    })
    .await;
    assert!(
        seen,
        "the proxy still sees the old certificate 30 s after the renewal: {:?}",
        relay_cert_end(&metrics)
    );
    during
        .await
        .unwrap()
        .expect("the download under way during the renewal timed out");
    assert!(
        eventually(30, || attaches(0) > before[0] && attaches(1) > before[1]).await,
        "both paths replace their subflow: attaches {before:?} -> [{}, {}]",
        attaches(0),
        attaches(1)
    );
    // Settled: each path renewed once, not again and again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        [attaches(0), attaches(1)],
        [before[0] + 1, before[1] + 1],
        "one replacement per path"
    );
    tokio::time::timeout(
        Duration::from_secs(30),
        transfer(pair.socks, srv, 100_000, 100_000),
    )
    .await
    .expect("transfer after the renewal timed out");
}

/// A relay that goes away with no passenger connection open (restarted, powered off) must not
/// leave its session on the proxy forever: after the hold time the proxy frees it, timer and
/// all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_frees_an_idle_session_whose_relay_is_gone() {
    let tuning = Tuning {
        hold_time: Duration::from_secs(1),
        ..Tuning::default()
    };
    let srv = server().await;
    let pair = start_pair("hrsch", tuning.clone()).await;
    tokio::time::timeout(
        Duration::from_secs(30),
        transfer(pair.socks, srv, 1000, 1000),
    )
    .await
    .expect("transfer timed out");
    let live = |p: &Pair| p.sessions.lock().unwrap().len();
    assert_eq!(live(&pair), 1, "one relay session on the proxy");
    let weak = pair
        .sessions
        .lock()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .engine
        .downgrade();
    let Pair {
        proxy_tasks,
        sessions,
        relay_tasks,
        relay_listeners,
        relay,
        dir,
        ..
    } = pair;
    // The relay goes away (its subflows close with its tasks).
    drop(relay_listeners);
    drop(relay_tasks);
    drop(relay);
    assert!(
        eventually(20, || sessions.lock().unwrap().is_empty()).await,
        "the proxy still lists the session 20 s after its relay left (hold time 1 s)"
    );
    assert!(
        eventually(10, || weak.upgrade().is_none()).await,
        "the session was unlisted but something still holds it"
    );
    drop((proxy_tasks, dir));
}

/// The proxy keeps each relay's train context (`[context] record`): every fix once, though
/// the relay sends it on every path, none older than one kept, a modem not reported as `?`;
/// a reload moves the recording, for the live session too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_records_each_relays_context_once() {
    use polycorn_proto::{CellInfo, ContextInfo};
    let rec = tempfile::tempdir().unwrap();
    let record: proxy::LiveRecording = Live::new(Arc::new(Some(proxy::RideRecording {
        dir: rec.path().join("first"),
        carriers: vec![],
        keep_days: None,
    })));
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let srv = server().await;
    let metrics = Arc::new(polycorn_net::metrics::Metrics::new());
    let pair = start_pair_with(
        "hrsch",
        Tuning::default(),
        Some(metrics.clone()),
        record.clone(),
        Some(rx),
    )
    .await;
    // The session is up (context is only sent on attached paths).
    tokio::time::timeout(Duration::from_secs(30), transfer(pair.socks, srv, 100, 100))
        .await
        .expect("transfer timed out");
    let t0 = 1_796_083_100_000u64;
    let fix = |ms: u64, cells: &[(u8, Option<u64>)]| ContextInfo {
        unix_ms: t0 + ms,
        lat: 39.865,
        lon: 116.378,
        speed_mps: 80.0,
        heading_deg: 180.0,
        cells: cells
            .iter()
            .map(|&(path, cell)| CellInfo {
                path,
                cell,
                rsrp_dbm: cell.map(|_| -95.0),
            })
            .collect(),
    };
    let both = [(0, Some(1)), (1, Some(7))];
    for f in [
        fix(0, &both),
        fix(0, &both), // the same fix again
        fix(1000, &[(0, Some(1)), (1, None)]),
        fix(500, &both),            // older than one kept
        fix(2000, &[(0, Some(2))]), // path 1 not reported
        fix(2500, &[]),             // no cells: not written
        fix(3000, &both),
    ] {
        tx.send(f).await.unwrap();
    }
    let name = tls::relay_name_of_file(&pair.dir.path().join("relay.pem")).unwrap();
    let relay_dir = rec.path().join("first").join(proxy::relay_log_dir(&name));
    let rows = |dir: &std::path::Path| -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return vec![];
        };
        let mut rows = vec![];
        for f in rd {
            let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
            rows.extend(text.lines().map(str::to_string));
        }
        rows
    };
    assert!(
        eventually(20, || rows(&relay_dir).len() >= 5).await,
        "the proxy's log has {:?}",
        rows(&relay_dir)
    );
    let short: Vec<String> = rows(&relay_dir)
        .iter()
        .map(|r| {
            let f: Vec<&str> = r.split(',').collect();
            [f[0], f[5], f[7]].join(",")
        })
        .collect();
    assert_eq!(
        short,
        [
            "t_ms,cell_path0,cell_path1",
            "0,1,7",
            "1000,1,",
            "2000,2,?",
            "3000,1,7"
        ]
    );
    // What the proxy keeps reads back as a relay's log.
    let file = std::fs::read_dir(&relay_dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(
        polycorn_net::context::read_replay_csv(&file).unwrap().len(),
        4
    );

    // A reload points the recording elsewhere, keeping a day of logs: the live session follows
    // from its next fix, and the log it starts there removes that relay's old one.
    let moved = rec.path().join("second").join(proxy::relay_log_dir(&name));
    std::fs::create_dir_all(&moved).unwrap();
    let old = moved.join("context-20261001T060000Z.csv");
    std::fs::write(
        &old,
        "t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A\n",
    )
    .unwrap();
    record.replace(Arc::new(Some(proxy::RideRecording {
        dir: rec.path().join("second"),
        carriers: vec!["A".into(), "B".into()],
        keep_days: Some(1),
    })));
    tx.send(fix(4000, &both)).await.unwrap();
    assert!(
        eventually(20, || !old.exists() && rows(&moved).len() >= 2).await,
        "after the reload, {moved:?} has {:?}",
        std::fs::read_dir(&moved).map(|d| d.count())
    );
    assert_eq!(
        rows(&moved),
        [
            "t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A,cell_B,rsrp_dbm_B",
            "0,39.8650000,116.3780000,80.00,180.0,1,-95.0,7,-95.0"
        ]
    );
    assert_eq!(
        rows(&relay_dir).len(),
        5,
        "the first log went on after the reload"
    );
    // Counted per relay: six fixes (the copies and the stale one not), five written (the one
    // without cells not).
    let text = metrics.encode();
    for want in [
        format!("polycorn_context_fixes_total{{relay=\"{name}\"}} 6"),
        format!("polycorn_context_fixes_recorded_total{{relay=\"{name}\"}} 5"),
    ] {
        assert!(text.lines().any(|l| l == want), "no `{want}` in:\n{text}");
    }
    drop(pair);
}

#[test]
fn relay_log_dirs_are_safe_names() {
    assert_eq!(proxy::relay_log_dir("train-017"), "train-017");
    assert_eq!(proxy::relay_log_dir("../etc"), "___etc");
    assert_eq!(proxy::relay_log_dir("Relay 1"), "_elay_1");
    assert_eq!(proxy::relay_log_dir(""), "unnamed");
    assert_eq!(proxy::relay_log_dir(&"x".repeat(100)).len(), 63);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socks5_transfers_are_byte_exact() {
    let srv = server().await;
    let (socks, _dir) = setup("hrsch").await;
    for (up, down) in [(0, 1), (1000, 1000), (100_000, 5_000_000), (3_000_000, 10)] {
        tokio::time::timeout(Duration::from_secs(60), transfer(socks, srv, up, down))
            .await
            .expect("transfer timed out");
    }
    let mut all = Vec::new();
    for i in 0..20 {
        all.push(tokio::spawn(transfer(socks, srv, 1000 * i, 20_000 * i)));
    }
    for t in all {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .unwrap()
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_destination_gets_a_socks_error() {
    let (socks, _dir) = setup("minrtt").await;
    // Nothing listens there.
    let closed = SocketAddr::from(([127, 0, 0, 1], free_port().await));
    assert_eq!(
        socks_connect(socks, closed).await.unwrap_err(),
        5,
        "connection refused"
    );
    // Denied by policy: not in 127.0.0.0/8 and private.
    let denied = SocketAddr::from(([10, 1, 2, 3], 80));
    assert_eq!(
        socks_connect(socks, denied).await.unwrap_err(),
        2,
        "not allowed"
    );
}

/// A path check (`polycorn relay --check-paths`) beside a working relay: the proxy answers
/// over both paths and closes, without a session (the relay's stays the only one, and carries
/// on). A proxy of an earlier build answers the check's Hello as a new session's; the check
/// reports that and closes the session it made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_check_opens_no_session_and_closes_one_an_older_proxy_opened() {
    use polycorn_net::subflow;
    use polycorn_proto::{Frame, Role};

    let srv = server().await;
    let pair = start_pair("polycorn", Tuning::default()).await;
    let live = |p: &Pair| p.sessions.lock().unwrap().len();
    tokio::time::timeout(
        Duration::from_secs(30),
        transfer(pair.socks, srv, 1000, 1000),
    )
    .await
    .expect("transfer timed out");
    assert_eq!(live(&pair), 1);
    let p = |f: &str| pair.dir.path().join(f);
    let client = tls::client_config(&p("ca.pem"), &p("relay.pem"), &p("relay.key")).unwrap();
    let paths = pair.relay_paths.clone();
    let checks = polycorn_net::check::check_paths(&paths, client.clone(), Default::default()).await;
    for c in &checks {
        let ok = c
            .outcome
            .as_ref()
            .unwrap_or_else(|e| panic!("{}: {e}", c.path));
        let polycorn_net::check::Answer::Checked(words) = &ok.answer else {
            panic!("{}: {:?}", c.path, ok.answer);
        };
        assert!(
            words.contains("path check answered by polycorn"),
            "{words:?}"
        );
        assert!(c.ok());
        assert_eq!(
            ok.local.map(|a| a.ip()),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
    }
    assert_eq!(live(&pair), 1, "the checks opened no session");
    tokio::time::timeout(
        Duration::from_secs(30),
        transfer(pair.socks, srv, 5000, 50_000),
    )
    .await
    .expect("transfer after the checks timed out");

    // An earlier build: answers every Hello as a session's, and never closes it itself.
    let old = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let old_addr = old.local_addr().unwrap();
    let acceptor = subflow::acceptor(
        tls::server_config(&p("ca.pem"), &p("proxy.pem"), &p("proxy.key")).unwrap(),
    );
    let older = tokio::spawn(async move {
        let (tcp, _) = old.accept().await.unwrap();
        let acc = subflow::proxy_accept(&acceptor, tcp, &Default::default())
            .await
            .unwrap();
        let hello = Frame::Hello {
            version: polycorn_proto::VERSION,
            role: Role::Proxy,
            session: acc.session,
            path: acc.path,
            epoch: 0x5eed,
            name: None,
        }
        .to_vec();
        let mut s = acc.stream;
        subflow::send_hello(&mut s, &hello).await.unwrap();
        let mut got = acc.initial;
        let _ = s.read_to_end(&mut got).await;
        let mut at = 0;
        let mut closed = false;
        while let Ok(Some((f, n))) = polycorn_proto::decode(&got[at..]) {
            at += n;
            closed |= matches!(f, Frame::Close { .. });
        }
        (acc.session, closed)
    });
    let path = RelayPath {
        name: "old".into(),
        device: None,
        source: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        proxy: old_addr.into(),
        mtu: None,
    };
    let checks = polycorn_net::check::check_paths(&[path], client, Default::default()).await;
    let ok = checks[0]
        .outcome
        .as_ref()
        .expect("the older proxy answered");
    assert_eq!(ok.answer, polycorn_net::check::Answer::Older);
    assert!(
        checks[0].ok(),
        "an older proxy cannot tell, which is no failure"
    );
    let (session, closed) = tokio::time::timeout(Duration::from_secs(10), older)
        .await
        .expect("the check left the older proxy's session open")
        .unwrap();
    assert_eq!(session, polycorn_proto::CHECK_SESSION);
    assert!(
        closed,
        "the check closed the session the older proxy opened"
    );
}

/// The relay's Hellos name its paths (protocol 3), and the proxy keeps the names for its
/// metrics and logs. A relay of protocol 2, whose Hello names no path, is still served: the
/// proxy answers it in version 2, which such a relay accepts, and numbers its paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_learns_path_names_and_answers_an_older_relay_in_its_version() {
    use polycorn_proto::{decode, Frame, Role};

    let srv = server().await;
    let pair = start_pair("polycorn", Tuning::default()).await;
    tokio::time::timeout(
        Duration::from_secs(30),
        transfer(pair.socks, srv, 1000, 1000),
    )
    .await
    .expect("transfer timed out");
    let names = |p: &Pair, session: Option<u64>| -> Vec<Option<String>> {
        let map = p.sessions.lock().unwrap();
        let live = match session {
            Some(id) => map.get(&id).expect("session listed"),
            None => map.values().next().expect("one session"),
        };
        live.engine
            .inspect(|s| (0..2).map(|i| s.path_name(i).map(str::to_owned)).collect())
    };
    // Both paths' subflows are up once the transfer ran over them; give the second a moment.
    assert!(
        eventually(10, || names(&pair, None).iter().all(Option::is_some)).await,
        "{:?}",
        names(&pair, None)
    );
    assert_eq!(
        names(&pair, None),
        vec![Some("p0".to_owned()), Some("p1".to_owned())]
    );

    // A relay of the previous protocol version on the first listener, with a session of its own.
    let p = |f: &str| pair.dir.path().join(f);
    let client = tls::client_config(&p("ca.pem"), &p("relay.pem"), &p("relay.key")).unwrap();
    let polycorn_net::proxy_addr::ProxyAddr::Ip(proxy_addr) = pair.relay_paths[0].proxy else {
        panic!("the pair's paths use addresses");
    };
    let tcp = TcpStream::connect(proxy_addr).await.unwrap();
    let mut s = tokio_rustls::TlsConnector::from(client)
        .connect(tls::proxy_server_name(), tcp)
        .await
        .unwrap();
    let session = 0x0002_0002;
    let hello = Frame::Hello {
        version: 2,
        role: Role::Relay,
        session,
        path: 0,
        epoch: 7,
        name: None,
    }
    .to_vec();
    s.write_all(&hello).await.unwrap();
    s.flush().await.unwrap();
    let mut got = Vec::new();
    let answer = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some((frame, _)) = decode(&got).unwrap() {
                return frame.to_vec();
            }
            let mut b = [0u8; 4096];
            let n = s.read(&mut b).await.unwrap();
            assert!(
                n > 0,
                "the proxy closed without answering a version-2 Hello"
            );
            got.extend_from_slice(&b[..n]);
        }
    })
    .await
    .expect("no answer to a version-2 Hello");
    let (frame, _) = decode(&answer).unwrap().unwrap();
    let Frame::Hello {
        version,
        role,
        session: theirs,
        ref name,
        ..
    } = frame
    else {
        panic!("the proxy answered with {frame:?}");
    };
    assert_eq!(
        (version, role, theirs, name.as_deref()),
        (2, Role::Proxy, session, None)
    );
    assert!(
        polycorn_proto::Session::check_hello(Role::Relay, &frame).is_ok(),
        "a relay accepts the answer"
    );
    // The proxy has the older relay's session with no name for its path.
    assert!(eventually(5, || pair.sessions.lock().unwrap().contains_key(&session)).await);
    assert_eq!(names(&pair, Some(session)), vec![None, None]);
    drop(s);
}

/// A relay like the pair's (same certificate, same paths to the proxy) with a session of its
/// own: what a second gateway holding a stolen credential would start.
async fn another_relay(
    pair: &Pair,
) -> (
    relay::Carrier,
    tokio::task::JoinSet<()>,
    tokio::task::JoinSet<()>,
) {
    let socks = SocketAddr::from(([127, 0, 0, 1], free_port().await));
    let opts = relay_options(
        "hrsch",
        &pair.relay_paths,
        &pair.relay_tls,
        socks,
        Tuning::default(),
    );
    relay::start(opts, None, polycorn_net::activation::Inherited::none())
        .await
        .unwrap()
}

/// Hardening: one relay name holds at most `max_sessions_per_relay` (1) live sessions and the
/// one replacing them; a third is refused until one of them ends, then let in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_name_holds_one_session_and_the_one_replacing_it() {
    let pair = start_pair("hrsch", Tuning::default()).await;
    let live = |p: &Pair| p.sessions.lock().unwrap().len();
    assert!(eventually(10, || live(&pair) == 1).await);
    let second = another_relay(&pair).await;
    assert!(
        eventually(10, || live(&pair) == 2).await,
        "the relay's second session (a restart's) was not let in"
    );
    let third = another_relay(&pair).await;
    // Its paths keep trying; the proxy keeps refusing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(live(&pair), 2, "a third live session of one relay name");
    // The first relay goes away: its session has every path down, so the next session of
    // the name ends it and takes its place.
    let Pair {
        proxy_tasks,
        sessions,
        relay_tasks,
        relay_listeners,
        relay,
        dir,
        ..
    } = pair;
    drop((relay_listeners, relay_tasks, relay));
    assert!(
        eventually(30, || {
            let m = sessions.lock().unwrap();
            m.len() == 2
                && [&second.0, &third.0].iter().all(|c| match c {
                    relay::Carrier::Session(e) => e.inspect(|s| s.any_path_usable()),
                    relay::Carrier::Direct(_) => false,
                })
        })
        .await,
        "the third relay did not get in after the first left"
    );
    drop((second, third, proxy_tasks, dir));
}

/// Hardening: a relay that completes its handshake and then says nothing more (a valid but
/// silent peer) has its session ended after the hold time, and its subflow closed with the
/// session rather than left open until the kernel's timers give up on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_peers_subflow_is_closed_with_its_session() {
    use polycorn_net::subflow;
    let tuning = Tuning {
        hold_time: Duration::from_secs(1),
        ..Tuning::default()
    };
    let pair = start_pair("hrsch", tuning.clone()).await;
    let id = 0x5151_5151_5151_5151;
    let mut cfg = tuning.session_config(polycorn_proto::Role::Relay, id, "hrsch");
    cfg.epoch = 7;
    let hello = polycorn_proto::Session::new(cfg).unwrap().hello(0).to_vec();
    let est = subflow::relay_connect(
        &subflow::connector(pair.relay_tls.current().1),
        pair.listen[0],
        None,
        None,
        &subflow::SubflowSockopts::default(),
        &hello,
        (id, 0, 7),
        subflow::ConnectTimeouts::DEFAULT,
    )
    .await
    .expect("the silent relay's handshake");
    let listed = |p: &Pair| p.sessions.lock().unwrap().contains_key(&id);
    assert!(listed(&pair), "the silent relay's session was opened");
    assert!(
        eventually(20, || !listed(&pair)).await,
        "the silent session still listed 20 s after it went quiet (hold time 1 s)"
    );
    // Its subflow ends with it: what the proxy sent, then the end of the stream.
    let mut stream = est.stream;
    let mut sink = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut sink)).await;
    assert!(
        ended.is_ok(),
        "the silent relay's subflow is still open 5 s after its session ended"
    );
}
