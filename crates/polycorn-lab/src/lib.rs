//! polycorn's lab: the emulated testbed and everything run on it (bench, calibration, soak,
//! attacks, the relay/proxy bulk benchmark), synthetic trips, the comparison with real HSR
//! traces and the scripted scheduler demo. The `polycorn` binary parses the command line and
//! calls in here.

pub mod attack;
pub mod bench;
pub mod calibrate;
pub mod common;
pub mod demo;
pub mod harness;
pub mod netbench;
pub mod realdata;
pub mod soak;
pub mod testbed_cmd;
pub mod tripgen;

/// The crate version and the commit the lab was built from (`polycorn --version`; recorded in
/// results so they name the code that produced them).
pub const VERSION: &str = match env!("POLYCORN_BUILD_COMMIT").len() {
    0 => env!("CARGO_PKG_VERSION"),
    _ => concat!(
        env!("CARGO_PKG_VERSION"),
        " (",
        env!("POLYCORN_BUILD_COMMIT"),
        ")"
    ),
};

/// `git describe --tags --always --dirty` of the checkout the lab was built from; empty for a
/// build outside a git checkout. Recorded in results as `meta.build`.
pub const BUILD: &str = env!("POLYCORN_BUILD_DESCRIBE");

/// Write `text` to stdout. A reader that closed the pipe early (`polycorn demo | head`) ends the
/// output quietly instead of a panic.
pub fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}
