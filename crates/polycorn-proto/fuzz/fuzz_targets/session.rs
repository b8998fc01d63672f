//! Feed arbitrary frames to a session, as a hostile but authenticated peer would: errors are
//! fine, panics are not. The first byte picks the side: even, a proxy session fed by a relay;
//! odd, a relay session with three flows open, fed by a proxy. With its bit 1 set, both paths
//! go down after the eighth frame and the session is ended as the proxy ends a restarted
//! relay's earlier one (`end_if_all_paths_down`); the frames after that arrive on paths
//! attached again. With bit 2 set, the session announces a drain after the fourth frame (as a
//! stopping proxy does; a relay's session refuses to), and the peer's frames keep coming. With
//! bit 3 set, the session renews its epoch after the sixth frame (as a relay failing over to
//! another proxy does) and takes the next frames as coming from that peer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use polycorn_proto::frame::decode;
use polycorn_proto::{Destination, Role, Session, SessionConfig};
use polycorn_sched::predict::NoPrediction;
use polycorn_sched::time::Instant;

fuzz_target!(|data: &[u8]| {
    let Some((&side, data)) = data.split_first() else {
        return;
    };
    let role = if side % 2 == 0 {
        Role::Proxy
    } else {
        Role::Relay
    };
    let mut s = Session::new(SessionConfig::new(role, 1, "hrsch")).unwrap();
    let _ = s.attach_path(Instant::ZERO, 0);
    let _ = s.attach_path(Instant::ZERO, 1);
    if role == Role::Relay {
        for port in 1..=3 {
            let user = std::net::IpAddr::from([10, 0, 1, port as u8]);
            let dst = Destination::Addr(std::net::SocketAddr::from(([192, 0, 2, 1], port)));
            let flow = s.open_flow(Instant::ZERO, user, dst).unwrap();
            let _ = s.send(Instant::ZERO, flow, &[0u8; 3000]);
        }
    }
    let mut at = 0;
    let mut ms = 0;
    while at < data.len() {
        match decode(&data[at..]) {
            Ok(Some((frame, n))) => {
                ms += 1;
                let now = Instant::from_millis(ms);
                let _ = s.on_frame(now, (ms % 2) as u8, frame);
                if s.peer_closed() {
                    // The peer closed the session; the next frames come from a new one.
                    let ours = s.epoch();
                    let _ = s.on_peer_hello(now, ours, ms);
                }
                if side & 4 != 0 && ms == 4 {
                    let _ = s.announce_draining(now);
                }
                if side & 8 != 0 && ms == 6 {
                    let old = s.epoch();
                    let ours = s.renew_epoch(now);
                    // A subflow of the old epoch is turned away; the new one's answer is the
                    // first of its peer; a different peer epoch after it renews again (or, at a
                    // relay with a path up, waits).
                    let _ = s.on_peer_hello(now, old, 1_000 + ms);
                    let _ = s.on_peer_hello(now, ours, 1_000 + ms);
                    let _ = s.on_peer_hello(now, ours, 2_000 + ms);
                    // One behind the last: a relay's Hello from before its renewal, as the
                    // proxy sees it.
                    let _ = s.on_peer_hello(now, ours, 1_999 + ms);
                }
                if side & 2 != 0 && ms == 8 {
                    let _ = s.detach_path(now, 0);
                    let _ = s.detach_path(now, 1);
                    assert!(s.end_if_all_paths_down(now), "every path is detached");
                    assert_eq!(s.open_flows(), 0);
                    let _ = s.attach_path(now, 0);
                    let _ = s.attach_path(now, 1);
                }
                s.poll_transmit(now, &NoPrediction);
                while s.poll_event().is_some() {}
                let mut out = Vec::new();
                s.take_output(0, &mut out);
                s.take_output(1, &mut out);
                at += n;
            }
            Ok(None) | Err(_) => break,
        }
    }
});
