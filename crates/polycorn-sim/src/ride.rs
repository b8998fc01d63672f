//! One ride: relay and proxy sessions joined by one modelled subflow per path over that path's
//! links, the passengers and servers of a [`Workload`], run in virtual time to the end.
//!
//! The loop: take the earliest due time of anything (a workload step, a link delivery, a TCP
//! timer, a session deadline, a `TCP_INFO` tick), deliver what the links delivered by then,
//! fire what is due (the relay's train context once a second, the relay's path upkeep), then
//! settle — frames into sessions, sessions' output into subflows, packets onto links — until
//! nothing moves. Everything runs on one thread in a fixed order, so the same configuration
//! gives the same ride.

use polycorn_link::trip::ContextRow;
use polycorn_link::trip_links::PathLinks;
use polycorn_link::LinkError;
use polycorn_proto::{Event, PathCounters, Session, SessionConfig, TrainPredictor};
use polycorn_sched::spec::SpecError;
use polycorn_sched::time::Instant;

use crate::apps::{Passengers, Servers};
use crate::budget::{LastByte, Tracker, Transit};
use crate::end::{End, TCP_INFO_PERIOD_US};
use crate::predict::{context_info, Prediction};
use crate::queue::EventQueue;
use crate::tcp::{SenderStats, TcpConfig, TcpConfigError};
use crate::upkeep::{OnWire, PathUpkeep, Replacement, Upkeep};
use crate::wire::{Wire, WireStats};
use crate::workload::{ImAnswer, TransferResult, Workload};

/// Most settle rounds at one instant (a bound against a livelock, never reached in practice).
const MAX_ROUNDS: usize = 10_000;

/// A ride to run.
#[derive(Debug, Clone)]
pub struct RideConfig {
    /// The relay's session configuration (as `polycorn-net`'s `Tuning` makes it).
    pub relay: SessionConfig,
    /// The proxy's session configuration.
    pub proxy: SessionConfig,
    /// Both directions of every path.
    pub links: Vec<PathLinks>,
    /// What the passengers do.
    pub workload: Workload,
    /// The relay's subflow sockets (congestion control, RTO bounds, send buffer, …).
    pub relay_tcp: TcpConfig,
    /// The proxy's subflow sockets.
    pub proxy_tcp: TcpConfig,
    /// When the ride ends, µs.
    pub end_us: u64,
    /// The train context the relay sends, one row a second (times from the ride's start;
    /// empty: the relay has no context source).
    pub context: Vec<ContextRow>,
    /// The handover predictors of relay and proxy.
    pub prediction: Prediction,
    /// How the relay and proxy keep their subflows fresh.
    pub upkeep: Upkeep,
}

/// Why a ride could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A scheduler spec was refused.
    #[error("scheduler: {0}")]
    Spec(#[from] SpecError),
    /// A link model was refused.
    #[error("path {path} {direction}: {source}")]
    Link {
        /// Path index.
        path: usize,
        /// `uplink` or `downlink`.
        direction: &'static str,
        /// Why.
        source: LinkError,
    },
    /// A TCP configuration was refused.
    #[error("{0} subflows: {1}")]
    Tcp(&'static str, TcpConfigError),
    /// A session refused a path.
    #[error("attach path {0}: {1}")]
    Attach(usize, polycorn_proto::ProtoError),
}

/// What a ride measured.
#[derive(Debug, Clone, PartialEq)]
pub struct RideResult {
    /// Downloads, in plan order.
    pub downloads: Vec<TransferResult>,
    /// Uploads, in plan order.
    pub uploads: Vec<TransferResult>,
    /// IM messages, by segment, user and index.
    pub im: Vec<ImAnswer>,
    /// Per path: (uplink, downlink) counters.
    pub wires: Vec<(WireStats, WireStats)>,
    /// Protocol errors that ended a subflow: (side, path, error).
    pub errors: Vec<(&'static str, usize, String)>,
    /// Scheduler stage moves at the relay and at the proxy (stage, moves).
    pub stage_moves: [Vec<(String, u64)>; 2],
    /// Per side (relay, proxy) and path: the session's counters and the subflow sender's
    /// (the last subflow's).
    pub paths: [Vec<(PathCounters, SenderStats)>; 2],
    /// Per download (plan order), the marks of its last byte on its critical path, for its
    /// [`Budget`](crate::budget::Budget); `None` if it did not complete (or, never expected,
    /// its last byte could not be followed).
    pub last_bytes: Vec<Option<LastByte>>,
    /// Subflows the relay replaced with fresh connections, in time order.
    pub replacements: Vec<Replacement>,
    /// Context frames the relay sent.
    pub context_frames: u64,
    /// Loop iterations (a cost measure).
    pub steps: u64,
}

#[derive(Debug, Clone, Copy)]
enum Job {
    Download(usize),
    Upload(usize),
    ImStart(usize, usize),
    ImSend(usize, usize, usize),
    ImEnd(usize, usize),
    Context(usize),
}

struct Path {
    up: Wire<OnWire>,
    down: Wire<OnWire>,
}

/// A ride in progress.
struct Ride {
    relay: End,
    proxy: End,
    relay_predictor: Box<dyn TrainPredictor>,
    proxy_predictor: Box<dyn TrainPredictor>,
    /// The relay's upkeep per path (empty: off).
    upkeep: Vec<PathUpkeep>,
    replacements: Vec<Replacement>,
    context: Vec<ContextRow>,
    context_frames: u64,
    paths: Vec<Path>,
    jobs: EventQueue<Job>,
    passengers: Passengers,
    servers: Servers,
    next_tick_us: u64,
    buf: Vec<u8>,
    arrived: Vec<(OnWire, Transit)>,
    tracker: Tracker,
    steps: u64,
}

fn end(
    cfg: &SessionConfig,
    paths: usize,
    tcp: &TcpConfig,
    side: &'static str,
    ask_refresh: bool,
) -> Result<End, SimError> {
    tcp.check().map_err(|e| SimError::Tcp(side, e))?;
    let mut session = Session::new(cfg.clone())?;
    for p in 0..paths {
        session
            .attach_path(Instant::ZERO, p as u8)
            .map_err(|e| SimError::Attach(p, e))?;
        session.set_peer_version(p as u8, polycorn_proto::VERSION);
    }
    let proxy = side == "proxy";
    Ok(End::new(
        session,
        paths,
        *tcp,
        proxy,
        proxy && ask_refresh,
        Instant::ZERO,
    ))
}

/// Run `cfg` to its end.
pub fn run(cfg: &RideConfig) -> Result<RideResult, SimError> {
    let n = cfg.links.len();
    let paths = cfg
        .links
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let err = |direction| {
                move |source| SimError::Link {
                    path: i,
                    direction,
                    source,
                }
            };
            Ok(Path {
                up: Wire::new(l.uplink.clone()).map_err(err("uplink"))?,
                down: Wire::new(l.downlink.clone()).map_err(err("downlink"))?,
            })
        })
        .collect::<Result<Vec<_>, SimError>>()?;
    let w = &cfg.workload;
    let mut jobs = EventQueue::new();
    for (i, t) in w.downloads.iter().enumerate() {
        jobs.push(t.start_us, Job::Download(i));
    }
    for (i, t) in w.uploads.iter().enumerate() {
        jobs.push(t.start_us, Job::Upload(i));
    }
    for (s, seg) in w.im.iter().enumerate() {
        for (u, sends) in seg.sends_us.iter().enumerate() {
            jobs.push(seg.start_us, Job::ImStart(s, u));
            for (m, t) in sends.iter().enumerate() {
                jobs.push(seg.start_us + t, Job::ImSend(s, u, m));
            }
            jobs.push(seg.start_us + seg.deadline_us, Job::ImEnd(s, u));
        }
    }
    for (i, row) in cfg.context.iter().enumerate() {
        jobs.push(row.t_ms * 1000, Job::Context(i));
    }
    let relay = end(&cfg.relay, n, &cfg.relay_tcp, "relay", false)?;
    let upkeep = if cfg.upkeep.on {
        (0..n)
            .map(|p| PathUpkeep::new(cfg.upkeep.idle_refresh, 0, &relay.session, p as u8))
            .collect()
    } else {
        Vec::new()
    };
    let mut ride = Ride {
        relay,
        proxy: end(
            &cfg.proxy,
            n,
            &cfg.proxy_tcp,
            "proxy",
            cfg.upkeep.ask_refresh,
        )?,
        relay_predictor: Prediction::make(cfg.prediction.relay.as_ref()),
        proxy_predictor: Prediction::make(cfg.prediction.proxy.as_ref()),
        upkeep,
        replacements: Vec::new(),
        context: cfg.context.clone(),
        context_frames: 0,
        paths,
        jobs,
        passengers: Passengers::new(w),
        servers: Servers::default(),
        next_tick_us: 0,
        buf: Vec::new(),
        arrived: Vec::new(),
        tracker: Tracker::new(w.downloads.iter().map(|t| t.size).collect(), n),
        steps: 0,
    };
    let mut now_us = 0;
    while now_us <= cfg.end_us {
        ride.step(now_us);
        now_us = ride.next_us(now_us);
    }
    Ok(ride.finish(w))
}

impl Ride {
    fn step(&mut self, now_us: u64) {
        self.steps += 1;
        let now = Instant::from_micros(now_us);
        for (p, path) in self.paths.iter_mut().enumerate() {
            self.arrived.clear();
            path.up.deliver(now_us, &mut self.arrived);
            for (pkt, _) in self.arrived.drain(..) {
                let sf = &mut self.proxy.subflows[p];
                match pkt {
                    OnWire::Tcp(gen, pkt) if gen == sf.gen => sf.conn.on_packet(now_us, pkt),
                    // A replaced connection's packet: the socket is gone.
                    OnWire::Tcp(..) | OnWire::SynAck(_) => {}
                    OnWire::Syn(gen) if gen < sf.gen => {}
                    OnWire::Syn(gen) => {
                        // The proxy takes up the fresh connection and answers.
                        if gen > sf.gen {
                            self.proxy.replace(now, p, gen);
                        }
                        let a = OnWire::SynAck(gen);
                        path.down.send(now_us, a.wire_len(), a);
                    }
                }
            }
            path.down.deliver(now_us, &mut self.arrived);
            for (pkt, t) in self.arrived.drain(..) {
                let sf = &mut self.relay.subflows[p];
                match pkt {
                    OnWire::Tcp(gen, pkt) if gen == sf.gen => {
                        self.tracker.arrived(p, gen, &pkt, t);
                        sf.conn.on_packet(now_us, pkt);
                    }
                    OnWire::SynAck(gen) if gen > sf.gen && !self.upkeep.is_empty() => {
                        self.relay.replace(now, p, gen);
                        let why =
                            self.upkeep[p].on_syn_ack(now_us, gen, &self.relay.session, p as u8);
                        self.replacements.push(Replacement {
                            path: p,
                            at_us: now_us,
                            why,
                        });
                    }
                    OnWire::Tcp(..) | OnWire::SynAck(_) | OnWire::Syn(_) => {}
                }
            }
        }
        for (side, e) in [&mut self.relay, &mut self.proxy].into_iter().enumerate() {
            for (p, sf) in e.subflows.iter_mut().enumerate() {
                if sf.conn.next_timer_us().is_some_and(|t| t <= now_us) {
                    let rtos = sf.conn.stats().rtos;
                    sf.conn.on_timer(now_us);
                    if side == 1 && sf.conn.stats().rtos > rtos {
                        self.tracker.rto(p, now_us);
                    }
                }
            }
        }
        while let Some((_, job)) = self.jobs.pop_due(now_us) {
            let s = &mut self.relay.session;
            let ps = &mut self.passengers;
            match job {
                Job::Download(i) => ps.start_download(s, now, i),
                Job::Upload(i) => ps.start_upload(s, now, i),
                Job::ImStart(seg, u) => ps.start_im(s, now, seg, u),
                Job::ImSend(seg, u, m) => ps.im_send(s, now, seg, u, m),
                Job::ImEnd(seg, u) => ps.end_im(s, now, seg, u),
                Job::Context(i) => {
                    // The relay's own predictor first (uplink), then the proxy's (downlink).
                    let ctx = context_info(&self.context[i]);
                    self.relay_predictor.on_context(now, &ctx);
                    s.send_context(now, &ctx);
                    self.context_frames += 1;
                }
            }
        }
        let tick = now_us >= self.next_tick_us;
        if tick {
            self.next_tick_us = now_us + TCP_INFO_PERIOD_US;
            for e in [&mut self.relay, &mut self.proxy] {
                for p in 0..e.subflows.len() {
                    e.sample(now, p);
                }
            }
        }
        for (p, u) in self.upkeep.iter_mut().enumerate() {
            if now_us < u.next_us() {
                continue;
            }
            let conn = &self.relay.subflows[p].conn;
            if let Some(gen) = u.on_time(now_us, &mut self.relay.session, p as u8, conn) {
                let syn = OnWire::Syn(gen);
                self.paths[p].up.send(now_us, syn.wire_len(), syn);
            }
        }
        for _ in 0..MAX_ROUNDS {
            if !self.settle(now) {
                break;
            }
        }
    }

    /// One round of moving bytes, frames, events and packets; true if anything moved.
    fn settle(&mut self, now: Instant) -> bool {
        let now_us = now.as_micros();
        let mut moved = false;
        let (mut to_relay, mut to_proxy) = (false, false);
        for p in 0..self.paths.len() {
            moved |= self.proxy.receive_from(&mut self.relay.subflows[p], p);
            moved |= self.relay.receive_from(&mut self.proxy.subflows[p], p);
            to_relay |= self.relay.read_frames(now, p);
            to_proxy |= self.proxy.read_frames(now, p);
        }
        self.note_frames(now_us);
        if to_relay {
            self.relay.wake_window_full(now);
        }
        if to_proxy {
            self.proxy.wake_window_full(now);
        }
        moved |= to_relay || to_proxy;
        moved |= self.drive(now);
        for p in 0..self.paths.len() {
            while self.relay.write_path(now, p) {
                moved = true;
            }
            while self.proxy.write_path(now, p) {
                moved = true;
            }
            self.note_frames(now_us);
            let path = &mut self.paths[p];
            let sf = &mut self.relay.subflows[p];
            while let Some(pkt) = sf.conn.poll_packet(now_us) {
                let pkt = OnWire::Tcp(sf.gen, pkt);
                path.up.send(now_us, pkt.wire_len(), pkt);
                moved = true;
            }
            let sf = &mut self.proxy.subflows[p];
            while let Some(pkt) = sf.conn.poll_packet(now_us) {
                self.tracker.transmitted(p, sf.gen, &pkt, now_us);
                let pkt = OnWire::Tcp(sf.gen, pkt);
                path.down.send(now_us, pkt.wire_len(), pkt);
                moved = true;
            }
        }
        moved
    }

    /// Let both sessions schedule and hand their events to the applications; true if any event
    /// came.
    fn drive(&mut self, now: Instant) -> bool {
        let mut any = false;
        let s = &mut self.relay.session;
        s.poll_transmit(now, &*self.relay_predictor);
        while s.poll_sched_event().is_some() {}
        while let Some(ev) = s.poll_event() {
            any = true;
            self.passengers.on_event(s, now, &ev, &mut self.buf);
        }
        let s = &mut self.proxy.session;
        s.poll_transmit(now, &*self.proxy_predictor);
        while s.poll_sched_event().is_some() {}
        while let Some(ev) = s.poll_event() {
            any = true;
            if let Event::Readable(flow) = ev {
                if let Some(d) = self.passengers.download_of(flow) {
                    self.tracker.request(d, now.as_micros());
                }
            }
            if let Event::Context(ctx) = &ev {
                self.proxy_predictor.on_context(now, ctx);
            }
            let ups = &mut self.passengers.uploads;
            self.servers.on_event(s, now, &ev, &mut self.buf, ups);
        }
        any
    }

    /// Hand the data frames both ends noted to the budget tracker.
    fn note_frames(&mut self, now_us: u64) {
        for (side, e) in [&mut self.relay, &mut self.proxy].into_iter().enumerate() {
            let Some(log) = e.data_log.as_mut() else {
                continue;
            };
            for m in log.drain(..) {
                let Some(d) = self.passengers.download_of(m.flow) else {
                    continue;
                };
                if side == 0 {
                    self.tracker.frame_received(d, m.path, m.end, now_us);
                } else {
                    let gen = e.subflows[m.path].gen;
                    self.tracker.frame_sent(d, m.path, gen, m.end, m.stream);
                }
            }
        }
    }

    /// The next time anything is due, after `now_us`.
    fn next_us(&self, now_us: u64) -> u64 {
        let mut t = self.next_tick_us;
        let mut at = |x: Option<u64>| {
            if let Some(x) = x {
                t = t.min(x.max(now_us + 1));
            }
        };
        at(self.jobs.next_us());
        for p in &self.paths {
            at(p.up.next_event_us());
            at(p.down.next_event_us());
        }
        for u in &self.upkeep {
            at(Some(u.next_us()));
        }
        for e in [&self.relay, &self.proxy] {
            at(e.session.poll_timeout().map(Instant::as_micros));
            for sf in &e.subflows {
                at(sf.conn.next_timer_us());
            }
        }
        t.max(now_us + 1)
    }

    fn finish(self, w: &Workload) -> RideResult {
        let tracker = self.tracker;
        let mut ps = self.passengers;
        for r in &mut ps.downloads {
            if r.done_us.is_none_or(|d| d > w.download_timeout_us) {
                r.done_us = None;
                r.fail(format!(
                    "not complete after {} s",
                    w.download_timeout_us as f64 / 1e6
                ));
            }
        }
        for r in &mut ps.uploads {
            if r.done_us.is_none_or(|d| d > w.upload_timeout_us) {
                r.done_us = None;
                r.fail(format!(
                    "not complete after {} s",
                    w.upload_timeout_us as f64 / 1e6
                ));
            }
        }
        let mut im: Vec<ImAnswer> = ps.im.into_iter().flatten().flatten().collect();
        for (m, seg) in im.iter_mut().zip(w.im.iter().flat_map(|s| {
            s.sends_us
                .iter()
                .flat_map(move |u| u.iter().map(move |_| s))
        })) {
            let deadline = seg.start_us + seg.deadline_us;
            if m.delivery_us.is_some_and(|d| m.send_us + d > deadline) {
                m.delivery_us = None;
            }
        }
        let errors = [("relay", &self.relay), ("proxy", &self.proxy)]
            .into_iter()
            .flat_map(|(side, e)| {
                e.subflows
                    .iter()
                    .enumerate()
                    .filter_map(move |(p, sf)| sf.failed.as_ref().map(|f| (side, p, f.to_string())))
            })
            .collect();
        let moves = |e: &End| {
            e.session
                .stage_moves()
                .iter()
                .map(|(s, n)| (s.to_string(), *n))
                .collect()
        };
        let paths = |e: &End| {
            e.subflows
                .iter()
                .enumerate()
                .map(|(p, sf)| {
                    let c = e.session.path_counters(p as u8).unwrap_or_default();
                    (c, sf.conn.stats())
                })
                .collect()
        };
        let last_bytes = ps
            .downloads
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let done = r.start_us + r.done_us?;
                tracker.last_byte(i, r.start_us, done)
            })
            .collect();
        RideResult {
            last_bytes,
            paths: [paths(&self.relay), paths(&self.proxy)],
            downloads: ps.downloads,
            uploads: ps.uploads,
            im,
            wires: self
                .paths
                .iter()
                .map(|p| (p.up.stats(), p.down.stats()))
                .collect(),
            errors,
            stage_moves: [moves(&self.relay), moves(&self.proxy)],
            replacements: self.replacements,
            context_frames: self.context_frames,
            steps: self.steps,
        }
    }
}

#[cfg(test)]
mod tests;
