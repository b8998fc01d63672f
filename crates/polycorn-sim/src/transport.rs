//! One end of a subflow's TCP connection as the ride drives it: the [`tcp`](crate::tcp)
//! model's sender for the bytes this end writes and receiver for the bytes the peer writes,
//! behind the few calls the ride makes — bytes written (counted; the bytes themselves stay in
//! the ride's stream buffer), packets to put on the wire and from it, bytes received in order,
//! timers, and the `TCP_INFO` sample.

use std::collections::VecDeque;

use polycorn_sched::path::TcpInfoSample;
use polycorn_sched::time::Instant;

use crate::tcp::{Ack, AckPolicy, Segment, SenderStats, TcpConfig, TcpReceiver, TcpSender};

/// IPv4 + TCP header with the timestamp option, bytes.
const HEADER: u32 = 52;

/// A packet of one subflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// Stream bytes.
    Data(Segment),
    /// An acknowledgement.
    Ack(Ack),
}

impl Packet {
    /// Bytes on the wire: headers, SACK option (2 + 8 per block, padded) and payload.
    pub fn wire_len(&self) -> u32 {
        match self {
            Packet::Data(s) => HEADER + s.len,
            Packet::Ack(a) if a.sack_len > 0 => {
                HEADER + (2 + 8 * u32::from(a.sack_len)).div_ceil(4) * 4
            }
            Packet::Ack(_) => HEADER,
        }
    }
}

/// One end of a subflow.
#[derive(Debug)]
pub struct Conn {
    tx: TcpSender,
    rx: TcpReceiver,
    acks: VecDeque<Ack>,
}

impl Conn {
    /// A connection with `cfg` (checked by the caller: [`TcpConfig::check`]), opened at `now`.
    pub fn new(cfg: TcpConfig, now: Instant) -> Conn {
        Conn {
            rx: TcpReceiver::new(AckPolicy::Delayed, cfg.mss),
            tx: TcpSender::new(cfg, now),
            acks: VecDeque::new(),
        }
    }

    /// Bytes the send buffer takes now.
    pub fn write_room(&self) -> u64 {
        self.tx.writable()
    }

    /// `n` more bytes written at `now_us`; returns how many the send buffer took.
    pub fn write(&mut self, now_us: u64, n: u64) -> u64 {
        self.tx.write(Instant::from_micros(now_us), n)
    }

    /// Bytes received in order so far.
    pub fn delivered(&self) -> u64 {
        self.rx.delivered()
    }

    /// The next packet to put on the wire: acknowledgements first, then segments as the
    /// window and pacing allow.
    pub fn poll_packet(&mut self, now_us: u64) -> Option<Packet> {
        if let Some(a) = self.acks.pop_front() {
            return Some(Packet::Ack(a));
        }
        self.tx
            .poll_transmit(Instant::from_micros(now_us))
            .map(Packet::Data)
    }

    /// A packet from the wire.
    pub fn on_packet(&mut self, now_us: u64, p: Packet) {
        let now = Instant::from_micros(now_us);
        match p {
            Packet::Data(s) => {
                if let Some(a) = self.rx.on_segment(now, &s) {
                    self.acks.push_back(a);
                }
            }
            Packet::Ack(a) => self.tx.on_ack(now, &a),
        }
    }

    /// When [`Conn::on_timer`] or [`Conn::poll_packet`] has something to do next.
    pub fn next_timer_us(&self) -> Option<u64> {
        [
            self.tx.timeout(),
            self.rx.timeout(),
            self.tx.next_transmit_time(),
        ]
        .into_iter()
        .flatten()
        .min()
        .map(Instant::as_micros)
    }

    /// Timers due at `now_us`.
    pub fn on_timer(&mut self, now_us: u64) {
        let now = Instant::from_micros(now_us);
        if self.tx.timeout().is_some_and(|t| t <= now) {
            self.tx.on_timeout(now);
        }
        if self.rx.timeout().is_some_and(|t| t <= now) {
            if let Some(a) = self.rx.on_timeout(now) {
                self.acks.push_back(a);
            }
        }
    }

    /// The `TCP_INFO` reading at `now_us`.
    pub fn info(&self, now_us: u64) -> TcpInfoSample {
        self.tx.info(Instant::from_micros(now_us))
    }

    /// The sender's retransmission timeout now, backed off.
    pub fn rto(&self) -> polycorn_sched::time::Duration {
        self.tx.rto()
    }

    /// The sender's slow-start threshold, segments (`None` while unset).
    pub fn ssthresh_segments(&self) -> Option<u32> {
        self.tx.ssthresh_segments()
    }

    /// The sender's counters.
    pub fn stats(&self) -> SenderStats {
        self.tx.stats()
    }
}
