//! The server side of SOCKS5 (RFC 1928), the relay's explicit alternative to transparent
//! interception: a passenger's app (or a browser's proxy setting) asks the relay to `CONNECT`
//! somewhere, and the relay carries the connection like an intercepted one.
//!
//! Supported: no authentication (method `0x00`), the `CONNECT` command, and IPv4, IPv6 and
//! domain-name targets. Anything else is refused with the RFC's reply and an error:
//!
//! | client sends | server answers | error |
//! |---|---|---|
//! | no `0x00` among its methods | method `0xFF` | [`Socks5Error::NoAcceptableMethod`] |
//! | `BIND` or `UDP ASSOCIATE` | reply `0x07` | [`Socks5Error::CommandNotSupported`] |
//! | an unknown address type | reply `0x08` | [`Socks5Error::AddressTypeNotSupported`] |
//! | an empty or non-hostname domain | reply `0x01` | [`Socks5Error::BadDomain`] |
//!
//! A domain that is an IP literal (`"192.0.2.1"`, `"::1"`) becomes [`Target::Addr`]; other
//! names stay [`Target::Name`] and are resolved by whoever makes the connection (on the
//! proxy, so DNS answers fit the server's side of the network).
//!
//! The caller bounds the time ([`handshake`] reads until the request is complete, so wrap it in
//! `tokio::time::timeout`); sizes are bounded by the protocol (at most 257 bytes of greeting
//! and 262 of request). After a successful handshake the caller connects and answers with
//! [`reply`]: [`Reply::Succeeded`] with the bound address, or the failure that fits
//! ([`Reply::for_connect_error`]).

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The protocol version byte.
pub const VERSION: u8 = 0x05;
/// Authentication method "no authentication required".
pub const METHOD_NO_AUTH: u8 = 0x00;
/// Method selection "no acceptable methods".
pub const METHOD_NONE_ACCEPTABLE: u8 = 0xFF;
/// Command `CONNECT`.
pub const CMD_CONNECT: u8 = 0x01;
/// Address type IPv4.
pub const ATYP_IPV4: u8 = 0x01;
/// Address type domain name.
pub const ATYP_DOMAIN: u8 = 0x03;
/// Address type IPv6.
pub const ATYP_IPV6: u8 = 0x04;

/// Where the client wants to connect.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// An IP address and port.
    Addr(SocketAddr),
    /// A host name (validated: ASCII letters, digits, `-`, `_`, `.`) and port.
    Name(String, u16),
}

impl Target {
    /// The target port.
    pub fn port(&self) -> u16 {
        match self {
            Target::Addr(a) => a.port(),
            Target::Name(_, p) => *p,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Addr(a) => write!(f, "{a}"),
            Target::Name(n, p) => write!(f, "{n}:{p}"),
        }
    }
}

/// A client's accepted `CONNECT` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Socks5Request {
    /// Where to connect.
    pub target: Target,
}

/// Why a handshake failed. Where the protocol has an answer for the failure, the client was
/// sent it before the error was returned.
#[derive(Debug, thiserror::Error)]
pub enum Socks5Error {
    /// The client closed the connection in the middle of a message.
    #[error("client closed the connection during the {stage}")]
    Truncated {
        /// Which message was incomplete.
        stage: &'static str,
    },
    /// Reading or writing failed.
    #[error("SOCKS5 {stage}: {source}")]
    Io {
        /// What was being read or written.
        stage: &'static str,
        /// Why.
        source: io::Error,
    },
    /// The version byte was not 5 (a SOCKS4 or non-SOCKS client).
    #[error("not SOCKS5: version byte {version:#04x} in the {stage}")]
    BadVersion {
        /// Which message.
        stage: &'static str,
        /// The byte received.
        version: u8,
    },
    /// The client offered no "no authentication" method; it was sent `0xFF`.
    #[error("client offers no acceptable authentication method (offered {offered:02x?}; only 0x00 is supported)")]
    NoAcceptableMethod {
        /// The methods offered.
        offered: Vec<u8>,
    },
    /// The command was not `CONNECT`; the client was sent reply `0x07`.
    #[error("SOCKS5 command {0:#04x} not supported (only CONNECT)")]
    CommandNotSupported(u8),
    /// The address type was unknown; the client was sent reply `0x08`.
    #[error("SOCKS5 address type {0:#04x} not supported")]
    AddressTypeNotSupported(u8),
    /// The domain name was empty or not a host name; the client was sent reply `0x01`.
    #[error("bad SOCKS5 domain name {name:?}: {reason}")]
    BadDomain {
        /// The name (lossily decoded).
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// The server's answer to a request (RFC 1928 §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Connected; the address the server bound for the connection.
    Succeeded(SocketAddr),
    /// `0x01` general SOCKS server failure.
    GeneralFailure,
    /// `0x02` connection not allowed by ruleset.
    NotAllowed,
    /// `0x03` network unreachable.
    NetworkUnreachable,
    /// `0x04` host unreachable.
    HostUnreachable,
    /// `0x05` connection refused.
    ConnectionRefused,
    /// `0x06` TTL expired.
    TtlExpired,
    /// `0x07` command not supported.
    CommandNotSupported,
    /// `0x08` address type not supported.
    AddressTypeNotSupported,
}

impl Reply {
    /// The reply's `REP` byte.
    pub fn code(&self) -> u8 {
        match self {
            Reply::Succeeded(_) => 0x00,
            Reply::GeneralFailure => 0x01,
            Reply::NotAllowed => 0x02,
            Reply::NetworkUnreachable => 0x03,
            Reply::HostUnreachable => 0x04,
            Reply::ConnectionRefused => 0x05,
            Reply::TtlExpired => 0x06,
            Reply::CommandNotSupported => 0x07,
            Reply::AddressTypeNotSupported => 0x08,
        }
    }

    /// The failure reply that describes a failed outgoing connect (refused, unreachable,
    /// timed out → host unreachable, anything else → general failure).
    pub fn for_connect_error(e: &io::Error) -> Reply {
        match e.kind() {
            io::ErrorKind::ConnectionRefused => Reply::ConnectionRefused,
            io::ErrorKind::NetworkUnreachable => Reply::NetworkUnreachable,
            io::ErrorKind::HostUnreachable | io::ErrorKind::TimedOut => Reply::HostUnreachable,
            io::ErrorKind::PermissionDenied => Reply::NotAllowed,
            _ => Reply::GeneralFailure,
        }
    }

    /// The reply on the wire: `VER REP RSV ATYP BND.ADDR BND.PORT` (failures bind
    /// `0.0.0.0:0`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let bound = match self {
            Reply::Succeeded(a) => *a,
            _ => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        };
        let mut out = Vec::with_capacity(22);
        out.extend_from_slice(&[VERSION, self.code(), 0x00]);
        match bound.ip() {
            IpAddr::V4(ip) => {
                out.push(ATYP_IPV4);
                out.extend_from_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                out.push(ATYP_IPV6);
                out.extend_from_slice(&ip.octets());
            }
        }
        out.extend_from_slice(&bound.port().to_be_bytes());
        out
    }
}

/// Send `reply` to the client and flush.
pub async fn reply<S>(stream: &mut S, reply: Reply) -> io::Result<()>
where
    S: AsyncWrite + Unpin,
{
    stream.write_all(&reply.to_bytes()).await?;
    stream.flush().await
}

async fn read_exact<S>(
    stream: &mut S,
    buf: &mut [u8],
    stage: &'static str,
) -> Result<(), Socks5Error>
where
    S: AsyncRead + Unpin,
{
    match stream.read_exact(buf).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(Socks5Error::Truncated { stage }),
        Err(source) => Err(Socks5Error::Io { stage, source }),
    }
}

async fn send<S>(stream: &mut S, bytes: &[u8], stage: &'static str) -> Result<(), Socks5Error>
where
    S: AsyncWrite + Unpin,
{
    let res = async {
        stream.write_all(bytes).await?;
        stream.flush().await
    };
    res.await
        .map_err(|source| Socks5Error::Io { stage, source })
}

/// Send a failure reply, then return `err` (a failed send is ignored: the error that matters
/// is the protocol one).
async fn refuse<S>(stream: &mut S, r: Reply, err: Socks5Error) -> Result<Socks5Request, Socks5Error>
where
    S: AsyncWrite + Unpin,
{
    let _ = reply(stream, r).await;
    Err(err)
}

/// Is `name` a plausible host name? ASCII letters, digits, `-` and `_`, in non-empty
/// dot-separated labels of at most 63 bytes; one trailing dot allowed.
fn check_hostname(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("empty");
    }
    let body = name.strip_suffix('.').unwrap_or(name);
    if body.is_empty() {
        return Err("no labels");
    }
    for label in body.split('.') {
        if label.is_empty() {
            return Err("empty label");
        }
        if label.len() > 63 {
            return Err("label longer than 63 bytes");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err("characters other than ASCII letters, digits, '-', '_' and '.'");
        }
    }
    Ok(())
}

/// Run the server side of the handshake: method negotiation (only "no authentication") and
/// one `CONNECT` request. On success the client waits for [`reply`].
///
/// Reads no more than the protocol's messages; never panics on garbage. Not time-limited:
/// wrap it in `tokio::time::timeout`.
pub async fn handshake<S>(stream: &mut S) -> Result<Socks5Request, Socks5Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // Greeting: VER NMETHODS METHODS[NMETHODS].
    let mut head = [0u8; 2];
    read_exact(stream, &mut head, "greeting").await?;
    if head[0] != VERSION {
        return Err(Socks5Error::BadVersion {
            stage: "greeting",
            version: head[0],
        });
    }
    let mut methods = vec![0u8; usize::from(head[1])];
    read_exact(stream, &mut methods, "greeting").await?;
    if !methods.contains(&METHOD_NO_AUTH) {
        let _ = send(
            stream,
            &[VERSION, METHOD_NONE_ACCEPTABLE],
            "method selection",
        )
        .await;
        return Err(Socks5Error::NoAcceptableMethod { offered: methods });
    }
    send(stream, &[VERSION, METHOD_NO_AUTH], "method selection").await?;

    // Request: VER CMD RSV ATYP DST.ADDR DST.PORT.
    let mut req = [0u8; 4];
    read_exact(stream, &mut req, "request").await?;
    let [version, cmd, _reserved, atyp] = req;
    if version != VERSION {
        let err = Socks5Error::BadVersion {
            stage: "request",
            version,
        };
        return refuse(stream, Reply::GeneralFailure, err).await;
    }
    if cmd != CMD_CONNECT {
        let err = Socks5Error::CommandNotSupported(cmd);
        return refuse(stream, Reply::CommandNotSupported, err).await;
    }
    let target = match atyp {
        ATYP_IPV4 => {
            let mut b = [0u8; 6];
            read_exact(stream, &mut b, "request address").await?;
            let ip = Ipv4Addr::new(b[0], b[1], b[2], b[3]);
            Target::Addr(SocketAddr::new(ip.into(), u16::from_be_bytes([b[4], b[5]])))
        }
        ATYP_IPV6 => {
            let mut b = [0u8; 18];
            read_exact(stream, &mut b, "request address").await?;
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&b[..16]);
            let ip = Ipv6Addr::from(octets);
            Target::Addr(SocketAddr::new(
                ip.into(),
                u16::from_be_bytes([b[16], b[17]]),
            ))
        }
        ATYP_DOMAIN => {
            let mut len = [0u8; 1];
            read_exact(stream, &mut len, "request address").await?;
            // The length byte bounds the name at 255 bytes.
            let mut b = vec![0u8; usize::from(len[0]) + 2];
            read_exact(stream, &mut b, "request address").await?;
            let port = u16::from_be_bytes([b[b.len() - 2], b[b.len() - 1]]);
            b.truncate(b.len() - 2);
            let name = match String::from_utf8(b) {
                Ok(n) => n,
                Err(e) => {
                    let err = Socks5Error::BadDomain {
                        name: String::from_utf8_lossy(e.as_bytes()).into_owned(),
                        reason: "not UTF-8",
                    };
                    return refuse(stream, Reply::GeneralFailure, err).await;
                }
            };
            if let Ok(ip) = name.parse::<IpAddr>() {
                Target::Addr(SocketAddr::new(ip, port))
            } else if let Err(reason) = check_hostname(&name) {
                let err = Socks5Error::BadDomain { name, reason };
                return refuse(stream, Reply::GeneralFailure, err).await;
            } else {
                Target::Name(name, port)
            }
        }
        other => {
            let err = Socks5Error::AddressTypeNotSupported(other);
            return refuse(stream, Reply::AddressTypeNotSupported, err).await;
        }
    };
    Ok(Socks5Request { target })
}

/// Reply code for a SOCKS5 client from the proxy's answer to its flow's open.
pub fn status_reply(status: polycorn_proto::OpenStatus) -> Reply {
    use polycorn_proto::OpenStatus;
    match status {
        OpenStatus::Ok => Reply::Succeeded(SocketAddr::from(([0, 0, 0, 0], 0))),
        OpenStatus::Refused => Reply::ConnectionRefused,
        OpenStatus::Unreachable => Reply::HostUnreachable,
        OpenStatus::Denied => Reply::NotAllowed,
        OpenStatus::NameError => Reply::HostUnreachable,
        OpenStatus::Failed => Reply::GeneralFailure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostnames() {
        for ok in ["example.com", "a", "x-y_z.example.", "123.example"] {
            assert!(check_hostname(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "a..b", ".a", "a b", "é.com", &"a".repeat(64)] {
            assert!(check_hostname(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reply_bytes() {
        assert_eq!(
            Reply::ConnectionRefused.to_bytes(),
            [5, 5, 0, 1, 0, 0, 0, 0, 0, 0]
        );
        let v6: SocketAddr = "[2001:db8::1]:443".parse().unwrap();
        let b = Reply::Succeeded(v6).to_bytes();
        assert_eq!(&b[..4], &[5, 0, 0, 4]);
        assert_eq!(b.len(), 22);
        assert_eq!(&b[20..], &443u16.to_be_bytes());
    }
}
