//! One end of the session (relay or proxy) as the ride drives it — what `polycorn-net`'s
//! engine does with sockets, done with modelled subflows: frames decoded from each subflow's
//! in-order bytes into [`Session::on_frame`], the session's per-path output written into the
//! subflow (as far as its send buffer takes it), and a `TCP_INFO` sample after each write and
//! every [`TCP_INFO_PERIOD_US`] into [`Session::on_tcp_info`], with the age of the oldest
//! unacknowledged bytes from a [`WriteLog`].

use std::collections::VecDeque;

use polycorn_proto::{decode, Frame, ProtoError, Session, WriteLog};
use polycorn_sched::time::Instant;

use crate::transport::Conn;

/// How often each subflow's `TCP_INFO` is sampled besides after writes (the engine's
/// `TCP_INFO_PERIOD`).
pub const TCP_INFO_PERIOD_US: u64 = 10_000;

/// One subflow at one end.
#[derive(Debug)]
pub struct Subflow {
    /// The TCP connection.
    pub conn: Conn,
    /// Bytes written into `conn` and not yet taken by the peer's reader: offset of the first,
    /// then the bytes.
    sent_base: u64,
    sent: VecDeque<u8>,
    /// Bytes received in order and not yet decoded into frames.
    rx: Vec<u8>,
    /// Session output not yet taken by the connection's send buffer.
    pending: Vec<u8>,
    log: WriteLog,
    /// The first protocol error on this subflow; it carries nothing after it.
    pub failed: Option<ProtoError>,
}

impl Subflow {
    /// A subflow over `conn`.
    pub fn new(conn: Conn) -> Subflow {
        Subflow {
            conn,
            sent_base: 0,
            sent: VecDeque::new(),
            rx: Vec::new(),
            pending: Vec::new(),
            log: WriteLog::default(),
            failed: None,
        }
    }

    /// Move the bytes the peer's connection received in order (`upto`, a stream offset) out
    /// of this subflow's sent buffer into `into`.
    pub fn hand_over(&mut self, upto: u64, into: &mut Vec<u8>) -> bool {
        if upto <= self.sent_base {
            return false;
        }
        let n = (upto - self.sent_base) as usize;
        into.extend(self.sent.drain(..n));
        self.sent_base = upto;
        true
    }
}

/// One end: its session and one subflow per path.
#[derive(Debug)]
pub struct End {
    /// The production session.
    pub session: Session,
    /// Subflow per path.
    pub subflows: Vec<Subflow>,
    /// Per path: its window was full at its last sample with nothing to write, so frames from
    /// the peer (which carry its acknowledgements) are worth a new sample (the engine's
    /// `wake_window_full`).
    pub window_full: Vec<bool>,
    /// When set, every data frame this end writes or reads is noted here (for the
    /// [`budget`](crate::budget)s).
    pub data_log: Option<Vec<DataMark>>,
}

/// A data frame written into or read from a subflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataMark {
    /// Path.
    pub path: usize,
    /// Flow.
    pub flow: u64,
    /// Flow offset one past its last byte.
    pub end: u64,
    /// Written: the subflow stream offset of the frame's last byte. Read: 0.
    pub stream: u64,
}

/// Note the data frames in `bytes` (whole frames), the first at subflow stream offset `base`.
fn note_data(log: &mut Vec<DataMark>, path: usize, bytes: &[u8], base: u64) {
    let mut used = 0;
    while let Ok(Some((frame, k))) = decode(&bytes[used..]) {
        used += k;
        if let Frame::Data {
            flow, offset, data, ..
        } = frame
        {
            log.push(DataMark {
                path,
                flow,
                end: offset + data.len() as u64,
                stream: base + used as u64 - 1,
            });
        }
    }
}

impl End {
    /// Decode what path `p` received into frames for the session; true if any was.
    pub fn read_frames(&mut self, now: Instant, p: usize) -> bool {
        let sf = &mut self.subflows[p];
        if sf.failed.is_some() {
            sf.rx.clear();
            return false;
        }
        let mut used = 0;
        loop {
            match decode(&sf.rx[used..]) {
                Ok(Some((frame, k))) => {
                    if let (
                        Some(log),
                        Frame::Data {
                            flow, offset, data, ..
                        },
                    ) = (&mut self.data_log, &frame)
                    {
                        log.push(DataMark {
                            path: p,
                            flow: *flow,
                            end: offset + data.len() as u64,
                            stream: 0,
                        });
                    }
                    if let Err(e) = self.session.on_frame(now, p as u8, frame) {
                        sf.failed = Some(e);
                        let _ = self.session.detach_path(now, p as u8);
                        break;
                    }
                    used += k;
                }
                Ok(None) => break,
                Err(e) => {
                    sf.failed = Some(e.into());
                    let _ = self.session.detach_path(now, p as u8);
                    break;
                }
            }
        }
        sf.rx.drain(..used);
        used > 0
    }

    /// Bytes for path `p` from the peer's subflow, up to what this end's connection received
    /// in order.
    pub fn receive_from(&mut self, peer: &mut Subflow, p: usize) -> bool {
        let sf = &mut self.subflows[p];
        peer.hand_over(sf.conn.delivered(), &mut sf.rx)
    }

    /// Write path `p`'s session output into its connection as far as it takes, then give the
    /// session a `TCP_INFO` sample; true if anything was written.
    pub fn write_path(&mut self, now: Instant, p: usize) -> bool {
        let sf = &mut self.subflows[p];
        if sf.failed.is_some() {
            return false;
        }
        if sf.pending.is_empty() {
            self.session.take_output(p as u8, &mut sf.pending);
            if let Some(log) = &mut self.data_log {
                note_data(log, p, &sf.pending, sf.sent_base + sf.sent.len() as u64);
            }
        }
        let n = (sf.conn.write_room() as usize).min(sf.pending.len());
        if n == 0 {
            return false;
        }
        let n = sf.conn.write(now.as_micros(), n as u64) as usize;
        if n == 0 {
            return false;
        }
        sf.sent.extend(sf.pending.drain(..n));
        let end = sf.sent_base + sf.sent.len() as u64;
        sf.log.wrote(end, now);
        self.sample(now, p);
        true
    }

    /// Give the session a `TCP_INFO` sample of path `p`.
    pub fn sample(&mut self, now: Instant, p: usize) {
        let sf = &mut self.subflows[p];
        if sf.failed.is_some() {
            return;
        }
        let mut s = sf.conn.info(now.as_micros());
        s.unacked_age = sf.log.unacked_age(s.bytes_acked, now);
        let _ = self.session.on_tcp_info(now, p as u8, &s);
        self.window_full[p] =
            !self.session.has_output(p as u8) && self.session.path_window_full(p as u8);
    }

    /// Frames arrived: sample again the paths whose window was full at their last sample.
    pub fn wake_window_full(&mut self, now: Instant) {
        for p in 0..self.subflows.len() {
            if std::mem::take(&mut self.window_full[p]) {
                self.sample(now, p);
            }
        }
    }
}
