//! The soak's checked traffic: polycorn-net's loadgen protocol with a seed per connection
//! ([`Request::seeded`]), so bytes delivered to the wrong connection are caught too, and its
//! echo mode for idle connections that ping; the bytes in either direction are the request's
//! [`Pattern`]s, verified by the other side.

use polycorn_net::loadgen::{Pattern, Request};

use super::*;

/// SplitMix64: the workers' dice (connection seeds and sizes).
pub(super) fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The bytes of a connection with seed `seed` going `up` (passenger to server) or down: the
/// patterns of loadgen's seeded request, whose lengths do not change them.
pub(super) fn pattern(seed: u64, up: bool) -> Pattern {
    let req = Request::seeded(0, 0, seed);
    if up {
        req.upload()
    } else {
        req.download()
    }
}

/// The request: loadgen's, with the connection's seed.
pub(super) fn header(down: u64, up: u64, seed: u64) -> Vec<u8> {
    Request::seeded(down, up, seed).encode()
}

/// The server's side of one connection.
pub(super) fn serve(mut s: TcpStream) -> std::io::Result<()> {
    let req = Request::read_from(&mut s)?;
    let (down, up) = (req.down, req.up);
    if req.is_echo() {
        // Idle between pings for as long as the client likes (`--sample-secs`).
        s.set_read_timeout(None)?;
        let mut p = [0u8; 8];
        loop {
            match s.read_exact(&mut p) {
                Ok(()) => s.write_all(&p)?,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0u64;
    let mut upload = req.upload();
    while got < up {
        let n = s.read(&mut buf[..(up - got).min(64 * 1024) as usize])?;
        if n == 0 {
            return Ok(());
        }
        if upload.check(&buf[..n]).is_err() {
            // Close without an answer: the client reports the upload as corrupted.
            return Ok(());
        }
        got += n as u64;
    }
    let mut sent = 0u64;
    let mut download = req.download();
    while sent < down {
        let n = (down - sent).min(buf.len() as u64) as usize;
        download.fill(&mut buf[..n]);
        s.write_all(&buf[..n])?;
        sent += n as u64;
    }
    Ok(())
}

pub(super) fn start_server(ns: &str) -> Result<()> {
    let ns = ns.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _g = InNamespace::enter(&ns).expect("enter server namespace");
        let l = TcpListener::bind(("10.0.2.2", PORT)).expect("bind soak server");
        tx.send(()).ok();
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(CONN_TIMEOUT));
                let _ = serve(s);
            });
        }
    });
    rx.recv_timeout(Duration::from_secs(5))
        .context("soak server did not start")?;
    Ok(())
}
