//! Checked test traffic: a server and a client that move deterministic byte patterns and
//! verify every byte, for end-to-end tests and benchmarks.
//!
//! Protocol: the client sends a [`Request`]: 16 bytes (download length, upload length;
//! big-endian u64), or 24 with a per-connection seed (the upload length's top bit,
//! [`SEEDED`], set and the seed after it), then the upload; the server checks the upload,
//! sends the download and closes. Without a seed, upload bytes of a transfer of `n` bytes
//! follow [`Pattern::new(n)`], download bytes `Pattern::new(n + 1)`; with seed `s`, the
//! download follows `Pattern::new(s)` and the upload `Pattern::new(s ^ UP_SALT)`, so bytes
//! delivered to the wrong connection are caught too. A download length of [`ECHO`] asks for
//! an echo instead: the server sends back every 8-byte ping until the client closes.

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

/// The upload length's flag bit that says a seed follows.
pub const SEEDED: u64 = 1 << 63;
/// The download length that asks for an echo of 8-byte pings.
pub const ECHO: u64 = u64::MAX;
/// What a seeded upload's pattern seed differs from the download's by.
pub const UP_SALT: u64 = 0x5eed_0f0a_d0ad_0001;

/// A request: what the client sends before its upload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Download bytes ([`ECHO`]: an echo).
    pub down: u64,
    /// Upload bytes (less than [`SEEDED`]).
    pub up: u64,
    /// The connection's seed (None: the patterns follow the lengths).
    pub seed: Option<u64>,
}

impl Request {
    /// A request of these lengths without a seed (16 bytes).
    pub fn new(down: u64, up: u64) -> Request {
        Request {
            down,
            up,
            seed: None,
        }
    }

    /// A request of these lengths with the connection's seed (24 bytes).
    pub fn seeded(down: u64, up: u64, seed: u64) -> Request {
        Request {
            down,
            up,
            seed: Some(seed),
        }
    }

    /// Whether this asks for an echo of 8-byte pings.
    pub fn is_echo(&self) -> bool {
        self.down == ECHO
    }

    /// The request on the wire.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.down.to_be_bytes().to_vec();
        match self.seed {
            None => out.extend_from_slice(&self.up.to_be_bytes()),
            Some(seed) => {
                out.extend_from_slice(&(self.up | SEEDED).to_be_bytes());
                out.extend_from_slice(&seed.to_be_bytes());
            }
        }
        out
    }

    /// The request from its first 16 bytes, `head`, and, when they say a seed follows,
    /// `seed` to read its 8 bytes.
    pub fn decode(
        head: [u8; 16],
        seed: impl FnOnce() -> io::Result<[u8; 8]>,
    ) -> io::Result<Request> {
        let down = u64::from_be_bytes(head[..8].try_into().expect("8 bytes"));
        let up = u64::from_be_bytes(head[8..].try_into().expect("8 bytes"));
        Ok(if up & SEEDED == 0 {
            Request::new(down, up)
        } else {
            Request::seeded(down, up & !SEEDED, u64::from_be_bytes(seed()?))
        })
    }

    /// Reads a request from a blocking stream.
    pub fn read_from(r: &mut impl std::io::Read) -> io::Result<Request> {
        let mut head = [0u8; 16];
        r.read_exact(&mut head)?;
        Request::decode(head, || {
            let mut seed = [0u8; 8];
            r.read_exact(&mut seed)?;
            Ok(seed)
        })
    }

    async fn read_async(r: &mut (impl AsyncReadExt + Unpin)) -> io::Result<Request> {
        let mut head = [0u8; 16];
        r.read_exact(&mut head).await?;
        let mut req = Request::decode(head, || Ok([0; 8]))?;
        if req.seed.is_some() {
            let mut seed = [0u8; 8];
            r.read_exact(&mut seed).await?;
            req.seed = Some(u64::from_be_bytes(seed));
        }
        Ok(req)
    }

    /// The pattern of the upload.
    pub fn upload(&self) -> Pattern {
        Pattern::new(match self.seed {
            None => self.up,
            Some(seed) => seed ^ UP_SALT,
        })
    }

    /// The pattern of the download.
    pub fn download(&self) -> Pattern {
        match self.seed {
            None => Pattern::new(self.down.wrapping_add(1)),
            Some(seed) => Pattern::new(seed),
        }
    }
}

const CHUNK: usize = 64 * 1024;

async fn send_pattern(
    s: &mut (impl AsyncWriteExt + Unpin),
    mut p: Pattern,
    len: u64,
) -> io::Result<()> {
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
    mut p: Pattern,
    len: u64,
    first_byte: &mut Option<Instant>,
) -> io::Result<()> {
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
    let req = Request::read_async(&mut s).await?;
    if req.is_echo() {
        let mut ping = [0u8; 8];
        loop {
            match s.read_exact(&mut ping).await {
                Ok(_) => s.write_all(&ping).await?,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }
    recv_pattern(&mut s, req.upload(), req.up, &mut None).await?;
    send_pattern(&mut s, req.download(), req.down).await?;
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
pub async fn transfer(s: TcpStream, up: u64, down: u64) -> io::Result<Transfer> {
    transfer_request(s, Request::new(down, up)).await
}

/// Run the transfer `req` (not an echo) over a connected stream, verifying every byte in both
/// directions.
pub async fn transfer_request(mut s: TcpStream, req: Request) -> io::Result<Transfer> {
    let (up, down) = (req.up, req.down);
    let start = Instant::now();
    let _ = s.set_nodelay(true);
    s.write_all(&req.encode()).await?;
    let (mut r, mut w) = s.split();
    let mut first = None;
    let send = async {
        send_pattern(&mut w, req.upload(), up).await?;
        Ok::<(), io::Error>(())
    };
    let recv = recv_pattern(&mut r, req.download(), down, &mut first);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_back_as_written_with_and_without_a_seed() {
        for req in [
            Request::new(1000, 0),
            Request::new(0, 1 << 40),
            Request::seeded(5, 7, u64::MAX),
            Request::seeded(ECHO, 0, 3),
        ] {
            let wire = req.encode();
            assert_eq!(wire.len(), if req.seed.is_some() { 24 } else { 16 });
            let back = Request::read_from(&mut wire.as_slice()).unwrap();
            assert_eq!(back, req);
        }
        assert!(Request::seeded(ECHO, 0, 3).is_echo());
        assert!(!Request::new(1, 2).is_echo());
    }

    #[test]
    fn unseeded_patterns_follow_the_lengths_and_seeded_ones_the_seed() {
        let mut a = [0u8; 64];
        let mut b = [0u8; 64];
        Request::new(9, 4).upload().fill(&mut a);
        Pattern::new(4).fill(&mut b);
        assert_eq!(a, b);
        Request::new(9, 4).download().fill(&mut a);
        Pattern::new(10).fill(&mut b);
        assert_eq!(a, b);
        let req = Request::seeded(9, 4, 77);
        req.download().fill(&mut a);
        Pattern::new(77).fill(&mut b);
        assert_eq!(a, b);
        req.upload().fill(&mut a);
        assert_ne!(a, b);
        assert_eq!(Request::seeded(1, 2, 77).upload().check(&a), Ok(()));
    }

    #[tokio::test]
    async fn the_server_checks_seeded_transfers_and_echoes_pings() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(serve(l));
        let s = TcpStream::connect(addr).await.unwrap();
        let t = transfer_request(s, Request::seeded(100_000, 3_000, 42)).await;
        assert_eq!(t.unwrap().down, 100_000);
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&Request::seeded(ECHO, 0, 1).encode())
            .await
            .unwrap();
        for i in 0..3u64 {
            s.write_all(&i.to_be_bytes()).await.unwrap();
            let mut back = [0u8; 8];
            s.read_exact(&mut back).await.unwrap();
            assert_eq!(u64::from_be_bytes(back), i);
        }
    }
}
