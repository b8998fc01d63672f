use super::*;

#[test]
fn the_pattern_is_checked_read_by_read() {
    let mut a = vec![0u8; 100];
    pattern(7, false).fill(&mut a);
    assert_eq!(pattern(7, false).check(&a), Ok(()));
    // In reads of any size: each continues where the last ended.
    let mut p = pattern(7, false);
    assert_eq!(p.check(&a[..30]), Ok(()));
    assert_eq!(p.check(&a[30..31]), Ok(()));
    assert_eq!(p.check(&a[31..]), Ok(()));
    // A different seed, a shifted stream or one flipped byte is caught where it is.
    assert_eq!(pattern(8, false).check(&a), Err(0));
    assert!(pattern(7, false).check(&a[1..50]).is_err());
    a[42] ^= 1;
    assert_eq!(pattern(7, false).check(&a), Err(42));
    let mut p = pattern(7, false);
    assert_eq!(p.check(&a[..40]), Ok(()));
    assert_eq!(p.check(&a[40..]), Err(2));
    // The upload's salt makes it a different pattern.
    let mut up = vec![0u8; 16];
    pattern(7, true).fill(&mut up);
    assert_ne!(&up[..], &a[..16]);
}

#[test]
fn sizes_follow_their_weights() {
    let mut n = BTreeMap::new();
    for k in 0..10_000u64 {
        *n.entry(pick(&DOWN_SIZES, splitmix(k))).or_insert(0u32) += 1;
    }
    // 50 / 30 / 15 / 5 %, within 2 points.
    for (size, w) in DOWN_SIZES {
        let share = f64::from(n[&size]) / 100.0;
        assert!((share - w as f64).abs() < 2.0, "{size}: {share}% for {w}%");
    }
}

#[test]
fn cell_loss_delays_are_summarised_from_the_histogram() {
    // Buckets 0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 3, 5, 10, +Inf (cumulative).
    let counts = [0.0, 1.0, 4.0, 8.0, 9.0, 9.0, 10.0, 10.0, 10.0, 10.0, 10.0];
    assert_eq!(
        loss_delay_summary(&counts, 8.0).unwrap(),
        "10 cell losses reported by the modem monitor, each path silent by then for 0.80 s \
         on average (median at most 1 s, p90 at most 1.25 s; 80% within 1 s)"
    );
    assert_eq!(loss_delay_summary(&[0.0; LOSS_BUCKETS], 0.0), None);
}

#[test]
fn judge_names_every_leak_and_miscount() {
    let before = Reading {
        rss_mib: 10.0,
        fds: 20,
        threads: 3,
        flows_open: 0.0,
        flows_total: 5.0,
        reconnects: 0.0,
        loss_delay: Default::default(),
    };
    let clean = Reading {
        fds: 20 + FD_SLACK,
        flows_total: 105.0,
        ..before
    };
    let d = |who, after: Reading| (who, before, after, after.flows_total - before.flows_total);
    assert!(judge(100, 0, 0, &[], &[d("relay", clean)], false).is_empty());
    let leaky = Reading {
        fds: 21 + FD_SLACK,
        flows_open: 2.0,
        flows_total: 104.0,
        ..before
    };
    let p = judge(
        100,
        1,
        0,
        &["connect: 1 (first: refused)".into()],
        &[d("relay", clean), d("proxy", leaky)],
        false,
    );
    assert_eq!(p.len(), 4, "{p:?}");
    assert!(
        p[0].contains("1 of 100 connections") && p[0].contains("refused"),
        "{p:?}"
    );
    assert!(p[1].contains("proxy counted 99"), "{p:?}");
    assert!(p[2].contains("2 flows open"), "{p:?}");
    assert!(
        p[3].contains(&format!("{} file descriptors", 21 + FD_SLACK)),
        "{p:?}"
    );
    // A metric the daemon did not report (NaN) never passes for a match.
    let silent = Reading {
        flows_open: f64::NAN,
        flows_total: f64::NAN,
        ..before
    };
    assert_eq!(judge(1, 0, 0, &[], &[d("relay", silent)], false).len(), 2);
    assert_eq!(judge(1, 0, 0, &[], &[d("relay", silent)], true).len(), 2);
    // Restarted: a killed run's last flows go uncounted, so fewer pass; more never do.
    assert!(judge(100, 0, 0, &[], &[d("proxy", leaky)], true).len() == 2);
    let more = Reading {
        flows_total: 106.0,
        ..clean
    };
    let p = judge(100, 0, 0, &[], &[d("proxy", more)], true);
    assert!(p.len() == 1 && p[0].contains("proxy counted 101"), "{p:?}");
}

fn failure(start: f64, end: f64, kind: &'static str) -> Failure {
    Failure {
        start,
        end,
        kind,
        msg: String::new(),
    }
}

#[test]
fn a_restart_excuses_only_what_it_may_do_to_a_connection() {
    let stop = Restart {
        who: "proxy",
        killed: false,
        at: 10.0,
        back: Some(11.0),
        first_ok: None,
        held: false,
    };
    // Open across the restart, or opened up to RESTART_GRACE after it: cut, excused.
    assert!(stop.excuses(&failure(9.0, 10.2, "download")));
    assert!(stop.excuses(&failure(2.0, 15.0, "ping")));
    assert!(stop.excuses(&failure(10.5, 12.0, "connect")));
    assert!(stop.excuses(&failure(11.0 + RESTART_GRACE, 20.0, "upload")));
    // Over before the signal, or opened once the restart was long over: not this one's.
    assert!(!stop.excuses(&failure(5.0, 9.9, "download")));
    assert!(!stop.excuses(&failure(11.1 + RESTART_GRACE, 20.0, "download")));
    // Wrong data or a connection left hanging: never.
    for kind in NEVER_EXCUSED {
        assert!(!stop.excuses(&failure(9.0, 10.5, kind)), "{kind}");
    }
    // Not even after a crash.
    let crash = Restart {
        killed: true,
        ..stop.clone()
    };
    for kind in NEVER_EXCUSED {
        assert!(!crash.excuses(&failure(9.0, 10.5, kind)), "{kind}");
    }
    // A connection closed before its first byte: a cut like any other.
    assert!(crash.excuses(&failure(9.0, 10.5, "no answer")));
    // A restart that never got back excuses everything cut after its signal.
    let lost = Restart {
        back: None,
        ..stop.clone()
    };
    assert!(lost.excuses(&failure(500.0, 501.0, "connect")));
    // With the relay's listener held, a connection opened after the signal waits for the
    // next relay: it may not fail at all.
    let held = Restart {
        who: "relay",
        held: true,
        ..stop.clone()
    };
    assert!(held.excuses(&failure(9.0, 10.2, "download")));
    assert!(held.excuses(&failure(10.0 + HELD_SLACK, 10.5, "no answer")));
    assert!(!held.excuses(&failure(10.5, 12.0, "connect")));
    assert!(!held.excuses(&failure(10.2, 12.0, "download")));
}

#[test]
fn failures_are_sorted_into_restarts_and_the_rest() {
    let r = |at: f64| Restart {
        who: "relay",
        killed: false,
        at,
        back: Some(at + 1.0),
        first_ok: None,
        held: false,
    };
    let restarts = [r(10.0), r(30.0)];
    let failures = [
        failure(9.0, 10.1, "download"),
        failure(29.0, 30.5, "connect"),
        failure(29.5, 31.0, "ping"),
        failure(20.0, 20.1, "download"),
        failure(9.5, 10.5, "wrong byte"),
    ];
    let (left, cut) = sort_failures(&failures, &restarts);
    assert_eq!(
        cut,
        vec![
            vec![failures[0].clone()],
            vec![failures[1].clone(), failures[2].clone()]
        ]
    );
    assert_eq!(left, vec![failures[3].clone(), failures[4].clone()]);
    let kinds = error_kinds(&[
        failure(1.0, 2.0, "download"),
        Failure {
            msg: "second".into(),
            ..failure(3.0, 4.0, "download")
        },
    ]);
    assert_eq!(kinds, vec!["download: 2 (first: )".to_string()]);
}

#[test]
fn a_time_out_is_a_hung_connection() {
    use std::io::{Error, ErrorKind};
    let e = |k| Error::from(k);
    assert_eq!(
        io_kind("download", &e(ErrorKind::WouldBlock)),
        "download hung"
    );
    assert_eq!(io_kind("ping", &e(ErrorKind::TimedOut)), "ping hung");
    assert_eq!(io_kind("ping", &e(ErrorKind::UnexpectedEof)), "ping closed");
    assert_eq!(
        io_kind("download", &e(ErrorKind::ConnectionReset)),
        "download"
    );
    for k in ["upload", "download", "no close", "ping"] {
        let hung = io_kind(k, &e(ErrorKind::TimedOut));
        assert!(NEVER_EXCUSED.contains(&hung), "{k}: {hung}");
    }
}

#[test]
fn a_protocol_violation_in_a_log_fails_the_soak() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("relay.log");
    std::fs::write(&log, "INFO subflow up\nINFO relay running\n").unwrap();
    assert_eq!(protocol_violations("relay", &log).unwrap(), None);
    std::fs::write(
        &log,
        "INFO subflow up\nWARN subflow ended; reconnecting path=p0 error=protocol violation: \
         flow 7: data up to sequence 262145 exceeds the granted credit 262144\n\
         WARN subflow ended; reconnecting path=p1 error=protocol violation: x\n",
    )
    .unwrap();
    let p = protocol_violations("relay", &log).unwrap().unwrap();
    assert!(
        p.starts_with("relay logged 2 protocol violation(s)") && p.contains("flow 7: data"),
        "{p}"
    );
    assert!(protocol_violations("proxy", &dir.path().join("none.log")).is_err());
}

#[test]
fn drain_and_attack_settings_read_back_from_the_written_files() {
    let (mut relay, mut proxy) =
        crate::netbench::configs("polycorn", "hrsch", Some(crate::harness::METRICS_ADDR)).unwrap();
    let plain = relay.clone();
    soak_settings(&mut relay, &mut proxy, 0, false).unwrap();
    assert_eq!(relay, plain);
    soak_settings(&mut relay, &mut proxy, 7, true).unwrap();
    let relay = RelayConfig::from_toml(&relay.to_toml(), "relay").unwrap();
    let proxy = ProxyConfig::from_toml(&proxy.to_toml(), "proxy").unwrap();
    assert_eq!((relay.relay.drain_s, proxy.proxy.drain_s), (7, 7));
    assert_eq!(relay.limits, polycorn_net::config::Limits::default());
    let addr = |a: &str| Some(a.parse::<SocketAddr>().unwrap());
    assert_eq!(relay.dns.listen, addr(crate::attack::RELAY_DNS));
    assert_eq!(relay.dns.upstream, addr(crate::attack::SILENT_DNS));
    assert_eq!(relay.metrics, plain.metrics);
}
