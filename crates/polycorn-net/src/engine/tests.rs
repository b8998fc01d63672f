use super::*;
use polycorn_proto::{CellInfo, ContextInfo, Role, SessionConfig};
use polycorn_sched::{Bandwidth, Duration as SchedDuration, TcpInfoSample};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncReadExt, DuplexStream, ReadBuf};

/// A predictor that keeps every context it is given.
struct Keeps(Arc<Mutex<Vec<u64>>>);
impl polycorn_sched::HandoverPredictor for Keeps {
    fn next_failure(&self, _path: polycorn_sched::PathId, _now: Instant) -> Option<Instant> {
        None
    }
}
impl crate::predictor::TrainPredictor for Keeps {
    fn on_context(&mut self, _now: Instant, ctx: &ContextInfo) {
        self.0.lock().unwrap().push(ctx.unix_ms);
    }
}

/// A predictor that replaces the session's (a reload rebuilt LinkDB) starts from the train
/// context the session last had, and gets the later ones; the one it replaced gets no more.
#[tokio::test]
async fn a_replaced_predictor_starts_from_the_last_context() {
    let session = Session::new(SessionConfig::new(Role::Proxy, 7, "minrtt")).expect("session");
    let old = Arc::new(Mutex::new(Vec::new()));
    let (engine, _events) = Engine::new(session, Box::new(Keeps(old.clone())));
    let ctx = |ms: u64| ContextInfo {
        unix_ms: ms,
        lat: 39.8,
        lon: 116.3,
        speed_mps: 80.0,
        heading_deg: 160.0,
        cells: vec![],
    };
    // Before any context, the new one is given nothing.
    let first = Arc::new(Mutex::new(Vec::new()));
    engine.replace_predictor(Box::new(Keeps(first.clone())));
    assert!(first.lock().unwrap().is_empty());
    engine.on_context(&ctx(1000));
    engine.on_context(&ctx(2000));
    let new = Arc::new(Mutex::new(Vec::new()));
    engine.replace_predictor(Box::new(Keeps(new.clone())));
    engine.on_context(&ctx(3000));
    assert!(old.lock().unwrap().is_empty());
    assert_eq!(*first.lock().unwrap(), [1000, 2000]);
    assert_eq!(*new.lock().unwrap(), [2000, 3000]);
}

fn idle() -> TcpInfoFn {
    Box::new(|| {
        Ok(SubflowInfo {
            sample: TcpInfoSample {
                srtt: SchedDuration::from_millis(50),
                rttvar: SchedDuration::from_millis(10),
                min_rtt: None,
                cwnd_bytes: 14_600,
                mss_bytes: 1460,
                unacked_bytes: 0,
                notsent_bytes: 0,
                delivery_rate: Bandwidth::ZERO,
                rto_backoff: 0,
                bytes_acked: 0,
                unacked_age: SchedDuration::ZERO,
            },
            retransmissions: 0,
            written_bytes: 0,
            ssthresh: None,
        })
    })
}

fn context_info(k: u64) -> ContextInfo {
    ContextInfo {
        unix_ms: k,
        lat: 39.9,
        lon: 116.4,
        speed_mps: 83.0,
        heading_deg: 160.0,
        cells: (0..30)
            .map(|i| CellInfo {
                path: 0,
                cell: Some(k * 100 + i),
                rsrp_dbm: Some(-90.0),
            })
            .collect(),
    }
}

/// A context frame of a few hundred bytes: output on every attached path.
fn context(engine: &Engine, k: u64) {
    engine.with(|s, now| s.send_context(now, &context_info(k)));
}

/// Whatever `peer` holds right now, without waiting (and so without yielding to the
/// subflow tasks).
fn take_now(peer: &mut DuplexStream) -> usize {
    let mut cx = Context::from_waker(Waker::noop());
    let mut total = 0;
    let mut buf = [0u8; 4096];
    loop {
        let mut rb = ReadBuf::new(&mut buf);
        match pin!(&mut *peer).poll_read(&mut cx, &mut rb) {
            Poll::Ready(Ok(())) if !rb.filled().is_empty() => total += rb.filled().len(),
            _ => return total,
        }
    }
}

async fn drain(peer: &mut DuplexStream) -> usize {
    let mut total = 0;
    let mut buf = [0u8; 4096];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(50), peer.read(&mut buf)).await
    {
        if n == 0 {
            break;
        }
        total += n;
    }
    total
}

/// A stall once seen on a bench ride: a subflow blocked in a write when a newer one
/// replaced it resumed, took the path's output — now the new subflow's — and wrote it into
/// the dying socket. The session counted those chunks as sent on the path; nothing ever
/// delivered or reinjected them. A replaced subflow must write nothing more.
#[tokio::test(flavor = "current_thread")]
async fn a_replaced_subflow_blocked_in_a_write_takes_none_of_the_new_ones_output() {
    let frame = polycorn_proto::Frame::Context(context_info(0))
        .to_vec()
        .len();
    for round in 0..20 {
        let session = Session::new(SessionConfig::new(Role::Relay, 7, "minrtt")).expect("session");
        let (engine, _events) = Engine::new(session, Box::new(polycorn_sched::NoPrediction));
        // Subflow A behind a pipe that holds two thirds of a context frame and that nobody
        // reads: its writer blocks in the middle of the frame.
        let cap = frame * 2 / 3;
        let (a_local, mut a_peer) = tokio::io::duplex(cap);
        let (ra, wa) = tokio::io::split(a_local);
        let e = engine.clone();
        let a =
            tokio::spawn(async move { e.run_subflow(0, (0, 0), Vec::new(), ra, wa, idle()).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        context(&engine, 1);
        tokio::time::sleep(Duration::from_millis(20)).await;
        // In one go, without yielding to A: room for the rest of A's frame (A becomes
        // runnable), B replaces A on the same path (its first poll attaches it), and the
        // path gets new output. A runs before B, woken for both at once.
        assert!(take_now(&mut a_peer) > 0);
        let (b_local, mut b_peer) = tokio::io::duplex(1 << 20);
        let (rb, wb) = tokio::io::split(b_local);
        let e = engine.clone();
        let mut b =
            Box::pin(async move { e.run_subflow(0, (0, 0), Vec::new(), rb, wb, idle()).await });
        let mut cx = Context::from_waker(Waker::noop());
        assert!(b.as_mut().poll(&mut cx).is_pending());
        assert!(engine.inspect(|s| s.path_attached(0)));
        take_now(&mut b_peer);
        context(&engine, 2);
        let b = tokio::spawn(b);
        tokio::time::sleep(Duration::from_millis(30)).await;
        let a_after = drain(&mut a_peer).await;
        let b_after = drain(&mut b_peer).await;
        assert!(
            a_after <= frame - cap,
            "round {round}: the replaced subflow wrote {a_after} bytes, more than the rest of its frame ({})",
            frame - cap
        );
        assert!(
            b_after >= frame,
            "round {round}: the new context did not reach B ({b_after} bytes)"
        );
        assert!(matches!(a.await.expect("task A"), SubflowError::Replaced));
        b.abort();
    }
}

/// A path whose window was full at its last `TCP_INFO` sample gets nothing from the
/// scheduler until a newer sample shows room. Waiting for the periodic sample idled fast
/// paths most of each period (`net bench`: 2.9 Gbit/s on two veth paths, 4.9 with this): the
/// frames the peer sends — its acknowledgements among them — make the writer sample again
/// at once. The clock is paused and never advances here, so the periodic sample cannot be
/// what samples.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn frames_from_the_peer_make_a_path_with_a_full_window_sample_again() {
    use std::sync::atomic::AtomicU64;
    let session = Session::new(SessionConfig::new(Role::Relay, 7, "minrtt")).expect("session");
    let (engine, _events) = Engine::new(session, Box::new(polycorn_sched::NoPrediction));
    let samples = Arc::new(AtomicU64::new(0));
    let unacked = Arc::new(AtomicU64::new(14_600));
    // The kernel's slow-start threshold, segments (0: unset).
    let ssthresh = Arc::new(AtomicU64::new(0));
    let tcp_info: TcpInfoFn = {
        let (samples, unacked, ssthresh) = (samples.clone(), unacked.clone(), ssthresh.clone());
        let idle = idle();
        Box::new(move || {
            samples.fetch_add(1, Ordering::SeqCst);
            let mut info = idle()?;
            info.sample.unacked_bytes = unacked.load(Ordering::SeqCst);
            info.ssthresh = match ssthresh.load(Ordering::SeqCst) {
                0 => None,
                n => Some(n as u32),
            };
            Ok(info)
        })
    };
    let (local, mut peer) = tokio::io::duplex(1 << 16);
    let (r, w) = tokio::io::split(local);
    let e = engine.clone();
    let run =
        tokio::spawn(async move { e.run_subflow(0, (0, 0), Vec::new(), r, w, tcp_info).await });
    let settle = || async {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    };
    settle().await;
    take_now(&mut peer);
    assert!(samples.load(Ordering::SeqCst) > 0, "the first sample");
    assert!(engine.inspect(|s| s.path_window_full(0)));
    assert_eq!(engine.path_ssthresh(0), None, "no threshold set yet");
    // Nothing arrives: no new sample while the clock stands still.
    let before = samples.load(Ordering::SeqCst);
    settle().await;
    assert_eq!(samples.load(Ordering::SeqCst), before);
    // A frame from the peer: the writer samples again and sees the window open (and the
    // threshold a timeout set meanwhile).
    unacked.store(0, Ordering::SeqCst);
    ssthresh.store(27, Ordering::SeqCst);
    // (A pong: a frame that asks for no answer, so no output wakes the writer instead.)
    let pong = polycorn_proto::Frame::Pong {
        id: 1,
        ping_sent_us: 0,
        received_us: 0,
    }
    .to_vec();
    peer.write_all(&pong).await.expect("pong");
    settle().await;
    assert!(
        samples.load(Ordering::SeqCst) > before,
        "no new sample after the peer's frame"
    );
    assert!(!engine.inspect(|s| s.path_window_full(0)));
    assert_eq!(engine.path_ssthresh(0), Some(27));
    assert_eq!(engine.path_ssthresh(1), None, "a path with no subflow");
    // With room, a frame wakes nobody.
    let before = samples.load(Ordering::SeqCst);
    peer.write_all(&pong).await.expect("pong");
    settle().await;
    assert_eq!(samples.load(Ordering::SeqCst), before);
    run.abort();
}

/// Make before break on the relay: a subflow dropped for a fresh one that is already
/// connected leaves its path attached, so its chunks are reinjected when the fresh one
/// attaches (and may go on it) rather than onto the other paths at once.
#[tokio::test(flavor = "current_thread")]
async fn a_handed_over_subflow_leaves_its_path_attached_for_the_next_one() {
    let session = Session::new(SessionConfig::new(Role::Relay, 7, "minrtt")).expect("session");
    let (engine, _events) = Engine::new(session, Box::new(polycorn_sched::NoPrediction));
    let mut cx = Context::from_waker(Waker::noop());
    let start = |engine: &Engine| {
        let (local, peer) = tokio::io::duplex(1 << 16);
        let (r, w) = tokio::io::split(local);
        let e = engine.clone();
        let run = Box::pin(async move { e.run_subflow(0, (0, 0), Vec::new(), r, w, idle()).await });
        (run, peer)
    };
    let attached = |engine: &Engine| engine.inspect(|s| s.path_attached(0));
    // Without a hand-over, the end of a subflow detaches its path.
    let (mut a, _a_peer) = start(&engine);
    assert!(a.as_mut().poll(&mut cx).is_pending());
    assert!(attached(&engine));
    drop(a);
    assert!(!attached(&engine));
    // With one, the path stays attached until the next subflow takes over...
    let (mut b, _b_peer) = start(&engine);
    assert!(b.as_mut().poll(&mut cx).is_pending());
    engine.hand_over(0);
    drop(b);
    assert!(attached(&engine));
    let (mut c, _c_peer) = start(&engine);
    assert!(c.as_mut().poll(&mut cx).is_pending());
    assert!(attached(&engine));
    // ...and it is used up: the next end detaches again.
    drop(c);
    assert!(!attached(&engine));
}

/// A path that goes silent with bytes queued fills its socket, and its writer waits in a
/// write for as long as the silence lasts. The scheduler must still learn of the path's
/// timeouts meanwhile (they trigger reinjection of what the path holds): `TCP_INFO` is read
/// on every tick while the write waits; without that, the bytes of a blacked-out path
/// waited out the whole blackout.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_writer_blocked_on_a_full_socket_still_reports_the_paths_timeouts() {
    use std::sync::atomic::AtomicU32;
    let frame = polycorn_proto::Frame::Context(context_info(0))
        .to_vec()
        .len();
    let session = Session::new(SessionConfig::new(Role::Relay, 7, "minrtt")).expect("session");
    let (engine, _events) = Engine::new(session, Box::new(polycorn_sched::NoPrediction));
    let backoff = Arc::new(AtomicU32::new(0));
    let tcp_info: TcpInfoFn = {
        let (backoff, idle) = (backoff.clone(), idle());
        Box::new(move || {
            let mut info = idle()?;
            info.sample.rto_backoff = backoff.load(Ordering::SeqCst);
            Ok(info)
        })
    };
    // A pipe that holds half a context frame and that nobody reads: the writer blocks.
    let (local, _peer) = tokio::io::duplex(frame / 2);
    let (r, w) = tokio::io::split(local);
    let e = engine.clone();
    let run =
        tokio::spawn(async move { e.run_subflow(0, (0, 0), Vec::new(), r, w, tcp_info).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    context(&engine, 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let rtos = |e: &Engine| {
        e.inspect(|s| {
            s.scheduler()
                .path(polycorn_sched::PathId::new(0).expect("path 0"))
                .map(|p| p.consecutive_rtos)
        })
    };
    assert_eq!(rtos(&engine), Some(0));
    // Three timeouts while the write still waits.
    backoff.store(3, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!run.is_finished(), "the write cannot have completed");
    assert_eq!(
        rtos(&engine),
        Some(3),
        "the timeouts during the blocked write reached the scheduler"
    );
    run.abort();
}
