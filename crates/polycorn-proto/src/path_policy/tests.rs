use super::*;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

/// Blackouts and tunnels are routine: a path that fails to connect for less than
/// `DOWN_WARN_AFTER` stays quiet, then warns, then repeats only every `DOWN_REWARN`.
#[test]
fn coverage_failures_warn_after_30_s_and_then_every_5_min() {
    let t0 = Instant::from_millis(1_000_000);
    let mut f = ConnectFailures::default();
    for s in 0..30 {
        assert_eq!(f.failed(t0 + secs(s), false, "TCP connect timed out"), None);
    }
    assert_eq!(
        f.failed(t0 + secs(30), false, "TCP connect timed out"),
        Some(DownWarning {
            attempts: 31,
            down: secs(30)
        })
    );
    for s in 31..330 {
        assert_eq!(
            f.failed(t0 + secs(s), false, "TCP connect timed out"),
            None,
            "{s}"
        );
    }
    assert!(f
        .failed(t0 + secs(330), false, "TCP connect timed out")
        .is_some());
    assert_eq!(
        f.connected(t0 + secs(340)),
        Some(DownWarning {
            attempts: 331,
            down: secs(340)
        }),
        "the recovery of a path that was warned about is reported"
    );
    // A new run starts from scratch.
    assert_eq!(
        f.failed(t0 + secs(400), false, "TCP connect timed out"),
        None
    );
    assert_eq!(f.connected(t0 + secs(401)), None, "nothing was warned");
}

/// A missing device or a rejected certificate does not go away by waiting: the first
/// failure warns, the same error again does not, a different one does.
#[test]
fn setup_failures_warn_at_once_and_once_per_error() {
    let t0 = Instant::from_millis(1_000_000);
    let mut f = ConnectFailures::default();
    let nodev = "pin socket to lte9 (10.0.0.1): No such device (os error 19)";
    assert_eq!(
        f.failed(t0, true, nodev),
        Some(DownWarning {
            attempts: 1,
            down: Duration::ZERO
        })
    );
    assert_eq!(f.failed(t0 + secs(2), true, nodev), None);
    assert!(f
        .failed(t0 + secs(4), true, "read Hello: bad certificate")
        .is_some());
    assert_eq!(
        f.failed(t0 + secs(40), false, "TCP connect timed out"),
        None
    );
    assert!(
        f.failed(t0 + secs(304), true, nodev).is_some(),
        "repeated after 5 min"
    );
}

/// The pauses of one run of failures: coverage failures double from 100 ms to 2 s, refusals
/// from 2 s to a minute, another proxy is 5 s; a subflow coming up starts the next run afresh.
#[test]
fn connect_failures_back_off_and_a_subflow_resets_the_pause() {
    let mut p = PathPolicy::default();
    let waits: Vec<u64> = (0..7)
        .map(|_| p.connect_failed(Failure::Coverage).as_millis())
        .collect();
    assert_eq!(waits, [100, 200, 400, 800, 1600, 2000, 2000]);
    assert_eq!(p.connect_failed(Failure::Refused), secs(4));
    assert_eq!(p.connect_failed(Failure::OtherProxy), secs(5));
    assert_eq!(p.connect_failed(Failure::Refused), secs(10));
    p.connected(Instant::from_millis(1_000_000));
    assert_eq!(
        p.connect_failed(Failure::Coverage),
        ms(100),
        "reset by the subflow"
    );
    let mut p = PathPolicy::default();
    let waits: Vec<u64> = (0..7)
        .map(|_| p.connect_failed(Failure::Refused).as_millis())
        .collect();
    assert_eq!(waits, [2000, 4000, 8000, 16000, 32000, 60000, 60000]);
}

/// Meeting another proxy is said once until the path has a subflow again; the failures'
/// warnings and the recovery go through the policy.
#[test]
fn another_proxy_is_told_once_per_run_and_failures_are_reported() {
    let t0 = Instant::from_millis(1_000_000);
    let mut p = PathPolicy::default();
    assert!(p.met_other_proxy());
    assert!(!p.met_other_proxy());
    assert_eq!(p.report(t0, false, "TCP connect timed out"), None);
    assert!(p
        .report(t0 + secs(31), false, "TCP connect timed out")
        .is_some());
    assert_eq!(
        p.connected(t0 + secs(32)),
        Some(DownWarning {
            attempts: 2,
            down: secs(32)
        })
    );
    assert!(p.met_other_proxy(), "said again after a subflow");
    assert_eq!(p.connected(t0 + secs(40)), None);
}

/// Four silent subflows in a row, each replaced within 10 s of coming up, hint at a path-MTU
/// black hole (once); a long-lived subflow ends the run, other ends leave it as it is.
#[test]
fn short_lived_silent_subflows_in_a_row_hint_at_a_black_hole() {
    let mut p = PathPolicy::default();
    for _ in 0..3 {
        assert_eq!(p.subflow_over(secs(2), true), None);
    }
    assert_eq!(
        p.subflow_over(secs(2), false),
        None,
        "not silent: no change"
    );
    assert_eq!(p.subflow_over(secs(2), true), Some(4));
    assert_eq!(p.subflow_over(secs(2), true), None, "said once");
    assert_eq!(p.subflow_over(secs(10), true), None);
    for _ in 0..3 {
        assert_eq!(p.subflow_over(secs(9), true), None);
    }
    assert_eq!(
        p.subflow_over(secs(9), true),
        Some(4),
        "a new run after a long-lived one"
    );
}

/// After reaching another proxy the path waits 5 s, looking every 250 ms, and stops at once
/// when the session changes or no path works with its proxy any more.
#[test]
fn the_pause_after_another_proxy_ends_when_the_path_may_join() {
    let t0 = Instant::from_millis(1_000_000);
    let pause = OtherProxyPause::new(t0, OTHER_PROXY_RETRY, 7, false);
    assert_eq!(pause.sleep(t0), Some(ms(250)));
    assert_eq!(pause.sleep(t0 + ms(4900)), Some(ms(100)));
    assert_eq!(pause.sleep(t0 + secs(5)), None);
    assert!(!pause.may_join(7, false, true));
    assert!(pause.may_join(8, false, true), "renewed");
    assert!(pause.may_join(7, true, true), "closed by the proxy");
    assert!(
        pause.may_join(7, false, false),
        "no path works with the session's proxy"
    );
    // Driven in virtual time: the number of looks until the pause is over.
    let mut now = t0;
    let mut looks = 0;
    while let Some(d) = pause.sleep(now) {
        now += d;
        looks += 1;
    }
    assert_eq!((looks, now - t0), (20, secs(5)));
}

/// The watchdog probes after two silent looks in a row (a second), not after one, and a path
/// that speaks again starts the count afresh.
#[test]
fn the_watchdog_fires_after_two_silent_looks_in_a_row() {
    let mut w = Watchdog::default();
    assert_eq!(WATCHDOG_CHECK, ms(500));
    assert!(!w.on_look(true));
    assert!(!w.on_look(false));
    assert!(!w.on_look(true));
    assert!(w.on_look(true));
    assert!(w.on_look(true), "still silent: still probing");
    assert!(!w.on_look(false));
}

fn counters(rx: u64, tx: u64) -> PathCounters {
    PathCounters {
        rx_bytes: rx,
        tx_bytes: tx,
        ..PathCounters::default()
    }
}

fn socket(ssthresh: u32, unacked: u32, backoff: u8) -> SocketState {
    SocketState {
        ssthresh_segments: ssthresh,
        unacked_segments: unacked,
        backoff,
        ..SocketState::default()
    }
}

/// Refresh: an idle subflow whose threshold collapsed is replaced once it is 5 s old and the
/// path was quiet for a look; not while data crosses the path, not while the socket backs
/// off or has more than probes in flight, not while the path is unusable.
#[test]
fn refresh_replaces_an_idle_subflow_whose_threshold_collapsed() {
    let t0 = Instant::from_millis(1_000_000);
    let mut r = Refresh::new(IdleRefresh::Collapsed, t0, counters(0, 0));
    assert!(r.enabled());
    let collapsed = || Some(socket(7, 1, 0));
    let yes = || true;
    for s in 1..5 {
        assert_eq!(
            r.on_look(t0 + secs(s), counters(0, 0), None, collapsed, yes),
            None,
            "too young at {s} s"
        );
    }
    // Busy: data crossed the path since the last look.
    assert_eq!(
        r.on_look(t0 + secs(5), counters(10_000, 0), None, collapsed, yes),
        None
    );
    // The socket is read only when the path is quiet and the subflow old enough.
    let unread = || -> Option<SocketState> { panic!("read while busy") };
    assert_eq!(
        r.on_look(t0 + secs(6), counters(10_000, 5000), None, unread, yes),
        None
    );
    assert_eq!(
        r.on_look(t0 + secs(7), counters(10_000, 5000), None, || None, yes),
        None,
        "unreadable"
    );
    assert_eq!(
        r.on_look(
            t0 + secs(8),
            counters(10_000, 5000),
            None,
            || Some(socket(7, 1, 1)),
            yes
        ),
        None,
        "in back-off"
    );
    assert_eq!(
        r.on_look(
            t0 + secs(9),
            counters(10_000, 5000),
            None,
            || Some(socket(7, 50, 0)),
            yes
        ),
        None,
        "more than probes in flight"
    );
    assert_eq!(
        r.on_look(
            t0 + secs(10),
            counters(10_000, 5000),
            None,
            collapsed,
            || false
        ),
        None,
        "unusable"
    );
    assert_eq!(
        r.on_look(t0 + secs(11), counters(10_100, 5100), None, collapsed, yes),
        Some(Replace::Refresh(7))
    );
    // A threshold of 20 segments or more is not collapsed.
    assert_eq!(
        r.on_look(
            t0 + secs(12),
            counters(10_100, 5100),
            None,
            || Some(socket(20, 1, 0)),
            yes
        ),
        None
    );
    // Off: never.
    let r = Refresh::new(IdleRefresh::Off, t0, counters(0, 0));
    assert!(!r.enabled());
}

/// The proxy's request is acted on at the next quiet look and dropped when data crosses the
/// path; `used` replaces a subflow that carried 256 KiB downlink since it came up.
#[test]
fn refresh_acts_on_the_proxys_request_and_on_used_subflows() {
    let t0 = Instant::from_millis(1_000_000);
    let fine = || Some(socket(300, 0, 0));
    let yes = || true;
    let mut r = Refresh::new(IdleRefresh::Collapsed, t0, counters(1000, 0));
    assert_eq!(
        r.on_look(t0 + secs(6), counters(1000, 0), Some(27), fine, yes),
        Some(Replace::Asked(27))
    );
    // Dropped by data crossing the path in the same look.
    let mut r = Refresh::new(IdleRefresh::Collapsed, t0, counters(0, 0));
    assert_eq!(
        r.on_look(t0 + secs(6), counters(0, 8000), Some(27), fine, yes),
        None
    );
    assert_eq!(
        r.on_look(t0 + secs(7), counters(0, 8000), None, fine, yes),
        None
    );
    // Kept while the subflow is too young, acted on once it is old enough.
    let mut r = Refresh::new(IdleRefresh::Collapsed, t0, counters(0, 0));
    assert_eq!(
        r.on_look(t0 + secs(1), counters(0, 0), Some(30), fine, yes),
        None
    );
    assert_eq!(
        r.on_look(t0 + secs(5), counters(0, 0), None, fine, yes),
        Some(Replace::Asked(30))
    );
    // A collapsed threshold of its own takes precedence.
    let mut r = Refresh::new(IdleRefresh::Collapsed, t0, counters(0, 0));
    assert_eq!(
        r.on_look(
            t0 + secs(5),
            counters(0, 0),
            Some(30),
            || Some(socket(3, 0, 0)),
            yes
        ),
        Some(Replace::Refresh(3))
    );
    // Used: 256 KiB received since the subflow came up, then a quiet look.
    let mut r = Refresh::new(IdleRefresh::Used, t0, counters(1 << 20, 0));
    let used = (1 << 20) + (256 << 10);
    assert_eq!(
        r.on_look(t0 + secs(5), counters(used, 0), None, fine, yes),
        None
    );
    assert_eq!(
        r.on_look(t0 + secs(6), counters(used, 0), None, fine, yes),
        Some(Replace::Used(256 << 10))
    );
    let mut r = Refresh::new(IdleRefresh::Collapsed, t0, counters(1 << 20, 0));
    assert_eq!(
        r.on_look(t0 + secs(5), counters(used, 0), None, fine, yes),
        None
    );
    assert_eq!(
        r.on_look(t0 + secs(6), counters(used, 0), None, fine, yes),
        None,
        "collapsed only"
    );
}

/// Back-off: a socket in RTO back-off with data unacknowledged for 500 ms while frames from
/// the proxy keep arriving is replaced; a failed probe waits for more frames; leaving
/// back-off starts afresh.
#[test]
fn a_subflow_in_back_off_on_a_working_path_is_replaced() {
    let t0 = Instant::from_millis(1_000_000);
    let mut w = BackoffWatch::default();
    let off = Some(socket(10, 5, 3));
    assert_eq!(w.on_look(t0, 10, off, false), None, "first seen");
    assert_eq!(
        w.on_look(t0 + ms(250), 12, off, false),
        None,
        "not yet 500 ms"
    );
    assert_eq!(
        w.on_look(t0 + ms(500), 10, off, false),
        None,
        "no frames since"
    );
    assert_eq!(
        w.on_look(t0 + ms(500), 11, off, true),
        None,
        "a probe under way"
    );
    assert_eq!(w.on_look(t0 + ms(500), 11, None, false), None, "unreadable");
    assert_eq!(w.on_look(t0 + ms(500), 11, off, false), Some(3));
    w.probe_failed(t0 + ms(1500), 11);
    assert_eq!(w.on_look(t0 + ms(1750), 15, off, false), None);
    assert_eq!(
        w.on_look(t0 + ms(2000), 11, off, false),
        None,
        "no new frames"
    );
    assert_eq!(w.on_look(t0 + ms(2000), 12, off, false), Some(3));
    // Out of back-off (or nothing unacknowledged): from scratch.
    assert_eq!(
        w.on_look(t0 + ms(2250), 20, Some(socket(10, 5, 0)), false),
        None
    );
    assert_eq!(w.on_look(t0 + ms(2500), 30, off, false), None);
    assert_eq!(
        w.on_look(t0 + ms(2750), 40, Some(socket(10, 0, 3)), false),
        None
    );
    assert_eq!(w.on_look(t0 + ms(3000), 50, off, false), None);
    assert_eq!(w.on_look(t0 + ms(3500), 51, off, false), Some(3));
}

/// Renewal: at the first quiet look after the reload, or after 5 minutes of traffic; failing
/// credentials are told once per reload and looked at less and less often (up to a minute);
/// a new reload starts afresh.
#[test]
fn renewal_waits_for_a_quiet_look_and_backs_off_on_failure() {
    let t0 = Instant::from_millis(1_000_000);
    let yes = || true;
    let mut r = Renewal::new(t0, 2, counters(0, 0));
    assert_eq!(r.wait(), secs(1));
    // Busy for five minutes, then due anyway.
    let mut busy = 0;
    for s in 1..300 {
        busy += 10_000;
        assert!(
            !r.on_look(t0 + secs(s), 2, counters(busy, 0), yes, false),
            "{s}"
        );
    }
    busy += 10_000;
    assert!(r.on_look(t0 + secs(300), 2, counters(busy, 0), yes, false));
    // Quiet, but unusable or probing: not now.
    let mut r = Renewal::new(t0, 2, counters(0, 0));
    assert!(!r.on_look(t0 + secs(1), 2, counters(0, 0), || false, false));
    assert!(!r.on_look(t0 + secs(2), 2, counters(0, 0), yes, true));
    assert!(r.on_look(t0 + secs(3), 2, counters(100, 100), yes, false));
    // Failures: told once for credentials, the pause doubles up to a minute.
    assert!(!r.probe_failed(false));
    assert_eq!(r.wait(), secs(2));
    assert!(r.probe_failed(true));
    assert!(!r.probe_failed(true), "told once");
    let waits: Vec<u64> = (0..5)
        .map(|_| {
            r.probe_failed(true);
            r.wait().as_millis() / 1000
        })
        .collect();
    assert_eq!(waits, [16, 32, 60, 60, 60]);
    // Reloaded again: the pause and the telling start afresh.
    assert!(r.on_look(t0 + secs(400), 3, counters(100, 100), yes, false));
    assert_eq!(r.wait(), secs(1));
    assert!(r.probe_failed(true));
}
