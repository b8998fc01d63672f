//! Frame encoding round trips, and the decoder on hostile input.

use std::net::{IpAddr, SocketAddr};

use polycorn_proto::frame::{decode, CellInfo, CloseReason, ContextInfo, MAX_PAYLOAD};
use polycorn_proto::{Destination, Frame, FrameError, OpenStatus, ResetReason, Role};
use proptest::prelude::*;

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(IpAddr::from),
        any::<[u8; 16]>().prop_map(IpAddr::from),
    ]
}

fn dst() -> impl Strategy<Value = Destination> {
    prop_oneof![
        (ip(), any::<u16>()).prop_map(|(i, p)| Destination::Addr(SocketAddr::new(i, p))),
        ("[a-z0-9][a-z0-9.-]{0,60}", any::<u16>()).prop_map(|(n, p)| Destination::Name(n, p)),
    ]
}

fn owned_frame() -> impl Strategy<Value = (u8, Vec<u8>, Frame<'static>)> {
    // (selector, data for Data frames, frame without data)
    let fin = any::<bool>();
    prop_oneof![
        (
            any::<u16>(),
            any::<bool>(),
            any::<u64>(),
            any::<u8>(),
            any::<u64>(),
            proptest::option::of("[A-Za-z0-9_.-]{1,32}")
        )
            .prop_map(|(v, r, s, p, e, n)| (
                0,
                vec![],
                Frame::Hello {
                    version: v,
                    role: if r { Role::Relay } else { Role::Proxy },
                    session: s,
                    path: p,
                    epoch: e,
                    name: n,
                }
            )),
        (any::<u64>(), any::<u64>(), ip(), dst()).prop_map(|(c, f, u, d)| (
            0,
            vec![],
            Frame::OpenFlow {
                cseq: c,
                flow: f,
                user: u,
                dst: d
            }
        )),
        (any::<u64>(), any::<u64>(), 0usize..6).prop_map(|(c, f, s)| (
            0,
            vec![],
            Frame::OpenResult {
                cseq: c,
                flow: f,
                status: [
                    OpenStatus::Ok,
                    OpenStatus::Refused,
                    OpenStatus::Unreachable,
                    OpenStatus::Denied,
                    OpenStatus::NameError,
                    OpenStatus::Failed
                ][s]
            }
        )),
        (
            any::<u64>(),
            0u64..(1 << 60),
            fin,
            prop::collection::vec(any::<u8>(), 0..3000)
        )
            .prop_map(|(f, o, fin, d)| (
                1,
                d,
                Frame::Data {
                    flow: f,
                    offset: o,
                    fin,
                    data: &[]
                }
            )),
        (any::<u64>(), any::<u64>(), 0usize..4).prop_map(|(c, f, r)| (
            0,
            vec![],
            Frame::Reset {
                cseq: c,
                flow: f,
                reason: [
                    ResetReason::PeerReset,
                    ResetReason::SessionLost,
                    ResetReason::Protocol,
                    ResetReason::Shutdown
                ][r]
            }
        )),
        (any::<u64>(), any::<u64>()).prop_map(|(f, n)| (
            0,
            vec![],
            Frame::Ack { flow: f, next: n }
        )),
        (any::<u64>(), any::<u64>()).prop_map(|(f, n)| (
            0,
            vec![],
            Frame::Credit { flow: f, limit: n }
        )),
        (
            any::<u64>(),
            -90.0f64..90.0,
            -180.0f64..180.0,
            0.0f32..120.0,
            0.0f32..360.0,
            prop::collection::vec(
                (
                    any::<u8>(),
                    any::<Option<u64>>(),
                    prop::option::of(-140.0f32..-40.0)
                ),
                0..8
            )
        )
            .prop_map(|(t, la, lo, sp, h, cells)| (
                0,
                vec![],
                Frame::Context(ContextInfo {
                    unix_ms: t,
                    lat: la,
                    lon: lo,
                    speed_mps: sp,
                    heading_deg: h,
                    cells: cells
                        .into_iter()
                        .map(|(p, c, r)| CellInfo {
                            path: p,
                            cell: c,
                            rsrp_dbm: r
                        })
                        .collect()
                })
            )),
        (any::<u32>(), any::<u64>()).prop_map(|(i, s)| (
            0,
            vec![],
            Frame::Ping { id: i, sent_us: s }
        )),
        (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(i, s, r)| (
            0,
            vec![],
            Frame::Pong {
                id: i,
                ping_sent_us: s,
                received_us: r
            }
        )),
        (any::<u8>(), any::<bool>()).prop_map(|(p, u)| (
            0,
            vec![],
            Frame::PathStatus { path: p, up: u }
        )),
        any::<u64>().prop_map(|n| (0, vec![], Frame::CtrlAck { next: n })),
        (any::<u8>(), any::<u32>()).prop_map(|(p, t)| (
            0,
            vec![],
            Frame::Refresh {
                path: p,
                ssthresh: t
            }
        )),
        ("[ -~]{0,200}", 0usize..4).prop_map(|(m, r)| (
            0,
            vec![],
            Frame::Close {
                reason: [
                    CloseReason::Shutdown,
                    CloseReason::Version,
                    CloseReason::Protocol,
                    CloseReason::Limit
                ][r],
                message: m
            }
        )),
    ]
}

fn with_data<'a>(f: &Frame<'static>, data: &'a [u8]) -> Frame<'a> {
    match f {
        Frame::Data {
            flow, offset, fin, ..
        } => Frame::Data {
            flow: *flow,
            offset: *offset,
            fin: *fin,
            data,
        },
        other => other.clone(),
    }
}

proptest! {
    #[test]
    fn round_trip(frames in prop::collection::vec(owned_frame(), 1..12)) {
        let mut wire = Vec::new();
        for (_, d, f) in &frames {
            with_data(f, d).encode(&mut wire);
        }
        let mut at = 0;
        for (_, d, f) in &frames {
            let (got, n) = decode(&wire[at..]).unwrap().expect("complete frame");
            prop_assert_eq!(got, with_data(f, d));
            at += n;
        }
        prop_assert_eq!(at, wire.len());
    }

    #[test]
    fn every_prefix_asks_for_more(frame in owned_frame()) {
        let (_, d, f) = frame;
        let wire = with_data(&f, &d).to_vec();
        for cut in 0..wire.len() {
            prop_assert_eq!(decode(&wire[..cut]), Ok(None));
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut at = 0;
        while at < bytes.len() {
            match decode(&bytes[at..]) {
                Ok(Some((_, n))) => at += n,
                Ok(None) | Err(_) => break,
            }
        }
    }

    #[test]
    fn corrupted_frames_decode_or_fail_cleanly(frame in owned_frame(), pos in any::<prop::sample::Index>(), val in any::<u8>()) {
        let (_, d, f) = frame;
        let mut wire = with_data(&f, &d).to_vec();
        let i = pos.index(wire.len());
        wire[i] = val;
        let _ = decode(&wire);
    }
}

#[test]
fn typed_errors() {
    assert_eq!(decode(&[0, 0, 0, 0, 0]), Err(FrameError::UnknownType(0)));
    assert_eq!(decode(&[99, 0, 0, 0, 0]), Err(FrameError::UnknownType(99)));
    let too_long = [4u8, 0xff, 0xff, 0xff, 0xff];
    assert!(matches!(
        decode(&too_long),
        Err(FrameError::TooLong {
            kind: 4,
            max: MAX_PAYLOAD,
            ..
        })
    ));
    // An Ack with a 3-byte payload: truncated inside `flow`.
    assert_eq!(
        decode(&[6, 0, 0, 0, 3, 1, 2, 3]),
        Err(FrameError::Truncated {
            kind: 6,
            field: "flow"
        })
    );
    // A PathStatus with an extra byte.
    assert_eq!(
        decode(&[11, 0, 0, 0, 3, 1, 1, 9]),
        Err(FrameError::Trailing { kind: 11, extra: 1 })
    );
    let e = decode(&[11, 0, 0, 0, 2, 1, 7]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "frame type 11: field `up` has invalid value 7"
    );
    // A NaN latitude.
    let mut ctx = Frame::Context(ContextInfo {
        unix_ms: 0,
        lat: 1.0,
        lon: 1.0,
        speed_mps: 0.0,
        heading_deg: 0.0,
        cells: vec![],
    })
    .to_vec();
    ctx[5 + 8..5 + 16].copy_from_slice(&f64::NAN.to_be_bytes());
    assert!(matches!(
        decode(&ctx),
        Err(FrameError::BadValue { field: "lat", .. })
    ));
    // A host name with a space.
    let mut open = Frame::OpenFlow {
        cseq: 0,
        flow: 1,
        user: IpAddr::from([10, 0, 0, 1]),
        dst: Destination::Name("ab".into(), 80),
    }
    .to_vec();
    let n = open.len();
    open[n - 3] = b' ';
    assert!(matches!(
        decode(&open),
        Err(FrameError::BadValue {
            field: "destination name",
            ..
        })
    ));
}

/// A relay of protocol 2 sends a Hello without a path name: it decodes with none, the session
/// accepts it and the proxy's answer is in version 2. A relay of protocol 3 names the path.
#[test]
fn a_version_2_hello_is_answered_in_version_2_and_a_version_3_one_names_its_path() {
    use polycorn_proto::{Session, SessionConfig, MIN_VERSION, VERSION};
    // type 1, length 20: version 2, role relay, session id 7, path 1, epoch 9.
    let mut v2 = vec![1u8, 0, 0, 0, 20, 0, 2, 1];
    v2.extend_from_slice(&7u64.to_be_bytes());
    v2.push(1);
    v2.extend_from_slice(&9u64.to_be_bytes());
    let (frame, n) = decode(&v2).unwrap().unwrap();
    assert_eq!(n, v2.len());
    let peer = Session::check_hello(Role::Proxy, &frame).unwrap();
    assert_eq!(
        (peer.version, peer.session, peer.path, peer.epoch, peer.name),
        (2, 7, 1, 9, None)
    );
    assert_eq!(MIN_VERSION, 2);
    let proxy = Session::new(SessionConfig::new(Role::Proxy, 7, "minrtt")).unwrap();
    let answer = proxy.answer_hello(peer.path, peer.version);
    assert!(matches!(
        answer,
        Frame::Hello {
            version: 2,
            role: Role::Proxy,
            session: 7,
            path: 1,
            name: None,
            ..
        }
    ));
    // Byte for byte what a version-2 peer decodes: no field after the epoch.
    assert_eq!(answer.to_vec().len(), v2.len());

    let relay = Session::new(SessionConfig::new(Role::Relay, 7, "minrtt")).unwrap();
    let named = relay.named_hello(1, "lte-b.2");
    let bytes = named.to_vec();
    assert_eq!(bytes.len(), v2.len() + 1 + "lte-b.2".len());
    let (back, _) = decode(&bytes).unwrap().unwrap();
    let peer = Session::check_hello(Role::Proxy, &back).unwrap();
    assert_eq!(
        (peer.version, peer.name.as_deref()),
        (VERSION, Some("lte-b.2"))
    );
    // A name the protocol cannot carry is left out rather than sent.
    assert!(matches!(
        relay.named_hello(1, "no spaces"),
        Frame::Hello { name: None, .. }
    ));
    // A version this build does not know is refused by version.
    let future = Frame::Hello {
        version: VERSION + 1,
        role: Role::Relay,
        session: 7,
        path: 0,
        epoch: 1,
        name: None,
    };
    assert!(matches!(
        Session::check_hello(Role::Proxy, &future),
        Err(polycorn_proto::ProtoError::Version { .. })
    ));
}

/// The proxy asks a relay of protocol 4 to refresh a path's subflow with a Refresh frame
/// queued on that path, never a relay of an older version (which could not decode it), and a
/// relay never sends one. The relay keeps the request until it takes it or a subflow attaches.
#[test]
fn the_proxy_asks_only_a_version_4_relay_to_refresh_a_path() {
    use polycorn_proto::{ProtoError, Session, SessionConfig, REFRESH_VERSION};
    let t0 = polycorn_sched::time::Instant::from_millis(0);
    let mut proxy = Session::new(SessionConfig::new(Role::Proxy, 7, "minrtt")).unwrap();
    proxy.attach_path(t0, 0).unwrap();
    proxy.attach_path(t0, 1).unwrap();
    let mut out = Vec::new();
    proxy.take_output(0, &mut out);
    proxy.take_output(1, &mut out);
    // Not told the relay's version, or told an older one: nothing is sent.
    assert_eq!(proxy.ask_refresh(t0, 1, 27), Ok(false));
    proxy.set_peer_version(1, 3);
    assert_eq!(proxy.ask_refresh(t0, 1, 27), Ok(false));
    // A path without a subflow: nothing either.
    proxy.set_peer_version(2, REFRESH_VERSION);
    assert_eq!(proxy.ask_refresh(t0, 2, 27), Ok(false));
    proxy.set_peer_version(1, REFRESH_VERSION);
    assert_eq!(proxy.ask_refresh(t0, 1, 27), Ok(true));
    out.clear();
    proxy.take_output(0, &mut out);
    assert!(out.is_empty(), "queued on path 0: {out:?}");
    proxy.take_output(1, &mut out);
    let mut rest = &out[..];
    let mut asked = None;
    while let Some((frame, n)) = decode(rest).unwrap() {
        if let Frame::Refresh { path, ssthresh } = frame {
            asked = Some((path, ssthresh));
        }
        rest = &rest[n..];
    }
    assert_eq!(asked, Some((1, 27)));

    let mut relay = Session::new(SessionConfig::new(Role::Relay, 7, "minrtt")).unwrap();
    assert!(matches!(
        relay.ask_refresh(t0, 1, 27),
        Err(ProtoError::WrongDirection(_))
    ));
    relay.attach_path(t0, 0).unwrap();
    relay.attach_path(t0, 1).unwrap();
    let ask = Frame::Refresh {
        path: 1,
        ssthresh: 27,
    };
    relay.on_frame(t0, 1, ask.clone()).unwrap();
    assert_eq!(relay.take_refresh_request(0), None);
    assert_eq!(relay.take_refresh_request(1), Some(27));
    assert_eq!(relay.take_refresh_request(1), None, "taken once");
    // A fresh subflow on the path answers the request.
    relay.on_frame(t0, 1, ask.clone()).unwrap();
    relay.attach_path(t0, 1).unwrap();
    assert_eq!(relay.take_refresh_request(1), None);
    // A proxy refuses one.
    assert!(matches!(
        proxy.on_frame(t0, 1, ask),
        Err(ProtoError::WrongDirection("Refresh"))
    ));
}

/// A path name the protocol does not carry (empty, too long, or with other characters than
/// `[A-Za-z0-9_.-]`), or one cut short, is refused naming the field.
#[test]
fn a_hello_with_a_bad_path_name_is_refused_naming_the_field() {
    let hello = |name: &[u8], claimed: u8| {
        let mut payload = vec![0u8, 3, 1];
        payload.extend_from_slice(&7u64.to_be_bytes());
        payload.push(0);
        payload.extend_from_slice(&9u64.to_be_bytes());
        payload.push(claimed);
        payload.extend_from_slice(name);
        let mut f = vec![1u8];
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(&payload);
        f
    };
    let ok = hello(b"A_1.x-y", 7);
    assert!(matches!(
        decode(&ok).unwrap().unwrap().0,
        Frame::Hello { name: Some(ref n), .. } if n == "A_1.x-y"
    ));
    for (name, claimed) in [
        (&b""[..], 0u8),
        (&[b'a'; 33][..], 33),
        (&b"a/b"[..], 3),
        (&b"a b"[..], 3),
        (&[0xC3, 0xA9][..], 2),
    ] {
        let err = decode(&hello(name, claimed)).unwrap_err();
        assert!(
            matches!(
                err,
                FrameError::BadValue {
                    field: "path name",
                    ..
                }
            ),
            "{name:?}: {err:?}"
        );
        assert!(err.to_string().contains("path name"), "{err}");
    }
    // The length says more bytes than the frame has.
    let err = decode(&hello(b"ab", 5)).unwrap_err();
    assert!(err.to_string().contains("path name"), "{err}");
}

/// A peer of the previous protocol version sends a Hello without the epoch: it decodes, and
/// the session refuses it by version (a clear error, not a truncated frame).
#[test]
fn a_version_1_hello_is_refused_by_version() {
    // type 1, length 12: version 1, role relay, session id 7, path 0.
    let mut v1 = vec![1u8, 0, 0, 0, 12, 0, 1, 1];
    v1.extend_from_slice(&7u64.to_be_bytes());
    v1.push(0);
    let (frame, n) = decode(&v1).unwrap().unwrap();
    assert_eq!(n, v1.len());
    assert!(matches!(
        frame,
        Frame::Hello {
            version: 1,
            epoch: 0,
            ..
        }
    ));
    let err = polycorn_proto::Session::check_hello(Role::Proxy, &frame).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "peer speaks protocol version 1, this build speaks {} and accepts peers of versions \
             2 to {}",
            polycorn_proto::VERSION,
            polycorn_proto::VERSION
        )
    );
}
