//! Decode arbitrary bytes as a stream of frames; re-encoding a decoded frame must give back
//! the exact bytes it came from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use polycorn_proto::frame::decode;

fuzz_target!(|data: &[u8]| {
    let mut at = 0;
    while at < data.len() {
        match decode(&data[at..]) {
            Ok(Some((frame, n))) => {
                let again = frame.to_vec();
                // Close messages may be cut at a character boundary on encode only when longer
                // than the limit, which decode refuses; so the bytes match exactly.
                assert_eq!(&again[..], &data[at..at + n]);
                at += n;
            }
            Ok(None) | Err(_) => break,
        }
    }
});
