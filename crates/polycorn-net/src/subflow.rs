//! Subflow setup: the pinned TCP connection per path, TLS, and the Hello exchange.
//!
//! The relay opens every subflow (trains sit behind carrier NAT): a TCP socket bound to the
//! path's device and source address, `TCP_NOTSENT_LOWAT` so the kernel holds few unsent bytes
//! and polycorn decides late which path carries what, mutual TLS, then Hello both ways. The
//! proxy accepts, checks the client certificate (TLS) and the Hello, and answers.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use polycorn_proto::frame::decode;
use polycorn_proto::{CloseReason, Frame, PeerHello, ProtoError, Role, Session};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::engine::{SubflowInfo, TcpInfoFn};
use crate::sockopt;

/// Time allowed for TCP connect, TLS and Hello.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long each phase of a relay's subflow setup may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectTimeouts {
    /// TCP's handshake (until the proxy's SYN-ACK is in).
    pub tcp: Duration,
    /// TLS and the Hello exchange once TCP is up.
    pub handshake: Duration,
    /// While no TCP attempt has connected, start another one this often (`None`: a single
    /// attempt). A SYN lost in a blackout is retransmitted by the kernel only after 1 s, then
    /// 2 s, 4 s: without fresh attempts a path that is back waits out that timer. Each attempt
    /// lives at most [`STAGGERED_ATTEMPT`]; the first to connect wins and the others are closed
    /// before they send anything (only the winner goes on to TLS and the Hello).
    pub tcp_stagger: Option<Duration>,
}

/// How long each of several staggered TCP attempts may wait for its handshake.
pub const STAGGERED_ATTEMPT: Duration = Duration::from_millis(1500);
/// A staggered connect whose attempts the proxy's host refused (no process listens: it
/// restarts, or is gone) for this long gives up before its timeout, so the caller can look the
/// proxy's name up again, or fail over, sooner; a proxy restarting within it is still caught
/// by the next attempt.
pub const REFUSED_GIVE_UP: Duration = Duration::from_secs(2);

impl ConnectTimeouts {
    /// [`HANDSHAKE_TIMEOUT`] for each phase, one TCP attempt.
    pub const DEFAULT: ConnectTimeouts = ConnectTimeouts {
        tcp: HANDSHAKE_TIMEOUT,
        handshake: HANDSHAKE_TIMEOUT,
        tcp_stagger: None,
    };
}

/// Unsent bytes the kernel may hold per subflow (`TCP_NOTSENT_LOWAT`). Small, so decisions are
/// made close to the moment the path can send; large enough for full-rate bursts.
pub const NOTSENT_LOWAT: u32 = 128 * 1024;

/// Why a subflow could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// Socket-level failure (with what was being done).
    #[error("{what}: {source}")]
    Io {
        /// What failed.
        what: String,
        /// Cause.
        source: io::Error,
    },
    /// TCP, TLS or Hello took longer than [`HANDSHAKE_TIMEOUT`].
    #[error("{0} timed out")]
    Timeout(&'static str),
    /// The peer's Hello was wrong.
    #[error("{0}")]
    Proto(#[from] ProtoError),
    /// The peer closed the connection during the handshake.
    #[error("peer closed the connection during the handshake")]
    Closed,
    /// The proxy refused this relay's certificate as revoked (TLS alert `certificate_revoked`).
    #[error(
        "the proxy refuses this relay's certificate as revoked (its proxy.revoked_relays lists \
         this relay's name): ask its operator, or install a new certificate"
    )]
    Revoked,
    /// (relay) The proxy that answered is another one than the session's, which another path
    /// still reaches: the path waits rather than end what the working paths carry.
    #[error(
        "the proxy at {0} is another one than the one this relay's session is with, which other \
         paths still reach (its name now points elsewhere, or its IPv4 and IPv6 addresses lead \
         to different proxies): this path waits until no path reaches the session's proxy \
         (stop or drain that proxy to move the relay)"
    )]
    OtherProxy(SocketAddr),
    /// The proxy's host name did not resolve (and no earlier answer is known).
    #[error("resolve {host}: {reason}")]
    Resolve {
        /// `host:port` as configured.
        host: String,
        /// The resolver's answer.
        reason: String,
    },
    /// The local socket could not be set up (no such device, address not on this host, no
    /// permission): nothing was sent, and trying again changes nothing until the host does.
    #[error("{what}: {source}")]
    Setup {
        /// What failed.
        what: String,
        /// Cause.
        source: io::Error,
    },
}

impl HandshakeError {
    /// Whether the failure points at configuration or credentials rather than at coverage:
    /// the local socket could not be set up, TLS failed on a certificate or an alert, or the
    /// peer's Hello was wrong (another protocol version, another session). Such a failure
    /// repeats on every attempt until someone changes something.
    pub fn is_setup(&self) -> bool {
        match self {
            HandshakeError::Setup { .. } | HandshakeError::Proto(_) | HandshakeError::Revoked => {
                true
            }
            HandshakeError::Io { source, .. } => source.kind() == io::ErrorKind::InvalidData,
            // The resolver's queries may go over a path in a blackout.
            HandshakeError::Timeout(_)
            | HandshakeError::Closed
            | HandshakeError::Resolve { .. }
            | HandshakeError::OtherProxy(_) => false,
        }
    }

    /// Whether the proxy answered and refused this relay: its certificate revoked, a TLS
    /// failure on a certificate or an alert, or another protocol version. Unlike a missing
    /// device (which a modem coming back fixes), each such attempt costs the proxy a full
    /// handshake and repeats until an operator acts, so the relay retries it less often.
    pub fn refused_by_proxy(&self) -> bool {
        match self {
            HandshakeError::Revoked | HandshakeError::Proto(ProtoError::Version { .. }) => true,
            HandshakeError::Io { source, .. } => source.kind() == io::ErrorKind::InvalidData,
            _ => false,
        }
    }

    /// Whether the proxy's host refused the TCP connection (nothing listens on its port).
    pub fn is_refused(&self) -> bool {
        matches!(self, HandshakeError::Io { source, .. } if source.kind() == io::ErrorKind::ConnectionRefused)
    }

    /// Whether this is the proxy refusing a revoked relay in the TLS handshake
    /// ([`crate::tls::Revoked`]).
    pub fn is_revoked_refusal(&self) -> bool {
        matches!(self, HandshakeError::Io { source, .. } if crate::tls::is_revoked_refusal(source))
    }
}

/// A failure caused by the proxy's TLS alert `certificate_revoked` as [`HandshakeError::Revoked`].
fn revoked_alert(e: HandshakeError) -> HandshakeError {
    match e {
        HandshakeError::Io { source, .. } if crate::tls::is_revoked_alert(&source) => {
            HandshakeError::Revoked
        }
        e => e,
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> HandshakeError {
    let what = what.into();
    move |source| HandshakeError::Io { what, source }
}

fn setup_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> HandshakeError {
    let what = what.into();
    move |source| HandshakeError::Setup { what, source }
}

/// A `TCP_INFO` reader for `stream` (owns a duplicate of the socket descriptor).
pub fn tcp_info_reader(stream: &TcpStream) -> io::Result<TcpInfoFn> {
    let dup = socket2::SockRef::from(stream).try_clone()?;
    Ok(Box::new(move || {
        sockopt::tcp_info(dup.as_fd()).map(|raw| SubflowInfo {
            sample: raw.to_sample(),
            retransmissions: u64::from(raw.total_retrans),
            written_bytes: raw.written_bytes(),
            ssthresh: (raw.snd_ssthresh < sockopt::SSTHRESH_INFINITE).then_some(raw.snd_ssthresh),
        })
    }))
}

/// Configurable socket options of subflows (relay and proxy ends alike).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubflowSockopts {
    /// Congestion control (`None`: the system default).
    pub congestion: Option<String>,
    /// Upper bound on the retransmission timeout, ms (`TCP_RTO_MAX_MS`; `None`: the kernel's,
    /// 120 s unless `net.ipv4.tcp_rto_max_ms` says otherwise).
    pub rto_max_ms: Option<u32>,
    /// Largest IP packet of the path, bytes (a relay path's `mtu`; `None`: the interface's).
    /// Set before connecting ([`mss_for_mtu`]), so the SYN asks the peer for segments that fit
    /// too: one end's setting covers both directions.
    pub mtu: Option<u16>,
}

/// The TCP maximum segment size that fills an IP packet of `mtu` bytes to `peer` (IPv4 and
/// TCP headers 40 bytes, IPv6 60; TCP options are taken off by the kernel).
pub fn mss_for_mtu(mtu: u16, peer: SocketAddr) -> u32 {
    u32::from(mtu).saturating_sub(if peer.is_ipv6() { 60 } else { 40 })
}

/// Socket options every subflow gets: no Nagle, a small unsent queue, and `opts`.
pub fn tune(stream: &TcpStream, opts: &SubflowSockopts) -> io::Result<()> {
    stream.set_nodelay(true)?;
    sockopt::set_notsent_lowat(stream.as_fd(), NOTSENT_LOWAT)?;
    if let Some(cc) = &opts.congestion {
        sockopt::set_congestion(stream.as_fd(), cc)?;
    }
    if let Some(ms) = opts.rto_max_ms {
        sockopt::set_rto_max(stream.as_fd(), ms)?;
    }
    Ok(())
}

/// Connect a TCP socket to `proxy`, pinned to `device`/`source` when given, its segments
/// sized for `mtu` when given.
pub async fn connect_pinned(
    proxy: SocketAddr,
    source: Option<IpAddr>,
    device: Option<&str>,
    mtu: Option<u16>,
    timeout: Duration,
) -> Result<TcpStream, HandshakeError> {
    let sock = match (source, device) {
        (Some(src), Some(dev)) => sockopt::pinned_tcp_socket(src, dev)
            .map_err(setup_err(format!("pin socket to {dev} ({src})")))?,
        _ => {
            let s = socket2::Socket::new(
                socket2::Domain::for_address(proxy),
                socket2::Type::STREAM,
                Some(socket2::Protocol::TCP),
            )
            .map_err(setup_err("create socket"))?;
            if let Some(src) = source {
                s.bind(&SocketAddr::new(src, 0).into())
                    .map_err(setup_err(format!("bind {src}")))?;
            }
            if let Some(dev) = device {
                sockopt::bind_device(&s, dev)
                    .map_err(setup_err(format!("bind to device {dev}")))?;
            }
            s.set_nonblocking(true)
                .map_err(setup_err("set nonblocking"))?;
            s
        }
    };
    if let Some(mtu) = mtu {
        let mss = mss_for_mtu(mtu, proxy);
        sock.set_mss(mss)
            .map_err(setup_err(format!("set TCP_MAXSEG {mss} (mtu {mtu})")))?;
    }
    let std_stream: std::net::TcpStream = sock.into();
    let tsock = tokio::net::TcpSocket::from_std_stream(std_stream);
    match tokio::time::timeout(timeout, tsock.connect(proxy)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(HandshakeError::Io {
            what: format!("connect to {proxy}"),
            source: e,
        }),
        Err(_) => Err(HandshakeError::Timeout("TCP connect")),
    }
}

/// Connect like [`connect_pinned`], but while no attempt has connected start a new one every
/// `stagger` (each lives at most [`STAGGERED_ATTEMPT`], all within `timeout`); the first
/// connection wins and the other attempts are dropped. The error is the last attempt's, or a
/// timeout; an attempt refused once [`REFUSED_GIVE_UP`] has passed ends it at once.
pub async fn connect_staggered(
    proxy: SocketAddr,
    source: Option<IpAddr>,
    device: Option<&str>,
    mtu: Option<u16>,
    timeout: Duration,
    stagger: Duration,
) -> Result<TcpStream, HandshakeError> {
    let start = tokio::time::Instant::now();
    let deadline = start + timeout;
    let mut attempts = tokio::task::JoinSet::new();
    let mut next_at = start;
    let mut last_err = None;
    loop {
        let now = tokio::time::Instant::now();
        if now >= next_at && now < deadline {
            let device = device.map(str::to_string);
            let budget = STAGGERED_ATTEMPT.min(deadline - now);
            attempts.spawn(async move {
                connect_pinned(proxy, source, device.as_deref(), mtu, budget).await
            });
            next_at = now + stagger;
        }
        let wake = next_at.min(deadline);
        tokio::select! {
            Some(r) = attempts.join_next() => match r {
                Ok(Ok(s)) => return Ok(s),
                // Every further attempt would fail the same way.
                Ok(Err(e @ HandshakeError::Setup { .. })) => return Err(e),
                Ok(Err(e)) if e.is_refused() && start.elapsed() >= REFUSED_GIVE_UP => {
                    return Err(e)
                }
                Ok(Err(e)) => last_err = Some(e),
                Err(e) => {
                    last_err = Some(HandshakeError::Io {
                        what: format!("connect to {proxy}"),
                        source: io::Error::other(e),
                    })
                }
            },
            _ = tokio::time::sleep_until(wake) => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(last_err.unwrap_or(HandshakeError::Timeout("TCP connect")));
                }
            }
        }
    }
}

/// Read frames until the first one (which must be a Hello from the other role) is complete.
/// Returns what the Hello says and any bytes that followed it.
pub async fn read_hello<S: AsyncRead + Unpin>(
    stream: &mut S,
    our_role: Role,
) -> Result<(PeerHello, Vec<u8>), HandshakeError> {
    let mut buf = Vec::with_capacity(4096);
    loop {
        if let Some((frame, n)) = decode(&buf).map_err(ProtoError::from)? {
            let hello = Session::check_hello(our_role, &frame)?;
            return Ok((hello, buf[n..].to_vec()));
        }
        if buf.len() > 64 * 1024 {
            return Err(ProtoError::Hello("no Hello in the first 64 KiB".into()).into());
        }
        let n = stream
            .read_buf(&mut buf)
            .await
            .map_err(io_err("read Hello"))?;
        if n == 0 {
            return Err(HandshakeError::Closed);
        }
    }
}

/// A relay subflow, ready for [`crate::engine::Engine::run_subflow`].
pub struct Established {
    /// The TLS stream.
    pub stream: tokio_rustls::client::TlsStream<TcpStream>,
    /// Bytes read after the proxy's Hello.
    pub initial: Vec<u8>,
    /// This end's incarnation of the session, as its Hello carried it.
    pub epoch: u64,
    /// The proxy's incarnation of the session (from its Hello).
    pub peer_epoch: u64,
    /// `TCP_INFO` of the underlying socket.
    pub tcp_info: TcpInfoFn,
    /// The raw `TCP_INFO` of the underlying socket (congestion state for the relay's refresh).
    pub raw_info: RawInfoFn,
    /// The proxy's address.
    pub peer: SocketAddr,
    /// When the proxy's certificate stops being valid, seconds since 1970.
    pub peer_cert_not_after: Option<i64>,
}

/// Reads the raw `TCP_INFO` of a subflow's socket.
pub type RawInfoFn = Box<dyn Fn() -> io::Result<sockopt::TcpInfoRaw> + Send + Sync>;

/// A raw `TCP_INFO` reader for `stream` (owns a duplicate of the socket descriptor).
pub fn raw_info_reader(stream: &TcpStream) -> io::Result<RawInfoFn> {
    let dup = socket2::SockRef::from(stream).try_clone()?;
    Ok(Box::new(move || sockopt::tcp_info(dup.as_fd())))
}

impl std::fmt::Debug for Established {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Established").finish_non_exhaustive()
    }
}

/// Relay side: connect, TLS, Hello for `path` of `session` (`hello` is ours, encoded, of
/// epoch `epoch`); the proxy's Hello must name the same session and path.
#[allow(clippy::too_many_arguments)]
pub async fn relay_connect(
    tls: &TlsConnector,
    proxy: SocketAddr,
    source: Option<IpAddr>,
    device: Option<&str>,
    sockopts: &SubflowSockopts,
    hello: &[u8],
    (session, path, epoch): (u64, u8, u64),
    timeouts: ConnectTimeouts,
) -> Result<Established, HandshakeError> {
    let tcp = match timeouts.tcp_stagger {
        Some(every) => {
            connect_staggered(proxy, source, device, sockopts.mtu, timeouts.tcp, every).await?
        }
        None => connect_pinned(proxy, source, device, sockopts.mtu, timeouts.tcp).await?,
    };
    tune(&tcp, sockopts).map_err(io_err("set subflow socket options"))?;
    let tcp_info = tcp_info_reader(&tcp).map_err(io_err("duplicate socket"))?;
    let raw_info = raw_info_reader(&tcp).map_err(io_err("duplicate socket"))?;
    let fut = async {
        let mut s = tls
            .connect(crate::tls::proxy_server_name(), tcp)
            .await
            .map_err(io_err(format!("TLS handshake with {proxy}")))?;
        s.write_all(hello).await.map_err(io_err("send Hello"))?;
        s.flush().await.map_err(io_err("send Hello"))?;
        let (theirs, initial) = read_hello(&mut s, Role::Relay).await?;
        if (theirs.session, theirs.path) != (session, path) {
            return Err(ProtoError::Hello(format!(
                "proxy answered for session {:016x} path {} (asked for {session:016x} path {path})",
                theirs.session, theirs.path
            ))
            .into());
        }
        Ok::<_, HandshakeError>((s, initial, theirs.epoch))
    };
    let (stream, initial, peer_epoch) = tokio::time::timeout(timeouts.handshake, fut)
        .await
        .map_err(|_| HandshakeError::Timeout("TLS and Hello"))?
        .map_err(revoked_alert)?;
    let peer_cert_not_after = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(crate::tls::peer_not_after);
    Ok(Established {
        stream,
        initial,
        epoch,
        peer_epoch,
        tcp_info,
        raw_info,
        peer: proxy,
        peer_cert_not_after,
    })
}

/// Proxy side of an accepted subflow before it joins a session.
pub struct Accepted {
    /// The TLS stream.
    pub stream: tokio_rustls::server::TlsStream<TcpStream>,
    /// Session id from the Hello.
    pub session: u64,
    /// The relay's name: the common name of the certificate it presented
    /// ([`crate::tls::relay_name`]; `unnamed` if it has none).
    pub relay: String,
    /// Path from the Hello.
    pub path: u8,
    /// The relay's incarnation of the session (from its Hello).
    pub epoch: u64,
    /// The protocol version of the relay's Hello (the proxy answers in it).
    pub version: u16,
    /// The path's name from the relay's Hello (relays of protocol version 3 on).
    pub name: Option<String>,
    /// Bytes read after the Hello.
    pub initial: Vec<u8>,
    /// `TCP_INFO` of the underlying socket.
    pub tcp_info: TcpInfoFn,
    /// When the relay's certificate stops being valid, seconds since 1970.
    pub cert_not_after: Option<i64>,
}

impl std::fmt::Debug for Accepted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accepted")
            .field("session", &self.session)
            .field("relay", &self.relay)
            .field("path", &self.path)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Proxy side: TLS (client certificate required) and the relay's Hello. The caller answers
/// with its own Hello.
pub async fn proxy_accept(
    acceptor: &TlsAcceptor,
    tcp: TcpStream,
    sockopts: &SubflowSockopts,
) -> Result<Accepted, HandshakeError> {
    tune(&tcp, sockopts).map_err(io_err("set subflow socket options"))?;
    let tcp_info = tcp_info_reader(&tcp).map_err(io_err("duplicate socket"))?;
    let fut = async {
        let mut s = acceptor
            .accept(tcp)
            .await
            .map_err(io_err("TLS handshake (client certificate required)"))?;
        let (hello, initial) = read_hello(&mut s, Role::Proxy).await?;
        Ok::<_, HandshakeError>((s, hello, initial))
    };
    let (stream, hello, initial) = tokio::time::timeout(HANDSHAKE_TIMEOUT, fut)
        .await
        .map_err(|_| HandshakeError::Timeout("TLS and Hello"))??;
    let cert = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first());
    let relay = cert
        .and_then(crate::tls::relay_name)
        .unwrap_or_else(|| "unnamed".into());
    let cert_not_after = cert.and_then(crate::tls::peer_not_after);
    Ok(Accepted {
        stream,
        session: hello.session,
        relay,
        path: hello.path,
        epoch: hello.epoch,
        version: hello.version,
        name: hello.name,
        initial,
        tcp_info,
        cert_not_after,
    })
}

/// Write our Hello on an accepted stream.
pub async fn send_hello<S: AsyncWrite + Unpin>(s: &mut S, hello: &[u8]) -> io::Result<()> {
    s.write_all(hello).await?;
    s.flush().await
}

/// Ends a handshaken subflow that will not join the session as the engine ends any subflow
/// on purpose ([`crate::engine`]'s goodbye): a `Close` frame saying `message` (the peer drops
/// what its side of the Hello set up, as after any Close), TLS close_notify, then what the
/// peer still sends is read until it closes too.
pub async fn close_session<S: AsyncRead + AsyncWrite + Unpin>(s: S, message: &str) {
    let close = Frame::Close {
        reason: CloseReason::Shutdown,
        message: message.to_string(),
    }
    .to_vec();
    let (mut r, mut w) = tokio::io::split(s);
    crate::engine::goodbye(&mut r, &mut w, &close).await;
}

/// Shared TLS client/server handles.
pub fn connector(cfg: Arc<rustls::ClientConfig>) -> TlsConnector {
    TlsConnector::from(cfg)
}

/// TLS acceptor from a server config.
pub fn acceptor(cfg: Arc<rustls::ServerConfig>) -> TlsAcceptor {
    TlsAcceptor::from(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_segment_size_fills_the_mtu_for_either_family() {
        assert_eq!(mss_for_mtu(1400, "10.0.0.1:7700".parse().unwrap()), 1360);
        assert_eq!(
            mss_for_mtu(1400, "[2001:db8::1]:7700".parse().unwrap()),
            1340
        );
        assert_eq!(mss_for_mtu(1500, "10.0.0.1:7700".parse().unwrap()), 1460);
    }

    /// A socket that cannot be set up fails every attempt the same way: the staggered connect
    /// gives up at the first such failure instead of retrying until its deadline.
    #[tokio::test(start_paused = true)]
    async fn a_device_that_does_not_exist_fails_at_once_as_a_setup_error() {
        let t0 = tokio::time::Instant::now();
        let e = connect_staggered(
            "127.0.0.1:9".parse().unwrap(),
            Some("127.0.0.1".parse().unwrap()),
            Some("nosuchdev0"),
            None,
            Duration::from_secs(30),
            Duration::from_millis(250),
        )
        .await
        .expect_err("no such device");
        assert!(matches!(e, HandshakeError::Setup { .. }), "{e:?}");
        assert!(e.is_setup());
        assert!(e.to_string().contains("nosuchdev0"), "{e}");
        // Paused time only moves when every task waits: no retry ever slept.
        assert!(
            t0.elapsed() < Duration::from_millis(250),
            "{:?}",
            t0.elapsed()
        );
    }
}
