//! Metrics: values set through the API appear in a real HTTP scrape; garbage gets 400 and the
//! endpoint keeps serving.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use polycorn_net::metrics::{self, Direction, Metrics, CONTENT_TYPE, MAX_REQUEST_HEAD_BYTES};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Sends `request` raw and returns (status code, headers, body).
async fn fetch(addr: SocketAddr, request: &[u8]) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("server closes the connection")
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    (code, head.to_owned(), body.to_owned())
}

async fn server(m: Arc<Metrics>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(metrics::serve(listener, m));
    addr
}

const GET: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nUser-Agent: test\r\n\r\n";

#[tokio::test]
async fn scrape_shows_labelled_values() {
    let m = Arc::new(Metrics::new());
    let a = m.path("train-1", "A");
    a.set_rtt(Duration::from_millis(185));
    a.set_cwnd_bytes(65_536);
    a.sent_bytes.inc_by(1_000);
    a.received_bytes.inc_by(2_000);
    a.reinjected_bytes.inc_by(300);
    a.redundant_bytes.inc_by(400);
    a.connected();
    a.set_kernel_retransmissions(5);
    a.set_kernel_retransmissions(7);
    // A new subflow counts from zero again.
    a.reconnected();
    a.set_kernel_retransmissions(2);
    let b = m.path("train-1", "B");
    b.connected();
    b.disconnected();
    let user: IpAddr = "10.0.1.23".parse().unwrap();
    m.user(user).bytes(Direction::Up).inc_by(123);
    m.user(user).down_bytes.inc_by(4_567);
    m.stage("hpr").inc();
    m.stage("minrtt").inc_by(3);
    m.flows_open.set(4);
    m.flows_total.inc_by(9);
    m.flows_reset.inc();
    m.frame_rejected("unknown_flow").inc();
    m.peers_rejected.inc_by(2);
    m.reorder_wait.observe(0.02);
    m.reorder_wait.observe(3.0);

    let addr = server(m.clone()).await;
    let (code, head, body) = fetch(addr, GET).await;
    assert_eq!(code, 200, "{head}");
    assert!(
        head.contains(&format!("Content-Type: {CONTENT_TYPE}")),
        "{head}"
    );
    for line in [
        "polycorn_path_rtt_seconds{path=\"A\",relay=\"train-1\"} 0.185",
        "polycorn_path_cwnd_bytes{path=\"A\",relay=\"train-1\"} 65536",
        "polycorn_path_sent_bytes_total{path=\"A\",relay=\"train-1\"} 1000",
        "polycorn_path_received_bytes_total{path=\"A\",relay=\"train-1\"} 2000",
        "polycorn_path_retransmissions_total{path=\"A\",relay=\"train-1\"} 9",
        "polycorn_path_reinjected_bytes_total{path=\"A\",relay=\"train-1\"} 300",
        "polycorn_path_redundant_bytes_total{path=\"A\",relay=\"train-1\"} 400",
        "polycorn_path_up{path=\"A\",relay=\"train-1\"} 1",
        "polycorn_path_up{path=\"B\",relay=\"train-1\"} 0",
        "polycorn_path_reconnects_total{path=\"A\",relay=\"train-1\"} 1",
        "polycorn_user_bytes_total{user=\"10.0.1.23\",direction=\"up\"} 123",
        "polycorn_user_bytes_total{user=\"10.0.1.23\",direction=\"down\"} 4567",
        "polycorn_stage_decisions_total{stage=\"hpr\"} 1",
        "polycorn_stage_decisions_total{stage=\"minrtt\"} 3",
        "polycorn_flows_open 4",
        "polycorn_flows_total 9",
        "polycorn_flows_reset_total 1",
        "polycorn_frames_rejected_total{reason=\"unknown_flow\"} 1",
        "polycorn_peers_rejected_total 2",
        "polycorn_reorder_wait_seconds_count 2",
        "polycorn_reorder_wait_seconds_sum 3.02",
        "polycorn_reorder_wait_seconds_bucket{le=\"0.025\"} 1",
        "polycorn_reorder_wait_seconds_bucket{le=\"5.0\"} 2",
        "# TYPE polycorn_path_rtt_seconds gauge",
        "# UNIT polycorn_path_rtt_seconds seconds",
        "# TYPE polycorn_path_sent_bytes counter",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing `{line}` in:\n{body}"
        );
    }
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert_eq!(body, m.encode(), "endpoint serves encode()");

    // HEAD: same headers, no body.
    let (code, head, body) = fetch(addr, b"HEAD /metrics HTTP/1.0\r\n\r\n").await;
    assert_eq!(code, 200, "{head}");
    assert!(body.is_empty());
}

#[tokio::test]
async fn bad_requests_get_errors_and_the_server_keeps_serving() {
    let m = Arc::new(Metrics::new());
    m.flows_total.inc();
    let addr = server(m).await;

    let (code, _, _) = fetch(addr, b"\x16\x03\x01\x02\x00garbage\r\n\r\n").await;
    assert_eq!(code, 400);
    let (code, _, _) = fetch(addr, b"GET /metrics\r\n\r\n").await;
    assert_eq!(code, 400);
    let (code, _, _) = fetch(addr, b"GET / HTTP/1.1\r\n\r\n").await;
    assert_eq!(code, 404);
    let (code, head, _) = fetch(
        addr,
        b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
    )
    .await;
    assert_eq!(code, 405);
    assert!(head.contains("Allow: GET, HEAD"), "{head}");
    let mut huge = b"GET /metrics HTTP/1.1\r\n".to_vec();
    huge.extend(std::iter::repeat_n(b'a', MAX_REQUEST_HEAD_BYTES + 10));
    let (code, _, _) = fetch(addr, &huge).await;
    assert_eq!(code, 431);

    // A client that connects and leaves without a word gets nothing and breaks nothing.
    drop(TcpStream::connect(addr).await.unwrap());
    // A half-sent request, then close.
    {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /met").await.unwrap();
        s.shutdown().await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        assert!(String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 400"));
    }

    let (code, _, body) = fetch(addr, GET).await;
    assert_eq!(code, 200);
    assert!(body.contains("polycorn_flows_total 1\n"), "{body}");
}

#[test]
fn metrics_are_send_sync_and_handles_share_state() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Metrics>();
    let m = Metrics::new();
    let one = m.path("train-1", "A");
    let two = m.path("train-1", "A");
    one.sent_bytes.inc_by(10);
    two.sent_bytes.inc_by(5);
    assert_eq!(m.path("train-1", "A").sent_bytes.get(), 15);
    // The retransmission baseline is per path, shared by every handle.
    one.set_kernel_retransmissions(4);
    two.set_kernel_retransmissions(6);
    assert_eq!(m.path("train-1", "A").retransmissions.get(), 6);
    // Another relay's path of the same name is a series of its own, with its own baseline.
    let other = m.path("train-2", "A");
    other.set_kernel_retransmissions(2);
    assert_eq!(other.retransmissions.get(), 2);
    assert_eq!(m.path("train-1", "A").sent_bytes.get(), 15);
    assert!(m
        .encode()
        .contains("polycorn_path_retransmissions_total{path=\"A\",relay=\"train-2\"} 2"));
    // Names are sanitised so the exposition stays well-formed.
    m.path("train-1", "bad\"name\n").up.set(1);
    assert!(m
        .encode()
        .contains("polycorn_path_up{path=\"bad_name_\",relay=\"train-1\"} 1"));
}
