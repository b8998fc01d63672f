use super::*;

fn proxy() -> Session {
    let mut s = Session::new(SessionConfig::new(Role::Proxy, 7, "minrtt")).unwrap();
    s.attach_path(Instant::ZERO, 0).unwrap();
    s
}

fn open(s: &mut Session, cseq: u64, flow: u64) {
    let f = Frame::OpenFlow {
        cseq,
        flow,
        user: IpAddr::from([10, 0, 0, 1]),
        dst: Destination::Addr(std::net::SocketAddr::from(([192, 0, 2, 1], 80))),
    };
    s.on_frame(Instant::ZERO, 0, f).unwrap();
}

/// A passenger's connection open for hours must not make the proxy remember every flow id
/// closed after it one by one.
#[test]
fn closed_ids_stay_few_behind_a_long_lived_flow() {
    let mut s = proxy();
    open(&mut s, 0, 1);
    for flow in 2..5_000 {
        open(&mut s, flow - 1, flow);
        s.forget_flow(Instant::ZERO, flow);
    }
    assert!(s.closed_above.is_empty(), "{}", s.closed_above.len());
    assert!(!s.is_closed(1), "flow 1 is open");
    assert!(s.is_closed(2) && s.is_closed(4_999));
    assert!(!s.is_closed(5_000), "not seen yet");
    s.forget_flow(Instant::ZERO, 1);
    assert!(s.is_closed(1));
}

/// A fresh proxy session meets a relay whose flow ids start high (it talked to an earlier
/// proxy session): the ids below are never seen, and what the proxy remembers stays bounded.
#[test]
fn closed_ids_stay_bounded_above_a_gap_that_never_fills() {
    let mut s = proxy();
    let base = 1_000_000;
    for i in 0..(MAX_CLOSED_ABOVE as u64 + 5_000) {
        open(&mut s, i, base + i);
        s.forget_flow(Instant::ZERO, base + i);
    }
    assert!(s.closed_above.len() <= MAX_CLOSED_ABOVE);
    assert!(s.is_closed(base) && s.is_closed(base + 20_000));
    assert!(s.is_closed(17), "ids below the skipped gap count as closed");
    assert!(!s.is_closed(base + 30_000), "not seen yet");
}

/// The relay reset a flow before its OpenFlow reached the proxy (the frames took different
/// paths): the late OpenFlow must not connect to the destination.
#[test]
fn a_reset_ahead_of_its_open_keeps_the_flow_from_connecting() {
    let mut s = proxy();
    let reset = Frame::Reset {
        cseq: 1,
        flow: 5,
        reason: ResetReason::PeerReset,
    };
    s.on_frame(Instant::ZERO, 0, reset).unwrap();
    open(&mut s, 0, 5);
    while let Some(e) = s.poll_event() {
        assert!(
            !matches!(e, Event::FlowRequested { .. }),
            "late open went through: {e:?}"
        );
    }
    assert_eq!(s.open_flows(), 0);
    // The next flow is unaffected.
    open(&mut s, 2, 6);
    assert!(matches!(
        s.poll_event(),
        Some(Event::FlowRequested { flow: 6, .. })
    ));
}

#[test]
fn ooo_fills_only_gaps() {
    let mut m = BTreeMap::new();
    insert_ooo(&mut m, 10, b"abcde"); // 10..15
    insert_ooo(&mut m, 20, b"uvw"); // 20..23
    insert_ooo(&mut m, 8, b"XXabcdefghijklmnoX"); // 8..26
    let joined: Vec<(u64, String)> = m
        .iter()
        .map(|(k, v)| (*k, String::from_utf8(v.clone()).unwrap()))
        .collect();
    assert_eq!(
        joined,
        vec![
            (8, "XX".into()),
            (10, "abcde".into()),
            (15, "fghij".into()),
            (20, "uvw".into()),
            (23, "noX".into())
        ]
    );
}
