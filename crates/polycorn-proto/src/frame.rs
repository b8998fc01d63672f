//! Wire frames: what relay and proxy say to each other over every subflow.
//!
//! A subflow is a byte stream (TCP, encrypted by TLS in the shell) carrying a sequence of
//! frames. Every frame is `type: u8`, `length: u32` (big endian, payload bytes) and the payload.
//! All integers are big endian. The first frame on a subflow is [`Frame::Hello`] in both
//! directions; it carries [`VERSION`]. Decoding never panics: any byte string yields a frame, a
//! request for more bytes, or a typed [`FrameError`].
//!
//! | type | frame | payload |
//! |---|---|---|
//! | 1 | Hello | version u16, role u8, session u64, path u8, epoch u64, optional: name length u8 and the path's name (version 3; a version-2 Hello ends after epoch, a version-1 Hello after path) |
//! | 2 | OpenFlow | cseq u64, flow u64, user addr, destination |
//! | 3 | OpenResult | cseq u64, flow u64, status u8 |
//! | 4 | Data | flow u64, offset u64, flags u8 (bit 0 = FIN), data |
//! | 5 | Reset | cseq u64, flow u64, reason u8 |
//! | 6 | Ack | flow u64, next expected sequence u64 |
//! | 7 | Credit | flow u64, sequence limit u64 |
//! | 8 | Context | unix ms u64, lat f64, lon f64, speed f32, heading f32, n u8, n × (path u8, flags u8, cell u64, rsrp f32) |
//! | 9 | Ping | id u32, sender clock µs u64 |
//! | 10 | Pong | id u32, ping's clock µs u64, receiver clock µs u64 |
//! | 11 | PathStatus | path u8, up u8 (path 255: the whole session, see [`SESSION_PATH`]) |
//! | 12 | CtrlAck | cseq u64 (every control frame below it was received) |
//! | 13 | Close | reason u8, message (UTF-8, ≤ 1024 bytes) |
//! | 14 | Refresh | path u8, ssthresh u32 (proxy to relay, version 4; see [`Frame::Refresh`]) |
//!
//! Addresses: `4` + 4 bytes or `6` + 16 bytes. Destinations: an address followed by a port
//! (u16), or `3`, a length byte, a host name (1–255 bytes of `[A-Za-z0-9.-]`) and a port.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use thiserror::Error;

/// Protocol version carried in [`Frame::Hello`].
///
/// Version 3 lets a relay's Hello carry the path's name (`[[path]] name`), which the proxy
/// then uses in its metrics and logs instead of the path's index. Version 4 adds
/// [`Frame::Refresh`], which the proxy sends only to relays of version 4 or later. A proxy
/// accepts relays of every version from [`MIN_VERSION`] on and answers each in its own
/// version; a relay needs a proxy of its version or newer (a proxy of version 2 cannot decode
/// a named Hello, one of version 3 refuses a Hello of version 4), so proxies are upgraded
/// first.
pub const VERSION: u16 = 4;

/// The first protocol version whose relays understand [`Frame::Refresh`].
pub const REFRESH_VERSION: u16 = 4;

/// The oldest protocol version a peer may speak: a version-2 Hello carries no path name, and
/// the proxy numbers that relay's paths.
pub const MIN_VERSION: u16 = 2;

/// Longest path name a [`Frame::Hello`] carries, bytes (`[A-Za-z0-9_.-]`).
pub const MAX_PATH_NAME: usize = 32;

/// Whether `name` may be carried as a path name: 1 to [`MAX_PATH_NAME`] bytes of
/// `[A-Za-z0-9_.-]` (the relay's `[[path]] name` rule).
pub fn valid_path_name(name: &str) -> bool {
    (1..=MAX_PATH_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// The session id of a path check ([`Frame::Hello`] from a relay naming it): the proxy answers
/// with a Hello of the same session and path (epoch 0), then a [`Frame::Close`] whose message
/// says who answered, and opens no session. Relays never pick it for a session. (A proxy that
/// does not know it opens a session for it, which the check then closes; no new protocol
/// version is needed.)
pub const CHECK_SESSION: u64 = 0;

/// The path index a [`Frame::PathStatus`] uses for the session as a whole. From the proxy,
/// `up = false` announces that it is draining before it stops: it carries the flows open now
/// and will close the session, so the relay opens new flows at the next proxy instead. (A relay
/// that does not know it ignores it, as it ignores every path status from the proxy, so the
/// announcement needs no new protocol version.)
pub const SESSION_PATH: u8 = 255;

/// Bytes of the frame header (type + length).
pub const HEADER_LEN: usize = 5;

/// Largest payload accepted (a data frame carries at most 64 KiB of data).
pub const MAX_PAYLOAD: usize = 64 * 1024 + 64;

/// Largest message in a [`Frame::Close`].
pub const MAX_CLOSE_MESSAGE: usize = 1024;

/// Largest number of per-path cell reports in a [`Frame::Context`].
pub const MAX_CONTEXT_CELLS: usize = 32;

/// Bytes of a data frame's payload before its data (flow, offset, flags).
pub const DATA_OVERHEAD: usize = HEADER_LEN + 8 + 8 + 1;

/// Which end of the session sent a [`Frame::Hello`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The on-train relay (opens subflows and flows).
    Relay,
    /// The cloud proxy.
    Proxy,
}

/// Where a passenger's connection goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    /// An address and port (transparent interception, SOCKS5 with an address).
    Addr(SocketAddr),
    /// A host name the proxy resolves, and a port (SOCKS5 with a domain name).
    Name(String, u16),
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Destination::Addr(a) => write!(f, "{a}"),
            Destination::Name(n, p) => write!(f, "{n}:{p}"),
        }
    }
}

/// Outcome of an [`Frame::OpenFlow`] at the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpenStatus {
    /// Connected to the destination.
    Ok,
    /// The destination refused (TCP RST).
    Refused,
    /// No route, host unreachable, or connect timed out.
    Unreachable,
    /// The proxy's destination policy does not allow it.
    Denied,
    /// The host name did not resolve.
    NameError,
    /// The proxy is at its flow limit or failed otherwise.
    Failed,
}

/// Why a flow was reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResetReason {
    /// The passenger or the server reset its connection.
    PeerReset,
    /// The session gave up (all paths down beyond the hold time, shutdown).
    SessionLost,
    /// A protocol or resource limit was violated.
    Protocol,
    /// The endpoint is shutting down.
    Shutdown,
}

/// One carrier's serving cell and signal in a [`Frame::Context`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CellInfo {
    /// Path (modem) index.
    pub path: u8,
    /// Serving cell id; `None` while the modem has no cell (blackout).
    pub cell: Option<u64>,
    /// RSRP in dBm; `None` if unknown.
    pub rsrp_dbm: Option<f32>,
}

/// Train context: a GPS fix with speed and heading plus every modem's serving cell.
#[derive(Clone, Debug, PartialEq)]
pub struct ContextInfo {
    /// Time of the fix, Unix milliseconds.
    pub unix_ms: u64,
    /// Latitude, degrees.
    pub lat: f64,
    /// Longitude, degrees.
    pub lon: f64,
    /// Ground speed, m/s.
    pub speed_mps: f32,
    /// Heading, degrees clockwise from north.
    pub heading_deg: f32,
    /// Per-path cell reports.
    pub cells: Vec<CellInfo>,
}

/// A decoded frame. Data borrows from the input buffer.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame<'a> {
    /// First frame on every subflow, both directions.
    Hello {
        /// Protocol version ([`VERSION`]).
        version: u16,
        /// Sender's role.
        role: Role,
        /// Session id (chosen by the relay; the proxy echoes it).
        session: u64,
        /// Path index this subflow carries.
        path: u8,
        /// The sender's incarnation of the session: a value the shell picks at random when it
        /// creates the session state. A different epoch from a peer that spoke before means it
        /// lost that state (a restarted proxy, or one that dropped the session after the hold
        /// time). 0 in a version-1 Hello, which has no such field.
        epoch: u64,
        /// The path's name, as the relay's config calls it (a relay's Hello of version 3 or
        /// later; see [`valid_path_name`]). `None` from a proxy and from older relays.
        name: Option<String>,
    },
    /// The relay asks the proxy to connect a passenger's flow.
    OpenFlow {
        /// Control sequence number (reliable control frames, see [`Frame::CtrlAck`]).
        cseq: u64,
        /// Flow id (chosen by the relay).
        flow: u64,
        /// The passenger (source address).
        user: IpAddr,
        /// Where the passenger connected to.
        dst: Destination,
    },
    /// The proxy's answer to an [`Frame::OpenFlow`].
    OpenResult {
        /// Control sequence number.
        cseq: u64,
        /// Flow id.
        flow: u64,
        /// What happened.
        status: OpenStatus,
    },
    /// Flow bytes `[offset, offset + data.len())`, followed by the flow's FIN if `fin`.
    Data {
        /// Flow id.
        flow: u64,
        /// Sequence of the first byte.
        offset: u64,
        /// Whether the sender's side of the flow ends after this data.
        fin: bool,
        /// The bytes.
        data: &'a [u8],
    },
    /// Abort a flow in both directions.
    Reset {
        /// Control sequence number.
        cseq: u64,
        /// Flow id.
        flow: u64,
        /// Why.
        reason: ResetReason,
    },
    /// Every sequence number of `flow` below `next` was received (data bytes, then 1 for FIN).
    Ack {
        /// Flow id.
        flow: u64,
        /// Next expected sequence.
        next: u64,
    },
    /// The sender may send sequence numbers of `flow` below `limit` (flow control).
    Credit {
        /// Flow id.
        flow: u64,
        /// Sequence limit.
        limit: u64,
    },
    /// Train context (relay to proxy).
    Context(ContextInfo),
    /// Path probe; the peer answers with [`Frame::Pong`] on the same subflow.
    Ping {
        /// Probe id.
        id: u32,
        /// Sender's clock, µs.
        sent_us: u64,
    },
    /// Answer to a [`Frame::Ping`].
    Pong {
        /// The ping's id.
        id: u32,
        /// The ping's `sent_us`.
        ping_sent_us: u64,
        /// Receiver's clock when the ping arrived, µs (one-way delay with synchronized clocks).
        received_us: u64,
    },
    /// The relay reports a path (modem) up or down; for [`SESSION_PATH`], the proxy that it
    /// drains.
    PathStatus {
        /// Path index.
        path: u8,
        /// Whether it is usable.
        up: bool,
    },
    /// Every control frame with a sequence below `next` was received.
    CtrlAck {
        /// Next expected control sequence.
        next: u64,
    },
    /// (proxy, to a relay of version 4 or later) The proxy's end of `path`'s subflow lost its
    /// congestion state while the path was idle: a retransmission timeout on a probe cut its
    /// slow-start threshold to `ssthresh` segments, so the next download on the path would grow
    /// its window linearly from there. The relay may replace the subflow with a fresh
    /// connection while the path stays idle (only the relay dials). Sent on the path's own
    /// subflow; a relay that cannot replace it now ignores it.
    Refresh {
        /// Path index.
        path: u8,
        /// The proxy's slow-start threshold on the subflow, segments.
        ssthresh: u32,
    },
    /// The sender closes the subflow or session.
    Close {
        /// Why ([`CloseReason`]).
        reason: CloseReason,
        /// Human-readable detail.
        message: String,
    },
}

/// Why a subflow or session was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// Orderly shutdown.
    Shutdown,
    /// The peer speaks another protocol version.
    Version,
    /// The peer sent an invalid frame.
    Protocol,
    /// The peer broke a limit (flows, credit).
    Limit,
}

/// Why bytes could not be decoded. Every variant names the frame type it concerns.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum FrameError {
    /// Unknown frame type.
    #[error("unknown frame type {0}")]
    UnknownType(u8),
    /// Declared payload length above [`MAX_PAYLOAD`].
    #[error("frame type {kind}: payload of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// Frame type.
        kind: u8,
        /// Declared length.
        len: u32,
        /// Limit.
        max: usize,
    },
    /// The payload ended inside a field.
    #[error("frame type {kind}: payload too short for field `{field}`")]
    Truncated {
        /// Frame type.
        kind: u8,
        /// Field being read.
        field: &'static str,
    },
    /// Bytes left after the last field.
    #[error("frame type {kind}: {extra} unexpected bytes after the last field")]
    Trailing {
        /// Frame type.
        kind: u8,
        /// Leftover bytes.
        extra: usize,
    },
    /// A field holds a value outside its domain.
    #[error("frame type {kind}: field `{field}` has invalid value {value}")]
    BadValue {
        /// Frame type.
        kind: u8,
        /// Field.
        field: &'static str,
        /// The value, as text.
        value: String,
    },
}

mod kind {
    pub const HELLO: u8 = 1;
    pub const OPEN_FLOW: u8 = 2;
    pub const OPEN_RESULT: u8 = 3;
    pub const DATA: u8 = 4;
    pub const RESET: u8 = 5;
    pub const ACK: u8 = 6;
    pub const CREDIT: u8 = 7;
    pub const CONTEXT: u8 = 8;
    pub const PING: u8 = 9;
    pub const PONG: u8 = 10;
    pub const PATH_STATUS: u8 = 11;
    pub const CTRL_ACK: u8 = 12;
    pub const CLOSE: u8 = 13;
    pub const REFRESH: u8 = 14;
}

impl Frame<'_> {
    /// Wire type byte.
    pub fn kind(&self) -> u8 {
        match self {
            Frame::Hello { .. } => kind::HELLO,
            Frame::OpenFlow { .. } => kind::OPEN_FLOW,
            Frame::OpenResult { .. } => kind::OPEN_RESULT,
            Frame::Data { .. } => kind::DATA,
            Frame::Reset { .. } => kind::RESET,
            Frame::Ack { .. } => kind::ACK,
            Frame::Credit { .. } => kind::CREDIT,
            Frame::Context(_) => kind::CONTEXT,
            Frame::Ping { .. } => kind::PING,
            Frame::Pong { .. } => kind::PONG,
            Frame::PathStatus { .. } => kind::PATH_STATUS,
            Frame::CtrlAck { .. } => kind::CTRL_ACK,
            Frame::Close { .. } => kind::CLOSE,
            Frame::Refresh { .. } => kind::REFRESH,
        }
    }

    /// Append the encoded frame to `out`.
    ///
    /// # Panics
    /// If the frame cannot be represented (data above 64 KiB, a host name that is empty or
    /// longer than 255 bytes, more than [`MAX_CONTEXT_CELLS`] cells): those are bugs of the
    /// caller, never of received input.
    pub fn encode(&self, out: &mut Vec<u8>) {
        if let Frame::Data {
            flow,
            offset,
            fin,
            data,
        } = self
        {
            encode_data_header(out, *flow, *offset, *fin, data.len());
            out.extend_from_slice(data);
            return;
        }
        let start = out.len();
        out.push(self.kind());
        out.extend_from_slice(&[0; 4]);
        match self {
            Frame::Hello {
                version,
                role,
                session,
                path,
                epoch,
                name,
            } => {
                out.extend_from_slice(&version.to_be_bytes());
                out.push(match role {
                    Role::Relay => 1,
                    Role::Proxy => 2,
                });
                out.extend_from_slice(&session.to_be_bytes());
                out.push(*path);
                out.extend_from_slice(&epoch.to_be_bytes());
                if let Some(name) = name {
                    // Cut to the longest name a peer accepts (a name's bytes are ASCII where
                    // it is valid; an invalid one is refused by the peer, naming the field).
                    let mut end = name.len().min(MAX_PATH_NAME);
                    while !name.is_char_boundary(end) {
                        end -= 1;
                    }
                    out.push(end as u8);
                    out.extend_from_slice(&name.as_bytes()[..end]);
                }
            }
            Frame::OpenFlow {
                cseq,
                flow,
                user,
                dst,
            } => {
                out.extend_from_slice(&cseq.to_be_bytes());
                out.extend_from_slice(&flow.to_be_bytes());
                put_ip(out, *user);
                match dst {
                    Destination::Addr(a) => {
                        put_ip(out, a.ip());
                        out.extend_from_slice(&a.port().to_be_bytes());
                    }
                    Destination::Name(n, p) => {
                        assert!(
                            !n.is_empty() && n.len() <= 255,
                            "host name length must be 1..=255"
                        );
                        out.push(3);
                        out.push(n.len() as u8);
                        out.extend_from_slice(n.as_bytes());
                        out.extend_from_slice(&p.to_be_bytes());
                    }
                }
            }
            Frame::OpenResult { cseq, flow, status } => {
                out.extend_from_slice(&cseq.to_be_bytes());
                out.extend_from_slice(&flow.to_be_bytes());
                out.push(open_status_byte(*status));
            }
            Frame::Reset { cseq, flow, reason } => {
                out.extend_from_slice(&cseq.to_be_bytes());
                out.extend_from_slice(&flow.to_be_bytes());
                out.push(reset_reason_byte(*reason));
            }
            Frame::Ack { flow, next } => {
                out.extend_from_slice(&flow.to_be_bytes());
                out.extend_from_slice(&next.to_be_bytes());
            }
            Frame::Credit { flow, limit } => {
                out.extend_from_slice(&flow.to_be_bytes());
                out.extend_from_slice(&limit.to_be_bytes());
            }
            Frame::Context(c) => {
                assert!(c.cells.len() <= MAX_CONTEXT_CELLS, "too many cell reports");
                out.extend_from_slice(&c.unix_ms.to_be_bytes());
                out.extend_from_slice(&c.lat.to_be_bytes());
                out.extend_from_slice(&c.lon.to_be_bytes());
                out.extend_from_slice(&c.speed_mps.to_be_bytes());
                out.extend_from_slice(&c.heading_deg.to_be_bytes());
                out.push(c.cells.len() as u8);
                for cell in &c.cells {
                    out.push(cell.path);
                    let flags =
                        u8::from(cell.cell.is_some()) | (u8::from(cell.rsrp_dbm.is_some()) << 1);
                    out.push(flags);
                    out.extend_from_slice(&cell.cell.unwrap_or(0).to_be_bytes());
                    out.extend_from_slice(&cell.rsrp_dbm.unwrap_or(0.0).to_be_bytes());
                }
            }
            Frame::Ping { id, sent_us } => {
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(&sent_us.to_be_bytes());
            }
            Frame::Pong {
                id,
                ping_sent_us,
                received_us,
            } => {
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(&ping_sent_us.to_be_bytes());
                out.extend_from_slice(&received_us.to_be_bytes());
            }
            Frame::PathStatus { path, up } => {
                out.push(*path);
                out.push(u8::from(*up));
            }
            Frame::CtrlAck { next } => out.extend_from_slice(&next.to_be_bytes()),
            Frame::Refresh { path, ssthresh } => {
                out.push(*path);
                out.extend_from_slice(&ssthresh.to_be_bytes());
            }
            Frame::Close { reason, message } => {
                out.push(close_reason_byte(*reason));
                let mut end = message.len().min(MAX_CLOSE_MESSAGE);
                while !message.is_char_boundary(end) {
                    end -= 1;
                }
                out.extend_from_slice(&message.as_bytes()[..end]);
            }
            Frame::Data { .. } => unreachable!("handled above"),
        }
        let len = (out.len() - start - HEADER_LEN) as u32;
        out[start + 1..start + HEADER_LEN].copy_from_slice(&len.to_be_bytes());
    }

    /// The encoded frame as a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }
}

/// Append the header of a data frame carrying `len` bytes; the caller appends the bytes.
///
/// # Panics
/// If `len` exceeds 64 KiB.
pub fn encode_data_header(out: &mut Vec<u8>, flow: u64, offset: u64, fin: bool, len: usize) {
    assert!(len <= 64 * 1024, "data frames carry at most 64 KiB");
    out.push(kind::DATA);
    out.extend_from_slice(&((len + 17) as u32).to_be_bytes());
    out.extend_from_slice(&flow.to_be_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
    out.push(u8::from(fin));
}

fn put_ip(out: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(a) => {
            out.push(4);
            out.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            out.push(6);
            out.extend_from_slice(&a.octets());
        }
    }
}

/// The byte of each value of a one-byte field, written once for both directions: `$to` writes
/// a value's byte, `$from` reads one (`None`: no value has that byte).
macro_rules! field_bytes {
    ($ty:ident, $to:ident, $from:ident { $($v:ident = $b:literal),* $(,)? }) => {
        fn $to(x: $ty) -> u8 {
            match x {
                $($ty::$v => $b,)*
            }
        }
        fn $from(b: u8) -> Option<$ty> {
            match b {
                $($b => Some($ty::$v),)*
                _ => None,
            }
        }
    };
}

field_bytes!(OpenStatus, open_status_byte, open_status_of {
    Ok = 0,
    Refused = 1,
    Unreachable = 2,
    Denied = 3,
    NameError = 4,
    Failed = 5,
});
field_bytes!(ResetReason, reset_reason_byte, reset_reason_of {
    PeerReset = 0,
    SessionLost = 1,
    Protocol = 2,
    Shutdown = 3,
});
field_bytes!(CloseReason, close_reason_byte, close_reason_of {
    Shutdown = 0,
    Version = 1,
    Protocol = 2,
    Limit = 3,
});

/// Bounds-checked reader over one frame's payload.
struct Reader<'a> {
    kind: u8,
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], FrameError> {
        if self.buf.len() < n {
            return Err(FrameError::Truncated {
                kind: self.kind,
                field,
            });
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }
    fn u8(&mut self, field: &'static str) -> Result<u8, FrameError> {
        Ok(self.take(1, field)?[0])
    }
    fn u16(&mut self, field: &'static str) -> Result<u16, FrameError> {
        let b = self.take(2, field)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, FrameError> {
        let b = self.take(4, field)?;
        Ok(u32::from_be_bytes(b.try_into().expect("4 bytes")))
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, FrameError> {
        let b = self.take(8, field)?;
        Ok(u64::from_be_bytes(b.try_into().expect("8 bytes")))
    }
    fn f64(&mut self, field: &'static str) -> Result<f64, FrameError> {
        let v = f64::from_bits(self.u64(field)?);
        self.finite(v, field)
    }
    fn f32(&mut self, field: &'static str) -> Result<f32, FrameError> {
        let v = f32::from_bits(self.u32(field)?);
        self.finite(f64::from(v), field)?;
        Ok(v)
    }
    fn finite(&self, v: f64, field: &'static str) -> Result<f64, FrameError> {
        if v.is_finite() {
            Ok(v)
        } else {
            Err(self.bad(field, v))
        }
    }
    fn bad(&self, field: &'static str, value: impl fmt::Display) -> FrameError {
        FrameError::BadValue {
            kind: self.kind,
            field,
            value: value.to_string(),
        }
    }
    fn ip_tagged(&mut self, tag: u8, field: &'static str) -> Result<IpAddr, FrameError> {
        match tag {
            4 => {
                let b = self.take(4, field)?;
                Ok(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])))
            }
            6 => {
                let b: [u8; 16] = self.take(16, field)?.try_into().expect("16 bytes");
                Ok(IpAddr::V6(Ipv6Addr::from(b)))
            }
            t => Err(self.bad(field, t)),
        }
    }
    fn ip(&mut self, field: &'static str) -> Result<IpAddr, FrameError> {
        let tag = self.u8(field)?;
        self.ip_tagged(tag, field)
    }
    fn finish(self) -> Result<(), FrameError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Trailing {
                kind: self.kind,
                extra: self.buf.len(),
            })
        }
    }
}

fn valid_host(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'.' || *c == b'-' || *c == b'_')
}

/// A data frame among encoded frames: its flow, the flow offset one past its last byte, its
/// length, and the position in the buffer one past the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataEnd {
    /// Flow id.
    pub flow: u64,
    /// Flow offset one past the frame's last byte.
    pub end: u64,
    /// Bytes of flow data it carries.
    pub len: usize,
    /// Position in the buffer one past the frame.
    pub used: usize,
}

/// The data frames among the whole frames at the start of `buf`, up to the first incomplete or
/// undecodable one (for observers that follow flows through a subflow's bytes).
pub fn data_ends(buf: &[u8]) -> impl Iterator<Item = DataEnd> + '_ {
    let mut used = 0;
    std::iter::from_fn(move || loop {
        let (frame, k) = decode(&buf[used..]).ok()??;
        used += k;
        if let Frame::Data {
            flow, offset, data, ..
        } = frame
        {
            return Some(DataEnd {
                flow,
                end: offset + data.len() as u64,
                len: data.len(),
                used,
            });
        }
    })
}

/// Decode the frame at the start of `buf`: `Ok(None)` if more bytes are needed, else the frame
/// and how many bytes it used.
pub fn decode(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let kind = buf[0];
    if !(kind::HELLO..=kind::REFRESH).contains(&kind) {
        return Err(FrameError::UnknownType(kind));
    }
    let len = u32::from_be_bytes(buf[1..5].try_into().expect("4 bytes"));
    if len as usize > MAX_PAYLOAD {
        return Err(FrameError::TooLong {
            kind,
            len,
            max: MAX_PAYLOAD,
        });
    }
    let total = HEADER_LEN + len as usize;
    if buf.len() < total {
        return Ok(None);
    }
    let mut r = Reader {
        kind,
        buf: &buf[HEADER_LEN..total],
    };
    let frame = match kind {
        kind::HELLO => {
            let version = r.u16("version")?;
            let role = match r.u8("role")? {
                1 => Role::Relay,
                2 => Role::Proxy,
                v => return Err(r.bad("role", v)),
            };
            let session = r.u64("session")?;
            let path = r.u8("path")?;
            // A version-1 Hello ends here; decoding it lets the session refuse it by version.
            let epoch = if r.buf.is_empty() { 0 } else { r.u64("epoch")? };
            // A Hello without a path name (version 2, or a proxy's) ends here.
            let name = if r.buf.is_empty() {
                None
            } else {
                let n = r.u8("path name length")? as usize;
                let raw = r.take(n, "path name")?;
                match std::str::from_utf8(raw) {
                    Ok(name) if valid_path_name(name) => Some(name.to_owned()),
                    _ => {
                        return Err(
                            r.bad("path name", format!("{:?}", String::from_utf8_lossy(raw)))
                        )
                    }
                }
            };
            Frame::Hello {
                version,
                role,
                session,
                path,
                epoch,
                name,
            }
        }
        kind::OPEN_FLOW => {
            let cseq = r.u64("cseq")?;
            let flow = r.u64("flow")?;
            let user = r.ip("user")?;
            let tag = r.u8("destination")?;
            let dst = if tag == 3 {
                let n = r.u8("destination name length")? as usize;
                let name = r.take(n, "destination name")?;
                if !valid_host(name) {
                    return Err(r.bad("destination name", String::from_utf8_lossy(name)));
                }
                let name = String::from_utf8(name.to_vec()).expect("checked ASCII");
                Destination::Name(name, r.u16("destination port")?)
            } else {
                let ip = r.ip_tagged(tag, "destination")?;
                Destination::Addr(SocketAddr::new(ip, r.u16("destination port")?))
            };
            Frame::OpenFlow {
                cseq,
                flow,
                user,
                dst,
            }
        }
        kind::OPEN_RESULT => {
            let cseq = r.u64("cseq")?;
            let flow = r.u64("flow")?;
            let v = r.u8("status")?;
            let status = open_status_of(v).ok_or_else(|| r.bad("status", v))?;
            Frame::OpenResult { cseq, flow, status }
        }
        kind::DATA => {
            let flow = r.u64("flow")?;
            let offset = r.u64("offset")?;
            let flags = r.u8("flags")?;
            if flags > 1 {
                return Err(r.bad("flags", flags));
            }
            let data = r.take(r.buf.len(), "data")?;
            if data.len() > 64 * 1024 {
                return Err(r.bad("data length", data.len()));
            }
            if offset.checked_add(data.len() as u64 + 1).is_none() {
                return Err(r.bad("offset", offset));
            }
            Frame::Data {
                flow,
                offset,
                fin: flags == 1,
                data,
            }
        }
        kind::RESET => {
            let cseq = r.u64("cseq")?;
            let flow = r.u64("flow")?;
            let v = r.u8("reason")?;
            let reason = reset_reason_of(v).ok_or_else(|| r.bad("reason", v))?;
            Frame::Reset { cseq, flow, reason }
        }
        kind::ACK => Frame::Ack {
            flow: r.u64("flow")?,
            next: r.u64("next")?,
        },
        kind::CREDIT => Frame::Credit {
            flow: r.u64("flow")?,
            limit: r.u64("limit")?,
        },
        kind::CONTEXT => {
            let unix_ms = r.u64("unix_ms")?;
            let lat = r.f64("lat")?;
            let lon = r.f64("lon")?;
            if !(-90.0..=90.0).contains(&lat) {
                return Err(r.bad("lat", lat));
            }
            if !(-180.0..=180.0).contains(&lon) {
                return Err(r.bad("lon", lon));
            }
            let speed_mps = r.f32("speed")?;
            let heading_deg = r.f32("heading")?;
            let n = r.u8("cell count")? as usize;
            if n > MAX_CONTEXT_CELLS {
                return Err(r.bad("cell count", n));
            }
            let mut cells = Vec::with_capacity(n);
            for _ in 0..n {
                let path = r.u8("cell path")?;
                let flags = r.u8("cell flags")?;
                if flags > 3 {
                    return Err(r.bad("cell flags", flags));
                }
                let cell = r.u64("cell id")?;
                let rsrp = r.f32("cell rsrp")?;
                // Absent values are encoded as zero: one encoding per frame.
                if flags & 1 == 0 && cell != 0 {
                    return Err(r.bad("cell id", cell));
                }
                if flags & 2 == 0 && rsrp.to_bits() != 0 {
                    return Err(r.bad("cell rsrp", rsrp));
                }
                cells.push(CellInfo {
                    path,
                    cell: (flags & 1 != 0).then_some(cell),
                    rsrp_dbm: (flags & 2 != 0).then_some(rsrp),
                });
            }
            Frame::Context(ContextInfo {
                unix_ms,
                lat,
                lon,
                speed_mps,
                heading_deg,
                cells,
            })
        }
        kind::PING => Frame::Ping {
            id: r.u32("id")?,
            sent_us: r.u64("sent_us")?,
        },
        kind::PONG => Frame::Pong {
            id: r.u32("id")?,
            ping_sent_us: r.u64("ping_sent_us")?,
            received_us: r.u64("received_us")?,
        },
        kind::PATH_STATUS => {
            let path = r.u8("path")?;
            let up = match r.u8("up")? {
                0 => false,
                1 => true,
                v => return Err(r.bad("up", v)),
            };
            Frame::PathStatus { path, up }
        }
        kind::CTRL_ACK => Frame::CtrlAck {
            next: r.u64("next")?,
        },
        kind::CLOSE => {
            let v = r.u8("reason")?;
            let reason = close_reason_of(v).ok_or_else(|| r.bad("reason", v))?;
            let msg = r.take(r.buf.len(), "message")?;
            if msg.len() > MAX_CLOSE_MESSAGE {
                return Err(r.bad("message length", msg.len()));
            }
            let message =
                String::from_utf8(msg.to_vec()).map_err(|_| r.bad("message", "not UTF-8"))?;
            Frame::Close { reason, message }
        }
        kind::REFRESH => Frame::Refresh {
            path: r.u8("path")?,
            ssthresh: r.u32("ssthresh")?,
        },
        _ => unreachable!("range checked above"),
    };
    r.finish()?;
    Ok(Some((frame, total)))
}
