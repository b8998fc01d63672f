//! Checked test traffic: a server and a client that move deterministic byte patterns and
//! verify every byte, for end-to-end tests and benchmarks.
//!
//! Protocol: the client sends 16 bytes (download length, upload length; big-endian u64), then
//! the upload; the server checks the upload, sends the download and closes. Upload bytes of a
//! transfer of `n` bytes follow [`Pattern::new(n)`], download bytes `Pattern::new(n + 1)`.

use std::io;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A deterministic byte stream (xorshift64), generated and checked incrementally.
#[derive(Clone, Debug)]
pub struct Pattern {
    x: u64,
}

impl Pattern {
    /// The stream for `seed`.
    pub fn new(seed: u64) -> Pattern {
        Pattern {
            x: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        }
    }
    /// Fill `buf` with the next bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.next_byte();
        }
    }
    fn next_byte(&mut self) -> u8 {
        self.x ^= self.x << 13;
        self.x ^= self.x >> 7;
        self.x ^= self.x << 17;
        self.x as u8
    }
    /// Check that `buf` holds the next bytes; returns the index of the first wrong byte.
    pub fn check(&mut self, buf: &[u8]) -> Result<(), usize> {
        for (i, b) in buf.iter().enumerate() {
            if *b != self.next_byte() {
                return Err(i);
            }
        }
        Ok(())
    }
}

const CHUNK: usize = 64 * 1024;

async fn send_pattern(s: &mut (impl AsyncWriteExt + Unpin), seed: u64, len: u64) -> io::Result<()> {
    let mut p = Pattern::new(seed);
    let mut buf = vec![0u8; CHUNK];
    let mut left = len;
    while left > 0 {
        let n = (left as usize).min(CHUNK);
        p.fill(&mut buf[..n]);
        s.write_all(&buf[..n]).await?;
        left -= n as u64;
    }
    Ok(())
}

async fn recv_pattern(
    s: &mut (impl AsyncReadExt + Unpin),
    seed: u64,
    len: u64,
    first_byte: &mut Option<Instant>,
) -> io::Result<()> {
    let mut p = Pattern::new(seed);
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0u64;
    while got < len {
        let want = ((len - got) as usize).min(CHUNK);
        let n = s.read(&mut buf[..want]).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("stream ended after {got} of {len} bytes"),
            ));
        }
        if first_byte.is_none() {
            *first_byte = Some(Instant::now());
        }
        if let Err(i) = p.check(&buf[..n]) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("byte {} of {len} differs", got + i as u64),
            ));
        }
        got += n as u64;
    }
    Ok(())
}

/// Serve one client connection.
pub async fn handle(mut s: TcpStream) -> io::Result<()> {
    let _ = s.set_nodelay(true);
    let mut hdr = [0u8; 16];
    s.read_exact(&mut hdr).await?;
    let down = u64::from_be_bytes(hdr[..8].try_into().expect("8 bytes"));
    let up = u64::from_be_bytes(hdr[8..].try_into().expect("8 bytes"));
    recv_pattern(&mut s, up, up, &mut None).await?;
    send_pattern(&mut s, down + 1, down).await?;
    s.shutdown().await?;
    // Wait for the client to close, so its last bytes are not answered with RST.
    let mut sink = [0u8; 1];
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read(&mut sink)).await;
    Ok(())
}

/// Accept and serve connections forever.
pub async fn serve(l: TcpListener) {
    loop {
        if let Ok((s, _)) = l.accept().await {
            tokio::spawn(async move {
                if let Err(e) = handle(s).await {
                    tracing::warn!(error = %e, "loadgen server: transfer failed");
                }
            });
        }
    }
}

/// Timing of one checked transfer.
#[derive(Clone, Copy, Debug)]
pub struct Transfer {
    /// Upload bytes.
    pub up: u64,
    /// Download bytes.
    pub down: u64,
    /// From request start to the first downloaded byte.
    pub first_byte: Duration,
    /// From request start to the last downloaded byte (flow completion time).
    pub complete: Duration,
}

/// Run one transfer over a connected stream, verifying every byte in both directions.
pub async fn transfer(mut s: TcpStream, up: u64, down: u64) -> io::Result<Transfer> {
    let start = Instant::now();
    let _ = s.set_nodelay(true);
    let mut hdr = [0u8; 16];
    hdr[..8].copy_from_slice(&down.to_be_bytes());
    hdr[8..].copy_from_slice(&up.to_be_bytes());
    s.write_all(&hdr).await?;
    let (mut r, mut w) = s.split();
    let mut first = None;
    let send = async {
        send_pattern(&mut w, up, up).await?;
        Ok::<(), io::Error>(())
    };
    let recv = recv_pattern(&mut r, down + 1, down, &mut first);
    tokio::try_join!(send, recv)?;
    let complete = start.elapsed();
    // The server closes after the download: nothing more may arrive.
    let mut extra = [0u8; 1];
    match tokio::time::timeout(Duration::from_secs(30), r.read(&mut extra)).await {
        Ok(Ok(0)) => {}
        Ok(Ok(_)) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bytes after the download",
            ))
        }
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no FIN after the download",
            ))
        }
    }
    Ok(Transfer {
        up,
        down,
        first_byte: first.map_or(complete, |f| f - start),
        complete,
    })
}
