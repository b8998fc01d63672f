//! The relay's path upkeep in a ride: `polycorn_proto::path_policy`'s watchdog (a silent
//! path), idle refresh (an idle subflow with stale congestion state, or the proxy's request)
//! and back-off watch (a subflow stuck in RTO back-off on a path that works), looked at as
//! often as the relay's path task looks, each replacing the subflow with a fresh connection
//! made by a modelled handshake: SYNs over the path's uplink every
//! [`CONNECT_STAGGER`](path_policy::CONNECT_STAGGER) until one gets through or the probe's
//! [`PROBE_CONNECT_TIMEOUT`](path_policy::PROBE_CONNECT_TIMEOUT) is over, the answer over its
//! downlink (one round trip; TLS and the Hello exchange are not modelled).

use polycorn_proto::path_policy::{
    self, BackoffWatch, IdleRefresh, Refresh, Replace, SocketState, Watchdog, BACKOFF_CHECK,
    REFRESH_CHECK, WATCHDOG_CHECK,
};
use polycorn_proto::Session;
use polycorn_sched::time::Instant;

use crate::transport::{Conn, Packet};

/// Bytes on the wire of a SYN or its answer (IPv4 and TCP headers with options).
const HANDSHAKE_LEN: u32 = 60;

/// What a path's links carry: a subflow's packets, tagged with the connection they belong to
/// (a replaced connection's packets still on the link are dropped where they arrive), and the
/// handshake of a fresh connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnWire {
    /// A packet of connection `.0`.
    Tcp(u32, Packet),
    /// The relay opens connection `.0`.
    Syn(u32),
    /// The proxy accepted connection `.0`.
    SynAck(u32),
}

impl OnWire {
    /// Bytes on the wire.
    pub fn wire_len(&self) -> u32 {
        match self {
            OnWire::Tcp(_, p) => p.wire_len(),
            OnWire::Syn(_) | OnWire::SynAck(_) => HANDSHAKE_LEN,
        }
    }
}

/// How the relay and proxy keep their subflows fresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upkeep {
    /// Whether the relay replaces subflows at all (off: every subflow lasts the whole ride).
    pub on: bool,
    /// The relay's `idle_refresh`.
    pub idle_refresh: IdleRefresh,
    /// The proxy's `ask_refresh`: it asks the relay for a fresh subflow after a timeout cut its
    /// end's slow-start threshold while the path was idle.
    pub ask_refresh: bool,
}

impl Default for Upkeep {
    /// The daemons' defaults.
    fn default() -> Self {
        Upkeep {
            on: true,
            idle_refresh: IdleRefresh::default(),
            ask_refresh: false,
        }
    }
}

/// A subflow the relay replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replacement {
    /// Path index.
    pub path: usize,
    /// When the fresh connection came up, µs.
    pub at_us: u64,
    /// Why.
    pub why: Replace,
}

/// A connection being made.
#[derive(Debug, Clone, Copy)]
struct Probe {
    gen: u32,
    why: Replace,
    next_syn_us: u64,
    until_us: u64,
    /// Frames received on the path at the back-off look that started it.
    rx_frames: u64,
}

/// One path's upkeep at the relay.
#[derive(Debug)]
pub struct PathUpkeep {
    mode: IdleRefresh,
    watchdog: Watchdog,
    refresh: Refresh,
    backoff: BackoffWatch,
    /// The watchdog fired: probe, with no pause, until a fresh subflow is up.
    silent: bool,
    next_watch_us: u64,
    next_refresh_us: u64,
    next_backoff_us: u64,
    probe: Option<Probe>,
    /// The connection the latest probe opened.
    last_gen: u32,
}

/// `TCP_INFO` as the path policy reads it.
fn socket(conn: &Conn, now_us: u64) -> SocketState {
    let i = conn.info(now_us);
    SocketState {
        ssthresh_segments: conn.ssthresh_segments().unwrap_or(u32::MAX),
        unacked_segments: (i.unacked_bytes / u64::from(i.mss_bytes.max(1))) as u32,
        notsent_bytes: i.notsent_bytes,
        backoff: i.rto_backoff.min(u32::from(u8::MAX)) as u8,
    }
}

impl PathUpkeep {
    /// The upkeep of a path whose first subflow (connection 0) is up at `now_us`.
    pub fn new(mode: IdleRefresh, now_us: u64, session: &Session, path: u8) -> PathUpkeep {
        let counters = session.path_counters(path).unwrap_or_default();
        PathUpkeep {
            mode,
            watchdog: Watchdog::default(),
            refresh: Refresh::new(mode, Instant::from_micros(now_us), counters),
            backoff: BackoffWatch::default(),
            silent: false,
            next_watch_us: now_us + WATCHDOG_CHECK.as_micros(),
            next_refresh_us: now_us + REFRESH_CHECK.as_micros(),
            next_backoff_us: now_us + BACKOFF_CHECK.as_micros(),
            probe: None,
            last_gen: 0,
        }
    }

    /// When something is next due.
    pub fn next_us(&self) -> u64 {
        let mut t = self.next_watch_us.min(self.next_backoff_us);
        if self.refresh.enabled() {
            t = t.min(self.next_refresh_us);
        }
        if let Some(p) = &self.probe {
            t = t.min(p.next_syn_us).min(p.until_us);
        }
        t
    }

    fn start_probe(&mut self, now_us: u64, why: Replace, rx_frames: u64) {
        self.last_gen += 1;
        self.probe = Some(Probe {
            gen: self.last_gen,
            why,
            next_syn_us: now_us,
            until_us: now_us + path_policy::PROBE_CONNECT_TIMEOUT.as_micros(),
            rx_frames,
        });
    }

    /// Looks and probe steps due at `now_us` on `path`, whose current subflow's connection is
    /// `conn`: `Some(connection)` when a SYN for it goes out now.
    pub fn on_time(
        &mut self,
        now_us: u64,
        session: &mut Session,
        path: u8,
        conn: &Conn,
    ) -> Option<u32> {
        let now = Instant::from_micros(now_us);
        if now_us >= self.next_watch_us {
            self.next_watch_us = now_us + WATCHDOG_CHECK.as_micros();
            let stalled = session.path_attached(path) && !session.path_usable(path);
            if !self.silent && self.watchdog.on_look(stalled) {
                self.silent = true;
                match &mut self.probe {
                    Some(p) => p.why = Replace::Silent,
                    None => self.start_probe(now_us, Replace::Silent, 0),
                }
            }
        }
        if self.refresh.enabled() && now_us >= self.next_refresh_us {
            self.next_refresh_us = now_us + REFRESH_CHECK.as_micros();
            let counters = session.path_counters(path).unwrap_or_default();
            let request = session.take_refresh_request(path);
            let why = self.refresh.on_look(
                now,
                counters,
                request,
                || Some(socket(conn, now_us)),
                || session.path_usable(path),
            );
            if let (Some(why), None) = (why, &self.probe) {
                self.start_probe(now_us, why, 0);
            }
        }
        if now_us >= self.next_backoff_us {
            self.next_backoff_us = now_us + BACKOFF_CHECK.as_micros();
            let rx = session.path_counters(path).unwrap_or_default().rx_frames;
            let busy = self.probe.is_some();
            if let Some(b) = self
                .backoff
                .on_look(now, rx, Some(socket(conn, now_us)), busy)
            {
                self.start_probe(now_us, Replace::BackedOff(b), rx);
            }
        }
        let p = self.probe.as_mut()?;
        if now_us >= p.until_us {
            // The probe failed: a silent path probes again at once; a spare probe waits for
            // the next look.
            let failed = *p;
            self.probe = None;
            if self.silent {
                self.start_probe(now_us, Replace::Silent, 0);
            } else if let Replace::BackedOff(_) = failed.why {
                self.backoff.probe_failed(now, failed.rx_frames);
            }
        }
        let p = self.probe.as_mut()?;
        if now_us >= p.next_syn_us {
            p.next_syn_us = now_us + path_policy::CONNECT_STAGGER.as_micros();
            return Some(p.gen);
        }
        None
    }

    /// The proxy accepted connection `gen` (newer than the path's subflow) at `now_us`: it
    /// replaces the subflow, for the returned reason; the looks start afresh.
    pub fn on_syn_ack(&mut self, now_us: u64, gen: u32, session: &Session, path: u8) -> Replace {
        let why = match self.probe {
            Some(p) if p.gen == gen => p.why,
            // A late answer to an earlier probe of a silent path.
            _ => Replace::Silent,
        };
        let last_gen = self.last_gen.max(gen);
        *self = PathUpkeep::new(self.mode, now_us, session, path);
        self.last_gen = last_gen;
        why
    }
}
