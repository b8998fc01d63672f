//! Feed arbitrary frames to a proxy session, as a hostile but authenticated relay would:
//! errors are fine, panics are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use polycorn_proto::frame::decode;
use polycorn_proto::{Role, Session, SessionConfig};
use polycorn_sched::predict::NoPrediction;
use polycorn_sched::time::Instant;

fuzz_target!(|data: &[u8]| {
    let mut s = Session::new(SessionConfig::new(Role::Proxy, 1, "hrsch")).unwrap();
    let _ = s.attach_path(Instant::ZERO, 0);
    let _ = s.attach_path(Instant::ZERO, 1);
    let mut at = 0;
    let mut ms = 0;
    while at < data.len() {
        match decode(&data[at..]) {
            Ok(Some((frame, n))) => {
                ms += 1;
                let now = Instant::from_millis(ms);
                let _ = s.on_frame(now, (ms % 2) as u8, frame);
                s.poll_transmit(now, &NoPrediction);
                while s.poll_event().is_some() {}
                at += n;
            }
            Ok(None) | Err(_) => break,
        }
    }
});
