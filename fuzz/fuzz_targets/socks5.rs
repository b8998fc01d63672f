//! The SOCKS5 server handshake (`polycorn_net::socks5::handshake`) against a client that sends
//! arbitrary bytes, over an in-memory stream polled by hand (no runtime, no socket).
//!
//! Input: one byte of stream behaviour, then what the client sends. Behaviour bits 0–2: the
//! largest read the stream returns at once (1 to 7 bytes, 0: everything); bit 3: every other
//! read is "not ready yet" first; bit 4: writes fail; bit 5: the stream fails (not EOF) once the
//! client's bytes are used up.
//!
//! Checked: no panic; the handshake finishes (never waits on a stream that is always ready); it
//! reads at most one greeting and one request (2 + 255 + 4 + 1 + 255 + 2 bytes); what it writes
//! is a method selection, then at most one reply; a domain target is a host name of 1 to 255
//! bytes (an IP literal becomes an address); errors render.
#![no_main]

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use libfuzzer_sys::fuzz_target;
use polycorn_net::socks5::{handshake, Reply, Target};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

struct Stream<'a> {
    input: &'a [u8],
    read: usize,
    chunk: usize,
    stall: bool,
    stalled: bool,
    fail_writes: bool,
    fail_at_end: bool,
    written: Vec<u8>,
}

impl AsyncRead for Stream<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.stall {
            self.stalled = !self.stalled;
            if self.stalled {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
        let left = &self.input[self.read..];
        if left.is_empty() && self.fail_at_end {
            return Poll::Ready(Err(io::Error::from(io::ErrorKind::ConnectionReset)));
        }
        let n = left.len().min(buf.remaining()).min(self.chunk);
        buf.put_slice(&left[..n]);
        self.read += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Stream<'_> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.fail_writes {
            return Poll::Ready(Err(io::Error::from(io::ErrorKind::BrokenPipe)));
        }
        self.written.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Longest greeting plus longest request.
const MAX_HANDSHAKE: usize = (2 + 255) + (4 + 1 + 255 + 2);

fuzz_target!(|data: &[u8]| {
    let Some((&how, input)) = data.split_first() else {
        return;
    };
    let chunk = match how & 7 {
        0 => usize::MAX,
        n => usize::from(n),
    };
    let mut s = Stream {
        input,
        read: 0,
        chunk,
        stall: how & 8 != 0,
        stalled: false,
        fail_writes: how & 16 != 0,
        fail_at_end: how & 32 != 0,
        written: Vec::new(),
    };
    let result = {
        let mut fut = std::pin::pin!(handshake(&mut s));
        let mut cx = Context::from_waker(Waker::noop());
        let mut polls = 0;
        loop {
            if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                break r;
            }
            polls += 1;
            assert!(
                polls < 100_000,
                "handshake never finishes on a ready stream"
            );
        }
    };
    assert!(s.read <= MAX_HANDSHAKE, "read {} bytes", s.read);
    if !s.fail_writes {
        // A method selection, then at most one reply.
        assert!(
            s.written.is_empty() || s.written.len() == 2 || s.written.len() == 2 + 10,
            "wrote {:02x?}",
            s.written
        );
        if s.written.len() == 12 {
            let failure = Reply::GeneralFailure.to_bytes();
            assert_eq!(s.written[2], 5);
            assert_eq!(
                &s.written[5..],
                &failure[3..],
                "a reply names no bound address"
            );
        }
    }
    match result {
        Ok(req) => {
            if !s.fail_writes {
                assert_eq!(
                    s.written,
                    [5, 0],
                    "success without exactly the method selection"
                );
            }
            match &req.target {
                Target::Name(n, _) => {
                    assert!(!n.is_empty() && n.len() <= 255, "name {n:?}");
                    assert!(
                        n.parse::<std::net::IpAddr>().is_err(),
                        "IP literal kept as name {n:?}"
                    );
                }
                Target::Addr(_) => {}
            }
            let _ = (req.target.to_string(), req.target.port());
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
