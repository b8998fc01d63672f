//! The frame decoder (`polycorn_proto::frame::decode`) on arbitrary bytes, read as a subflow
//! reads them: frame after frame until one is incomplete or refused.
//!
//! Checked for every decoded frame: encoding it gives back the bytes it came from (except a
//! Hello of version 1, which has no epoch field; encoding writes epoch 0), and decodes to an
//! equal frame; every proper prefix of it is "need more bytes"; a peer's Hello passes or fails
//! `Session::check_hello` without panicking. Errors must render (`Display`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use polycorn_proto::frame::{decode, HEADER_LEN};
use polycorn_proto::{Frame, Role, Session};

fuzz_target!(|data: &[u8]| {
    let mut at = 0;
    while at < data.len() {
        match decode(&data[at..]) {
            Ok(Some((frame, n))) => {
                assert!(n >= HEADER_LEN && at + n <= data.len(), "bad length {n}");
                let original = &data[at..at + n];
                let again = frame.to_vec();
                if again != original {
                    let short_hello = matches!(frame, Frame::Hello { .. }) && n == HEADER_LEN + 12;
                    assert!(
                        short_hello,
                        "re-encoding {frame:?} gave {again:02x?}, not {original:02x?}"
                    );
                }
                match decode(&again) {
                    Ok(Some((back, m))) => {
                        assert_eq!(m, again.len());
                        assert_eq!(back, frame, "decode(encode(frame)) differs");
                    }
                    other => panic!("re-encoded {frame:?} does not decode: {other:?}"),
                }
                for cut in [n - 1, HEADER_LEN, HEADER_LEN - 1, n / 2] {
                    if cut < n {
                        assert_eq!(
                            decode(&original[..cut]),
                            Ok(None),
                            "a {cut}-byte prefix of a {n}-byte frame is not incomplete"
                        );
                    }
                }
                if let Frame::Hello { .. } = frame {
                    for role in [Role::Relay, Role::Proxy] {
                        if let Err(e) = Session::check_hello(role, &frame) {
                            let _ = e.to_string();
                        }
                    }
                }
                at += n;
            }
            Ok(None) => break,
            Err(e) => {
                let _ = e.to_string();
                break;
            }
        }
    }
});
