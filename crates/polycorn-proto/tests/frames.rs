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
            any::<u64>()
        )
            .prop_map(|(v, r, s, p, e)| (
                0,
                vec![],
                Frame::Hello {
                    version: v,
                    role: if r { Role::Relay } else { Role::Proxy },
                    session: s,
                    path: p,
                    epoch: e,
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

/// A peer of the previous protocol version sends a Hello without the epoch: it decodes, and
/// the session refuses it by version (a clear error, not a truncated frame).
#[test]
fn a_version_1_hello_is_refused_by_version() {
    // type 1, length 12: version 1, role relay, session 7, path 0.
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
            "peer speaks protocol version 1, this build speaks {}",
            polycorn_proto::VERSION
        )
    );
}
