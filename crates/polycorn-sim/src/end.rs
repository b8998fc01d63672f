//! One end of the session (relay or proxy) as the ride drives it — what `polycorn-net`'s
//! engine does with sockets, done with modelled subflows: frames decoded from each subflow's
//! in-order bytes into [`Session::on_frame`], the session's per-path output written into the
//! subflow (as far as its send buffer takes it), and a `TCP_INFO` sample after each write and
//! every [`TCP_INFO_PERIOD_US`] into [`Session::on_tcp_info`], with the age of the oldest
//! unacknowledged bytes from a [`WriteLog`]; at the proxy each sample also feeds the path's
//! [`RefreshWatch`] (asking the relay for a fresh subflow), and a fresh connection replaces a
//! path's subflow as the engine replaces it (the path detached and attached again).

use std::collections::VecDeque;

use polycorn_proto::frame::data_ends;
use polycorn_proto::path_policy::probes_only;
use polycorn_proto::refresh_watch::RefreshWatch;
use polycorn_proto::{decode, Frame, ProtoError, Session, WriteLog};
use polycorn_sched::time::Instant;

use crate::tcp::TcpConfig;
use crate::transport::Conn;

/// How often each subflow's `TCP_INFO` is sampled besides after writes (the engine's
/// `TCP_INFO_PERIOD`).
pub const TCP_INFO_PERIOD_US: u64 = 10_000;

/// One subflow at one end.
#[derive(Debug)]
pub struct Subflow {
    /// The TCP connection.
    pub conn: Conn,
    /// Which of the path's connections it is (0: the first; each fresh one counts up).
    pub gen: u32,
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
    /// A subflow over `conn`, the path's connection `gen`.
    pub fn new(conn: Conn, gen: u32) -> Subflow {
        Subflow {
            conn,
            gen,
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
    /// This end's subflow sockets.
    pub tcp: TcpConfig,
    /// Whether this is the proxy.
    pub proxy: bool,
    /// (proxy) Per path: the watch for a slow-start threshold cut while the path was idle;
    /// `None`: the proxy does not ask for refreshes.
    pub refresh: Option<Vec<RefreshWatch>>,
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
    log.extend(data_ends(bytes).map(|d| DataMark {
        path,
        flow: d.flow,
        end: d.end,
        stream: base + d.used as u64 - 1,
    }));
}

impl End {
    /// An end of `session` with one subflow per path, all up at `now`.
    pub fn new(
        session: Session,
        paths: usize,
        tcp: TcpConfig,
        proxy: bool,
        ask_refresh: bool,
        now: Instant,
    ) -> End {
        let mut e = End {
            session,
            subflows: Vec::with_capacity(paths),
            window_full: vec![false; paths],
            data_log: Some(Vec::new()),
            tcp,
            proxy,
            refresh: ask_refresh.then(|| (0..paths).map(|_| RefreshWatch::default()).collect()),
        };
        for p in 0..paths {
            let sf = e.subflow(now, p, 0);
            e.subflows.push(sf);
        }
        e
    }

    /// A fresh subflow for path `p`, its connection `gen` opened at `now` (each connection's
    /// BBR draws from its own seed).
    fn subflow(&self, now: Instant, p: usize, gen: u32) -> Subflow {
        let cfg = TcpConfig {
            seed: self.tcp.seed
                ^ ((p as u64) << 1)
                ^ u64::from(self.proxy)
                ^ (u64::from(gen) << 16),
            ..self.tcp
        };
        Subflow::new(Conn::new(cfg, now), gen)
    }

    /// Connection `gen` replaces path `p`'s subflow at `now`, as the engine replaces one: the
    /// old subflow is dropped with whatever it held, the path is detached (its chunks in
    /// flight go back to be sent again) and attached to the fresh one.
    pub fn replace(&mut self, now: Instant, p: usize, gen: u32) {
        self.subflows[p] = self.subflow(now, p, gen);
        self.window_full[p] = false;
        if let Some(w) = &mut self.refresh {
            w[p] = RefreshWatch::default();
        }
        let path = p as u8;
        if self.session.path_attached(path) {
            let _ = self.session.detach_path(now, path);
        }
        if let Err(e) = self.session.attach_path(now, path) {
            self.subflows[p].failed = Some(e);
            return;
        }
        self.session.set_peer_version(path, polycorn_proto::VERSION);
    }

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
        if sf.gen != peer.gen {
            // One end has taken up a fresh connection the other has not yet.
            return false;
        }
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
        if let Some(w) = &mut self.refresh {
            // The engine's `watch_refresh`.
            let path = p as u8;
            let counters = self.session.path_counters(path).unwrap_or_default();
            let idle = probes_only(
                s.unacked_bytes / u64::from(s.mss_bytes.max(1)),
                s.notsent_bytes,
            );
            let ask = w[p].on_sample(
                now,
                counters.tx_bytes + counters.rx_bytes,
                sf.conn.ssthresh_segments(),
                idle,
                idle && s.rto_backoff == 0,
            );
            if let Some(ssthresh) = ask {
                if self.session.path_usable(path)
                    && self.session.ask_refresh(now, path, ssthresh) == Ok(true)
                {
                    w[p].asked(now);
                }
            }
        }
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
