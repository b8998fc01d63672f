//! One subflow's TCP connection at one end, as the ride drives it: bytes written (counted, the
//! bytes themselves stay in the ride's stream buffer), packets to put on the wire, packets
//! from it, bytes received in order, timers and a `TCP_INFO` sample.
//!
//! STAND-IN: a fixed-window go-back-N sender until the TCP subflow model (`crate::tcp`) is
//! merged; only the plumbing of the ride is exercised with it.

use polycorn_sched::path::TcpInfoSample;
use polycorn_sched::time::{Bandwidth, Duration};

/// Segment payload, bytes.
const MSS: u32 = 1448;
/// Header bytes on the wire (IPv4 + TCP with timestamps).
const HEADER: u32 = 52;

/// A packet of one subflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// Data `[seq, seq + len)`.
    Data { seq: u64, len: u32 },
    /// Everything below `ack` received.
    Ack { ack: u64 },
}

impl Packet {
    /// Bytes on the wire.
    pub fn wire_len(&self) -> u32 {
        match self {
            Packet::Data { len, .. } => len + HEADER,
            Packet::Ack { .. } => HEADER,
        }
    }
}

/// One end of a subflow.
#[derive(Debug)]
pub struct Conn {
    written: u64,
    snd_una: u64,
    snd_nxt: u64,
    rto_at: Option<u64>,
    backoff: u32,
    rcv_nxt: u64,
    ack_due: bool,
    cwnd: u64,
    send_buffer: u64,
}

impl Conn {
    /// A connection with an empty send buffer of `send_buffer` bytes.
    pub fn new(send_buffer: u64) -> Conn {
        Conn {
            written: 0,
            snd_una: 0,
            snd_nxt: 0,
            rto_at: None,
            backoff: 0,
            rcv_nxt: 0,
            ack_due: false,
            cwnd: 64 * u64::from(MSS),
            send_buffer,
        }
    }

    /// Bytes the send buffer takes now.
    pub fn write_room(&self) -> u64 {
        self.send_buffer.saturating_sub(self.written - self.snd_una)
    }

    /// `n` more bytes written.
    pub fn write(&mut self, _now_us: u64, n: u64) {
        self.written += n;
    }

    /// Bytes received in order so far.
    pub fn delivered(&self) -> u64 {
        self.rcv_nxt
    }

    /// The next packet to put on the wire.
    pub fn poll_packet(&mut self, now_us: u64) -> Option<Packet> {
        if self.ack_due {
            self.ack_due = false;
            return Some(Packet::Ack { ack: self.rcv_nxt });
        }
        if self.snd_nxt < self.written && self.snd_nxt - self.snd_una < self.cwnd {
            let len = (self.written - self.snd_nxt).min(u64::from(MSS)) as u32;
            let seq = self.snd_nxt;
            self.snd_nxt += u64::from(len);
            self.rto_at.get_or_insert(now_us + self.rto_us());
            return Some(Packet::Data { seq, len });
        }
        None
    }

    fn rto_us(&self) -> u64 {
        (1_000_000u64 << self.backoff.min(7)).min(120_000_000)
    }

    /// A packet from the wire.
    pub fn on_packet(&mut self, now_us: u64, p: Packet) {
        match p {
            Packet::Data { seq, len } => {
                if seq == self.rcv_nxt {
                    self.rcv_nxt += u64::from(len);
                }
                self.ack_due = true;
            }
            Packet::Ack { ack } => {
                if ack > self.snd_una {
                    self.snd_una = ack;
                    self.backoff = 0;
                    self.rto_at = (self.snd_una < self.snd_nxt).then(|| now_us + self.rto_us());
                }
            }
        }
    }

    /// When [`Conn::on_timer`] is due.
    pub fn next_timer_us(&self) -> Option<u64> {
        self.rto_at
    }

    /// Timers due at `now_us`.
    pub fn on_timer(&mut self, now_us: u64) {
        if self.rto_at.is_some_and(|t| t <= now_us) {
            self.snd_nxt = self.snd_una;
            self.backoff += 1;
            self.rto_at = (self.snd_una < self.written).then(|| now_us + self.rto_us());
        }
    }

    /// A `TCP_INFO` sample (its `unacked_age` left zero).
    pub fn info(&self, _now_us: u64) -> TcpInfoSample {
        TcpInfoSample {
            srtt: Duration::from_millis(100),
            rttvar: Duration::from_millis(10),
            min_rtt: Some(Duration::from_millis(50)),
            cwnd_bytes: self.cwnd,
            mss_bytes: MSS,
            unacked_bytes: self.snd_nxt - self.snd_una,
            notsent_bytes: self.written - self.snd_nxt,
            delivery_rate: Bandwidth::default(),
            rto_backoff: self.backoff,
            bytes_acked: self.snd_una,
            unacked_age: Duration::ZERO,
        }
    }
}
