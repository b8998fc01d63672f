//! One relay–proxy session in tokio: the [`Session`] state machine behind a mutex, the
//! subflow reader/writer loops, the timer, and the pumps between a flow and a local socket.
//!
//! Locking: every task takes the session lock only for short, non-blocking work (never across
//! an `.await`); after each change [`Engine::with`] runs the scheduler ("drive"), wakes the
//! writers of paths with output and dispatches events to flows and to the role (relay/proxy).

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use polycorn_proto::frame::decode;
use polycorn_proto::{
    CloseReason, Destination, Event, HelloOutcome, OpenStatus, ProtoError, ReadOutcome,
    ResetReason, Session, WriteLog,
};
use polycorn_sched::path::{TcpInfoSample, MAX_PATHS};
use polycorn_sched::time::Instant;
use polycorn_sched::ReinjectTrigger;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Notify};
use tracing::{debug, info, warn};

use polycorn_proto::refresh_watch::RefreshWatch;

/// Probe intervals at or below this count as fast: the session's default 200 ms, not an idle
/// train's seconds ([`Engine::on_context`]'s cell-loss delays are measured only then).
const FAST_PROBES: polycorn_sched::Duration = polycorn_sched::Duration::from_millis(250);

/// One `TCP_INFO` reading of a subflow's socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubflowInfo {
    /// The scheduler's sample (its `unacked_age` is filled in by the engine).
    pub sample: TcpInfoSample,
    /// The kernel's total retransmission count of the connection.
    pub retransmissions: u64,
    /// Bytes handed to the kernel so far, each counted once: sent (retransmissions not counted
    /// again) plus not yet sent. The same units as `sample.bytes_acked`.
    pub written_bytes: u64,
    /// The kernel's slow-start threshold, segments (`tcpi_snd_ssthresh`; `None` while unset,
    /// before the connection's first loss or timeout).
    pub ssthresh: Option<u32>,
}

/// Reads `TCP_INFO` of a subflow's socket.
pub type TcpInfoFn = Box<dyn Fn() -> io::Result<SubflowInfo> + Send + Sync>;

/// How often an idle subflow's `TCP_INFO` is sampled (RTO back-off shows up here).
const TCP_INFO_PERIOD: std::time::Duration = std::time::Duration::from_millis(10);

/// Read size for passenger/server sockets.
const IO_CHUNK: usize = 64 * 1024;

const OPEN: u8 = 0;
const RESET: u8 = 1;
const CLOSED: u8 = 2;

/// Wake-ups of one flow's pump.
#[derive(Debug, Default)]
pub struct FlowSignal {
    readable: Notify,
    writable: Notify,
    state: AtomicU8,
    opened: Mutex<Option<oneshot::Sender<OpenStatus>>>,
}

impl FlowSignal {
    fn set(&self, state: u8) {
        self.state.store(state, Ordering::SeqCst);
        if state != OPEN {
            // A flow that ends before the peer answered its opening (reset when every path
            // stayed down past the hold time, say) ends the wait for that answer too: the
            // waiting SOCKS5 passenger gets a failure instead of waiting forever.
            drop(self.opened.lock().unwrap_or_else(|p| p.into_inner()).take());
        }
        self.readable.notify_one();
        self.writable.notify_one();
    }
    /// Whether the flow was reset (by the peer or the session).
    pub fn is_reset(&self) -> bool {
        self.state.load(Ordering::SeqCst) == RESET
    }
    /// Wait until the flow has data to read, ended, or was reset.
    pub async fn readable_notified(&self) {
        self.readable.notified().await;
    }
    fn is_open(&self) -> bool {
        self.state.load(Ordering::SeqCst) == OPEN
    }
}

/// One path's subflow as the engine sees it.
#[derive(Debug, Default)]
struct EnginePath {
    /// Wakes the writer of the current subflow (`None`: no subflow).
    writer: Option<Arc<Notify>>,
    /// Wakes the subflow task that a newer subflow replaced.
    cancel: Option<Arc<Notify>>,
    /// This end's epoch in the Hello of the current subflow.
    epoch: u64,
    /// The kernel's retransmission count of the current subflow connection.
    retrans: u64,
    /// The current subflow's slow-start threshold, segments (`None`: unset).
    ssthresh: Option<u32>,
    /// The current subflow is being replaced by one that is already connected, so its end
    /// leaves the path attached (see [`Engine::hand_over`]).
    handing_over: bool,
    /// The subflow task has taken output and not yet finished writing it.
    writing: bool,
    /// Its window was full at the subflow's last `TCP_INFO` sample and the writer waits; the
    /// next frames received on any path wake it to sample again (see [`Engine::run_subflow`]).
    window_full: bool,
}

struct Core {
    session: Session,
    predictor: Box<dyn crate::predictor::TrainPredictor>,
    /// The train context last fed to the predictor, for one that replaces it.
    last_context: Option<polycorn_proto::ContextInfo>,
    /// Cell losses the context reports, against the paths' silence.
    loss_delay: crate::context::CellLossDelay,
    flows: HashMap<u64, Arc<FlowSignal>>,
    /// Per path ([`MAX_PATHS`] of them): its subflow's state in the engine.
    paths: Vec<EnginePath>,
    /// Why [`Engine::end_subflows`] ended the subflows, if it did.
    ended: Option<&'static str>,
    /// When the timer task will wake up by itself (`None`: it sleeps without a deadline).
    timer_at: Option<Instant>,
    /// Flows whose [`Engine::pump`] still runs (it may still be writing a flow's last bytes
    /// after the session closed the flow).
    pumping: std::collections::HashSet<u64>,
    /// Each flow's last data byte through this end, when [`marks::TARGET`] is logged.
    marks: Option<marks::Marks>,
}

impl Core {
    /// Frames arrived: wake the writers of paths whose window was full at their last sample.
    /// Acknowledgements travel with the peer's frames (its flow acknowledgements answer the
    /// data those windows carry), so this is when a window has likely opened; without it the
    /// writer would wait for its next periodic sample ([`TCP_INFO_PERIOD`]) with data waiting,
    /// and a path whose round trip is far shorter than that period would idle most of it.
    fn wake_window_full(&mut self) {
        for path in &mut self.paths {
            if std::mem::take(&mut path.window_full) {
                if let Some(w) = &path.writer {
                    w.notify_one();
                }
            }
        }
    }

    /// Whether the subflow task holding `notify` is still `path`'s current writer.
    fn is_writer(&self, path: u8, notify: &Arc<Notify>) -> bool {
        self.paths
            .get(usize::from(path))
            .and_then(|p| p.writer.as_ref())
            .is_some_and(|w| Arc::ptr_eq(w, notify))
    }
}

struct Shared {
    core: Mutex<Core>,
    timer: Notify,
    epoch: std::time::Instant,
    metrics: std::sync::OnceLock<Arc<crate::metrics::Metrics>>,
    /// The relay's name in the metrics' `relay` label and in log lines about it.
    relay: std::sync::OnceLock<Arc<str>>,
    /// (proxy) Ask the relay to refresh a subflow whose threshold was cut while idle
    /// ([`Engine::ask_refresh_after_idle_cuts`]).
    ask_refresh: std::sync::atomic::AtomicBool,
    events: mpsc::UnboundedSender<Event>,
}

/// A session shared by its subflow, timer and flow tasks. Cheap to clone.
#[derive(Clone)]
pub struct Engine(Arc<Shared>);

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

/// Takes a flow out of [`Core::pumping`] when its [`Engine::pump`] returns or is dropped.
struct Pumping<'a>(&'a Engine, u64);

impl Drop for Pumping<'_> {
    fn drop(&mut self) {
        self.0.lock().pumping.remove(&self.1);
    }
}

/// A handle on a session that does not keep it alive: for observers (metrics samplers, debug
/// traces) that must stop, not hold the session's memory and timer, once it is over.
#[derive(Clone)]
pub struct WeakEngine(std::sync::Weak<Shared>);

impl std::fmt::Debug for WeakEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeakEngine").finish_non_exhaustive()
    }
}

impl WeakEngine {
    /// The engine, while anyone else still holds it.
    pub fn upgrade(&self) -> Option<Engine> {
        self.0.upgrade().map(Engine)
    }
}

/// Why [`Engine::shut_down`] ends the subflows.
const SHUTTING_DOWN: &str = "this side is shutting down";
/// How long a subflow ended on purpose may take to say goodbye ([`goodbye`]).
const GOODBYE_WAIT: std::time::Duration = std::time::Duration::from_millis(1500);

/// Ends a subflow on purpose: writes `last` (a Close frame, or nothing when one was written
/// already), then TLS close_notify, then reads (and drops) whatever the peer still sends until
/// it closes its side too, at most [`GOODBYE_WAIT`]. The reading matters: a socket closed with
/// unread data is reset by the kernel, which throws away what it had not sent yet — the Close
/// frame with it, behind a window of passengers' data.
pub(crate) async fn goodbye<R, W>(reader: &mut R, writer: &mut W, last: &[u8])
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let _ = tokio::time::timeout(GOODBYE_WAIT, async {
        if !last.is_empty() {
            writer.write_all(last).await?;
        }
        writer.shutdown().await?;
        let mut sink = vec![0u8; 16 * 1024];
        while reader.read(&mut sink).await? > 0 {}
        Ok::<(), io::Error>(())
    })
    .await;
}

/// A subflow ended.
#[derive(Debug, thiserror::Error)]
pub enum SubflowError {
    /// Socket or TLS error.
    #[error("subflow I/O: {0}")]
    Io(#[from] io::Error),
    /// The peer broke the protocol.
    #[error("protocol violation: {0}")]
    Proto(#[from] ProtoError),
    /// Orderly end of stream.
    #[error("peer closed the subflow")]
    Closed,
    /// A newer subflow for the same path took over.
    #[error("replaced by a newer subflow for the same path")]
    Replaced,
    /// (relay) The session started afresh under a new epoch (its proxy is another one, or one
    /// that lost the session's state) after this subflow's Hello: connect again.
    #[error("the session started afresh under a new epoch; connecting again")]
    Renewed,
    /// The relay's Hello on this subflow carried an epoch the relay has renewed since: dropped
    /// (the relay connects again).
    #[error("the relay's Hello carried an epoch renewed since")]
    Stale,
    /// (relay) The proxy is another one than the session's, which another path still reaches.
    #[error("the proxy is another one than the session's, which another path still reaches")]
    OtherProxy,
    /// This side ended every subflow of the session ([`Engine::end_subflows`]).
    #[error("ended by this side: {0}")]
    Ended(&'static str),
}

/// Detaches a path when its subflow task ends or is dropped (unless a newer subflow owns it).
struct DetachGuard<'a> {
    engine: &'a Engine,
    path: u8,
    notify: Arc<Notify>,
}

impl Drop for DetachGuard<'_> {
    fn drop(&mut self) {
        let now = self.engine.now();
        let mut c = self.engine.lock();
        let p = usize::from(self.path);
        if c.is_writer(self.path, &self.notify) {
            let slot = &mut c.paths[p];
            slot.writer = None;
            slot.cancel = None;
            if std::mem::take(&mut slot.handing_over) {
                // The next subflow attaches right away and reinjects what this one carried.
                return;
            }
            let _ = c.session.detach_path(now, self.path);
            self.engine.drive(&mut c, now);
        }
    }
}

impl Engine {
    /// A new engine around `session`. Events the engine does not handle itself (open
    /// requests, open results, context, path status, session loss) go to the returned
    /// receiver.
    pub fn new(
        session: Session,
        predictor: Box<dyn crate::predictor::TrainPredictor>,
    ) -> (Engine, mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let unix_epoch_us = marks::wall_us();
        let mut paths = Vec::new();
        paths.resize_with(MAX_PATHS, EnginePath::default);
        let e = Engine(Arc::new(Shared {
            core: Mutex::new(Core {
                session,
                predictor,
                last_context: None,
                loss_delay: Default::default(),
                flows: HashMap::new(),
                paths,
                ended: None,
                timer_at: None,
                pumping: std::collections::HashSet::new(),
                marks: tracing::enabled!(target: marks::TARGET, tracing::Level::DEBUG)
                    .then(marks::Marks::default),
            }),
            timer: Notify::new(),
            epoch: std::time::Instant::now(),
            metrics: std::sync::OnceLock::new(),
            relay: std::sync::OnceLock::new(),
            ask_refresh: std::sync::atomic::AtomicBool::new(false),
            events: tx,
        }));
        {
            let now = e.now();
            let mut c = e.lock();
            c.session.set_wall_clock(now, unix_epoch_us);
        }
        (e, rx)
    }

    /// A handle that does not keep this session alive.
    pub fn downgrade(&self) -> WeakEngine {
        WeakEngine(Arc::downgrade(&self.0))
    }

    /// Count passengers' bytes in `metrics` (set once), and what is counted per relay under
    /// `relay`, its name.
    pub fn set_metrics(&self, metrics: Arc<crate::metrics::Metrics>, relay: &str) {
        let _ = self.0.metrics.set(metrics);
        let _ = self.0.relay.set(relay.into());
    }

    /// The metrics set with [`Engine::set_metrics`], if any.
    pub fn metrics(&self) -> Option<Arc<crate::metrics::Metrics>> {
        self.0.metrics.get().cloned()
    }

    /// The engine's clock.
    pub fn now(&self) -> Instant {
        Instant::from_micros(self.0.epoch.elapsed().as_micros() as u64)
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        self.0.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Run `f` on the session, then drive it.
    pub fn with<R>(&self, f: impl FnOnce(&mut Session, Instant) -> R) -> R {
        let now = self.now();
        let mut c = self.lock();
        let r = f(&mut c.session, now);
        self.drive(&mut c, now);
        r
    }

    /// Read-only look at the session (metrics, tests).
    pub fn inspect<R>(&self, f: impl FnOnce(&Session) -> R) -> R {
        f(&self.lock().session)
    }

    /// Feed train context to the handover predictor (then the scheduler runs with it).
    pub fn on_context(&self, ctx: &polycorn_proto::ContextInfo) {
        let now = self.now();
        let mut c = self.lock();
        c.predictor.on_context(now, ctx);
        c.last_context = Some(ctx.clone());
        let core = &mut *c;
        let lost = core
            .loss_delay
            .on_fix(&ctx.cells, |p| core.session.path_silent_for(now, p));
        // Measured only while the paths are probed often: an idle session's probes, seconds
        // apart, leave a silence that says nothing of when the path went dark.
        if core.session.probe_interval() <= FAST_PROBES {
            let relay = self.0.relay.get().map_or("", |r| r);
            for (path, silent) in lost {
                if let Some(m) = self.0.metrics.get() {
                    m.cell_loss_reported(relay, silent.as_secs_f64());
                }
                info!(
                    relay,
                    path,
                    silent_ms = silent.as_millis(),
                    "modem reported without a cell: the path had been silent for {} ms \
                     (the monitor's lag, within a fix interval)",
                    silent.as_millis()
                );
            }
        }
        self.drive(&mut c, now);
    }

    /// Puts `predictor` in place of the session's handover predictor (a LinkDB rebuilt by a
    /// reload). It is first given the last train context the session had, so it predicts from
    /// the next decision on, where the train is, rather than from the next fix.
    pub fn replace_predictor(&self, mut predictor: Box<dyn crate::predictor::TrainPredictor>) {
        let now = self.now();
        let mut c = self.lock();
        if let Some(ctx) = &c.last_context {
            predictor.on_context(now, ctx);
        }
        c.predictor = predictor;
        self.drive(&mut c, now);
    }

    fn drive(&self, c: &mut Core, now: Instant) {
        let Core {
            session,
            predictor,
            flows,
            paths,
            ..
        } = c;
        session.poll_transmit(now, &**predictor);
        for (p, slot) in paths.iter().enumerate() {
            if let Some(w) = &slot.writer {
                if session.has_output(p as u8) {
                    w.notify_one();
                }
            }
        }
        while let Some(e) = session.poll_sched_event() {
            log_sched_event(&e, session);
        }
        while let Some(ev) = session.poll_event() {
            match ev {
                Event::Readable(f) => {
                    if let Some(s) = flows.get(&f) {
                        s.readable.notify_one();
                    }
                }
                Event::Writable(f) => {
                    if let Some(s) = flows.get(&f) {
                        s.writable.notify_one();
                    }
                }
                Event::FlowReset { flow, .. } => {
                    if let Some(s) = flows.remove(&flow) {
                        s.set(RESET);
                    }
                    let _ = self.0.events.send(ev);
                }
                Event::FlowClosed(flow) => {
                    if let Some(s) = flows.remove(&flow) {
                        s.set(CLOSED);
                    }
                }
                Event::FlowOpened { flow, status } => {
                    if let Some(s) = flows.get(&flow) {
                        if let Some(tx) = s.opened.lock().unwrap_or_else(|p| p.into_inner()).take()
                        {
                            let _ = tx.send(status);
                        }
                        if status != OpenStatus::Ok {
                            s.set(RESET);
                            flows.remove(&flow);
                        }
                    }
                    let _ = self.0.events.send(ev);
                }
                Event::FlowRequested { flow, .. } => {
                    flows.insert(flow, Arc::new(FlowSignal::default()));
                    let _ = self.0.events.send(ev);
                }
                other => {
                    let _ = self.0.events.send(other);
                }
            }
        }
        // Wake the timer only if it must run earlier than it planned to.
        if let Some(t) = session.poll_timeout() {
            if c.timer_at.is_none_or(|at| t < at) {
                c.timer_at = Some(t);
                self.0.timer.notify_one();
            }
        }
    }

    /// Runs the session's timers until the engine is dropped by everyone else.
    pub async fn run_timer(self) {
        loop {
            let sleep = {
                let mut c = self.lock();
                let deadline = c.session.poll_timeout();
                c.timer_at = deadline;
                let now = self.now();
                match deadline {
                    Some(t) => std::time::Duration::from_micros(
                        t.as_micros().saturating_sub(now.as_micros()),
                    ),
                    None => std::time::Duration::from_secs(1),
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(sleep) => {}
                _ = self.0.timer.notified() => {}
            }
            if Arc::strong_count(&self.0) <= 1 {
                return;
            }
            let now = self.now();
            let mut c = self.lock();
            // The loop recomputes the deadline right after: this drive need not wake us.
            c.timer_at = Some(Instant::ZERO);
            self.drive(&mut c, now);
        }
    }

    /// Carry `path` over an established, handshaken byte stream until it fails, the peer closes
    /// it, or a newer subflow for the same path replaces it. `initial` holds bytes already read
    /// after the Hello; `epochs` are (this end's, the peer's) as the two Hellos carried them (a
    /// new peer epoch resets what the session said to the peer's earlier incarnation; a relay's
    /// Hello of an epoch since renewed ends the subflow at once, see
    /// [`Session::on_peer_hello`]). The path is attached for the duration and detached (its data
    /// reinjected on the other paths) at the end, also when this future is dropped.
    pub async fn run_subflow<R, W>(
        &self,
        path: u8,
        (ours, peer_epoch): (u64, u64),
        initial: Vec<u8>,
        mut reader: R,
        mut writer: W,
        tcp_info: TcpInfoFn,
    ) -> SubflowError
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        if usize::from(path) >= MAX_PATHS {
            return SubflowError::Proto(ProtoError::BadPath(path));
        }
        let close = self.lock().session.close_frame().map(<[u8]>::to_vec);
        if let Some(close) = close {
            // A subflow that connected while this side shuts down: the peer, which has just
            // taken it, is told the session is closed, as on the others.
            goodbye(&mut reader, &mut writer, &close).await;
            return SubflowError::Ended(SHUTTING_DOWN);
        }
        let notify = Arc::new(Notify::new());
        let cancel = Arc::new(Notify::new());
        {
            let now = self.now();
            let mut c = self.lock();
            let flows = c.session.open_flows();
            match c.session.on_peer_hello(now, ours, peer_epoch) {
                HelloOutcome::Attach => {}
                HelloOutcome::PeerRestarted => warn!(
                    path,
                    flows_reset = flows,
                    "the peer lost this session's state (restarted, or dropped the session after \
                     every path was down longer than the hold time); its open flows were reset"
                ),
                HelloOutcome::Renewed => {
                    warn!(
                        path,
                        flows_reset = flows,
                        epoch = format!("{:016x}", c.session.epoch()),
                        "the proxy is another one, or lost this session's state; its open flows \
                         were reset and the session starts afresh under a new epoch"
                    );
                    Self::end_stale_subflows(&mut c);
                    if let Some(m) = self.0.metrics.get() {
                        m.session_renewals.inc();
                    }
                    return SubflowError::Renewed;
                }
                HelloOutcome::Stale => return SubflowError::Stale,
                HelloOutcome::Elsewhere => return SubflowError::OtherProxy,
            }
            let slot = &mut c.paths[usize::from(path)];
            slot.writing = false;
            slot.window_full = false;
            if let Some(old) = slot.cancel.replace(cancel.clone()) {
                old.notify_one();
            }
            slot.handing_over = false;
            slot.epoch = ours;
            // A subflow accepted after `end_subflows` (the relay was let in again).
            c.ended = None;
            if c.session.path_attached(path) {
                let _ = c.session.detach_path(now, path);
            }
            c.paths[usize::from(path)].writer = Some(notify.clone());
            if let Err(e) = c.session.attach_path(now, path) {
                return SubflowError::Proto(e);
            }
            self.drive(&mut c, now);
        }
        let _guard = DetachGuard {
            engine: self,
            path,
            notify: notify.clone(),
        };
        let read_loop = async {
            let mut buf: Vec<u8> = initial;
            buf.reserve(256 * 1024);
            loop {
                let (res, used) = {
                    let now = self.now();
                    let mut c = self.lock();
                    let mut used = 0;
                    let res = loop {
                        match decode(&buf[used..]) {
                            Ok(Some((frame, k))) => {
                                if let (
                                    Some(m),
                                    polycorn_proto::frame::Frame::Data {
                                        flow, offset, data, ..
                                    },
                                ) = (&mut c.marks, &frame)
                                {
                                    if !data.is_empty() {
                                        let end = offset + data.len() as u64;
                                        m.read(*flow, path, end, marks::wall_us());
                                    }
                                }
                                if let Err(e) = c.session.on_frame(now, path, frame) {
                                    break Err(SubflowError::Proto(e));
                                }
                                used += k;
                            }
                            Ok(None) => break Ok(()),
                            Err(e) => break Err(SubflowError::Proto(e.into())),
                        }
                    };
                    if used > 0 {
                        self.drive(&mut c, now);
                        c.wake_window_full();
                    }
                    (res, used)
                };
                res?;
                buf.drain(..used);
                if buf.capacity() - buf.len() < IO_CHUNK {
                    buf.reserve(IO_CHUNK);
                }
                let n = reader.read_buf(&mut buf).await?;
                if n == 0 {
                    return Err::<(), SubflowError>(SubflowError::Closed);
                }
            }
        };
        let write_loop = async {
            let mut out: Vec<u8> = Vec::new();
            let mut log = WriteLog::default();
            let mut watch = RefreshWatch::default();
            let asks = self.0.ask_refresh.load(Ordering::Relaxed);
            let mut tick = tokio::time::interval(TCP_INFO_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = notify.notified() => {}
                    _ = tick.tick() => {}
                }
                loop {
                    {
                        let mut c = self.lock();
                        // A newer subflow may have replaced this one since the last await; the
                        // path's output is then the new subflow's. Taking it here would write
                        // chunks the session counts as sent on the path into a socket about to
                        // close: never delivered, and — since the new subflow has nothing in
                        // flight — never retransmitted or reinjected either (a flow stalls).
                        if !c.is_writer(path, &notify) {
                            return Err(SubflowError::Replaced);
                        }
                        c.session.take_output(path, &mut out);
                        if let Some(m) = &mut c.marks {
                            m.taken(path, &out, marks::wall_us());
                        }
                        c.paths[usize::from(path)].writing = !out.is_empty();
                    }
                    let wrote = !out.is_empty();
                    if wrote {
                        // A socket that cannot take the write (its buffer full: the path went
                        // silent with bytes queued) must not blind the scheduler to the path:
                        // TCP_INFO is still read every tick while the write waits, so the
                        // path's RTOs trigger reinjection of what it holds.
                        let write = async {
                            writer.write_all(&out).await?;
                            writer.flush().await
                        };
                        tokio::pin!(write);
                        loop {
                            tokio::select! {
                                r = &mut write => {
                                    r?;
                                    break;
                                }
                                _ = tick.tick() => {
                                    let info = tcp_info()?;
                                    let now = self.now();
                                    let mut sample = info.sample;
                                    sample.unacked_age = log.unacked_age(sample.bytes_acked, now);
                                    let mut c = self.lock();
                                    if !c.is_writer(path, &notify) {
                                        return Err(SubflowError::Replaced);
                                    }
                                    c.session.on_tcp_info(now, path, &sample)?;
                                    self.drive(&mut c, now);
                                }
                            }
                        }
                    }
                    let info = tcp_info()?;
                    let more = {
                        let now = self.now();
                        if wrote {
                            log.wrote(info.written_bytes, now);
                        }
                        let mut sample = info.sample;
                        sample.unacked_age = log.unacked_age(sample.bytes_acked, now);
                        let mut c = self.lock();
                        // Nor does the old socket's TCP_INFO describe the path any more.
                        if !c.is_writer(path, &notify) {
                            return Err(SubflowError::Replaced);
                        }
                        c.paths[usize::from(path)].writing = false;
                        c.session.on_tcp_info(now, path, &sample)?;
                        let slot = &mut c.paths[usize::from(path)];
                        slot.retrans = info.retransmissions;
                        slot.ssthresh = info.ssthresh;
                        if asks {
                            self.watch_refresh(&mut c, now, path, &info, &mut watch)?;
                        }
                        self.drive(&mut c, now);
                        let more = c.session.has_output(path);
                        c.paths[usize::from(path)].window_full =
                            !more && c.session.path_window_full(path);
                        more
                    };
                    if !more {
                        break;
                    }
                }
            }
            #[allow(unreachable_code)]
            Ok::<(), SubflowError>(())
        };
        let err = tokio::select! {
            // A replaced subflow stops before its loops run again.
            biased;
            _ = cancel.notified() => {
                let c = self.lock();
                match c.ended {
                    Some(why) => SubflowError::Ended(why),
                    None if c.session.epoch() != ours => SubflowError::Renewed,
                    None => SubflowError::Replaced,
                }
            }
            r = read_loop => r.err().unwrap_or(SubflowError::Closed),
            r = write_loop => r.err().unwrap_or(SubflowError::Closed),
        };
        if matches!(err, SubflowError::Ended(_)) {
            goodbye(&mut reader, &mut writer, &[]).await;
        }
        err
    }

    /// Let the flows open now finish, for at most `within`, before [`Engine::shut_down`]: waits
    /// until each of them has ended (the session closed it and its [`Engine::pump`] returned)
    /// or `within` has passed. Flows opened meanwhile are carried as usual but not waited for.
    /// Returns how many of the flows open at the call were still open at its end (with a zero
    /// `within`: how many are open).
    pub async fn drain(&self, within: std::time::Duration) -> usize {
        let deadline = tokio::time::Instant::now() + within;
        let ids: std::collections::HashSet<u64> = {
            let c = self.lock();
            c.flows.keys().chain(c.pumping.iter()).copied().collect()
        };
        loop {
            let left = {
                let c = self.lock();
                ids.iter()
                    .filter(|f| c.flows.contains_key(f) || c.pumping.contains(f))
                    .count()
            };
            if left == 0 || tokio::time::Instant::now() >= deadline {
                return left;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Close the session because this side shuts down, and end its subflows in order: a Close
    /// frame goes out on every path (the peer resets its side of the passengers' connections at
    /// once instead of holding them for its hold time), then each subflow ends with a TLS
    /// close_notify and waits for the peer to close its side. Open flows are reset here too.
    /// Waits until every subflow has ended, at most `grace` (a path in a blackout cannot take
    /// its Close). Returns how many subflows were still running when `grace` ran out.
    pub async fn shut_down(&self, message: &str, grace: std::time::Duration) -> usize {
        let deadline = tokio::time::Instant::now() + grace;
        self.with(|s, now| s.close(now, CloseReason::Shutdown, message));
        let running = |until_written: bool| {
            let c = self.lock();
            (c.paths.iter().enumerate())
                .filter(|(p, slot)| {
                    slot.writer.is_some()
                        && (!until_written || slot.writing || c.session.has_output(*p as u8))
                })
                .count()
        };
        while running(true) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        self.end_subflows(SHUTTING_DOWN);
        while running(false) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        running(false)
    }

    /// (proxy) Tell the relay this end drains before it stops ([`Session::announce_draining`]),
    /// so it opens new flows at the next proxy.
    pub fn announce_draining(&self) {
        self.with(|s, now| {
            if let Err(e) = s.announce_draining(now) {
                tracing::debug!(error = %e, "no drain announcement");
            }
        });
    }

    /// (relay) Whether the proxy announced its drain and has not closed the session since
    /// ([`Session::peer_draining`]).
    pub fn peer_draining(&self) -> bool {
        self.lock().session.peer_draining()
    }

    /// (relay) Count a passenger connection that waited out the proxy's drain.
    pub fn note_held(&self) {
        if let Some(m) = self.0.metrics.get() {
            m.flows_held.inc();
        }
    }

    /// (relay) A move to another proxy address (failover): the session starts afresh under a
    /// new epoch ([`Session::renew_epoch`]), so a proxy that still holds its earlier state
    /// starts afresh too when the relay comes back to it; counted.
    pub fn fail_over(&self) {
        let epoch = {
            let now = self.now();
            let mut c = self.lock();
            let epoch = c.session.renew_epoch(now);
            Self::end_stale_subflows(&mut c);
            epoch
        };
        tracing::info!(
            epoch = format!("{epoch:016x}"),
            "session starts afresh for the next proxy"
        );
        if let Some(m) = self.0.metrics.get() {
            m.proxy_failovers.inc();
        }
    }

    /// Ends the subflows whose Hello carried an epoch since renewed: they belong to the
    /// conversation with an earlier proxy (their [`Engine::run_subflow`] calls return
    /// [`SubflowError::Renewed`]).
    fn end_stale_subflows(c: &mut Core) {
        let epoch = c.session.epoch();
        for slot in &c.paths {
            if let Some(cancel) = slot.cancel.as_ref().filter(|_| slot.epoch != epoch) {
                cancel.notify_one();
            }
        }
    }

    /// Whether the peer closed the session ([`Event::PeerClosed`]): its subflows' ends are
    /// expected then.
    pub fn peer_closed(&self) -> bool {
        self.lock().session.peer_closed()
    }

    /// Ends every subflow the session has now, for `why` (their [`Engine::run_subflow`] calls
    /// return [`SubflowError::Ended`]); their paths detach as after any subflow's end, so the
    /// session then waits out its hold time like one whose relay is gone. The proxy calls it on
    /// the session of a relay that was revoked.
    pub fn end_subflows(&self, why: &'static str) {
        let mut c = self.lock();
        c.ended = Some(why);
        for cancel in c.paths.iter().filter_map(|p| p.cancel.as_ref()) {
            cancel.notify_one();
        }
    }

    /// `path`'s current subflow is about to be dropped for a new one that is already connected
    /// and will run next (make before break). Its end then leaves the path attached, so what it
    /// carried is reinjected when the new subflow attaches, with the new subflow as one of the
    /// places it may go, instead of onto the other paths at once. The shell must call
    /// [`Engine::run_subflow`] for the path right after dropping the old one.
    pub fn hand_over(&self, path: u8) {
        if let Some(slot) = self.lock().paths.get_mut(usize::from(path)) {
            slot.handing_over = true;
        }
    }

    /// The kernel's retransmission count of `path`'s current subflow connection.
    pub fn path_retransmissions(&self, path: u8) -> u64 {
        self.lock()
            .paths
            .get(usize::from(path))
            .map_or(0, |p| p.retrans)
    }

    /// The kernel's slow-start threshold of `path`'s current subflow, segments, as last read
    /// (`None`: unset, no loss or timeout on that connection yet, or no subflow yet). A
    /// subflow outlives passenger connections, so a threshold set by a timeout while the path
    /// was idle makes the next download grow its window linearly from there.
    pub fn path_ssthresh(&self, path: u8) -> Option<u32> {
        self.lock()
            .paths
            .get(usize::from(path))
            .and_then(|p| p.ssthresh)
    }

    /// (proxy) Ask the relay for a fresh subflow on a path whose slow-start threshold a
    /// retransmission timeout cut while the path was idle ([`RefreshWatch`]; relays of
    /// protocol [`polycorn_proto::REFRESH_VERSION`] or later, see
    /// [`Session::set_peer_version`](polycorn_proto::Session::set_peer_version)). Off by
    /// default; takes effect for subflows that start after it.
    pub fn ask_refresh_after_idle_cuts(&self, on: bool) {
        self.0.ask_refresh.store(on, Ordering::Relaxed);
    }

    /// One sample of `path`'s subflow for its [`RefreshWatch`]; asks the relay when due.
    fn watch_refresh(
        &self,
        c: &mut Core,
        now: Instant,
        path: u8,
        info: &SubflowInfo,
        watch: &mut RefreshWatch,
    ) -> Result<(), ProtoError> {
        let counters = c.session.path_counters(path).unwrap_or_default();
        let s = &info.sample;
        let probes_only = crate::sockopt::probes_only(
            s.unacked_bytes / u64::from(s.mss_bytes.max(1)),
            s.notsent_bytes,
        );
        let Some(ssthresh) = watch.on_sample(
            now,
            counters.tx_bytes + counters.rx_bytes,
            info.ssthresh,
            probes_only,
            probes_only && s.rto_backoff == 0,
        ) else {
            return Ok(());
        };
        if !c.session.path_usable(path) || !c.session.ask_refresh(now, path, ssthresh)? {
            return Ok(());
        }
        watch.asked(now);
        if let Some(m) = self.0.metrics.get() {
            m.refresh_asked.inc();
        }
        info!(
            relay = self.0.relay.get().map_or("", |r| r),
            path,
            path_name = %c.session.path_name(path).unwrap_or("-"),
            ssthresh,
            "a timeout cut the slow-start threshold of an idle subflow; asked the relay for a \
             fresh connection"
        );
        Ok(())
    }

    /// (relay) Open a flow; the receiver yields the proxy's answer.
    pub fn open_flow(
        &self,
        user: std::net::IpAddr,
        dst: Destination,
    ) -> Result<(u64, Arc<FlowSignal>, oneshot::Receiver<OpenStatus>), ProtoError> {
        let now = self.now();
        let mut c = self.lock();
        let flow = c.session.open_flow(now, user, dst)?;
        let (tx, rx) = oneshot::channel();
        let sig = Arc::new(FlowSignal {
            opened: Mutex::new(Some(tx)),
            ..FlowSignal::default()
        });
        c.flows.insert(flow, sig.clone());
        self.drive(&mut c, now);
        Ok((flow, sig, rx))
    }

    /// (proxy) The signal of a requested flow.
    pub fn flow_signal(&self, flow: u64) -> Option<Arc<FlowSignal>> {
        self.lock().flows.get(&flow).cloned()
    }

    /// Reset `flow` from this side (local socket failed).
    pub fn reset_flow(&self, flow: u64, reason: ResetReason) {
        let now = self.now();
        let mut c = self.lock();
        let _ = c.session.reset_flow(now, flow, reason);
        if let Some(s) = c.flows.remove(&flow) {
            s.set(RESET);
        }
        self.drive(&mut c, now);
    }

    /// Move bytes between `stream` and `flow` in both directions until both are finished or
    /// the flow is reset (then the socket is closed with RST). Returns whether it ended cleanly.
    /// `user` is the passenger; `stream_is_passenger` says whether bytes read from `stream`
    /// travel up (relay) or down (proxy), for per-passenger byte counts.
    pub async fn pump(
        &self,
        flow: u64,
        sig: Arc<FlowSignal>,
        stream: TcpStream,
        user: std::net::IpAddr,
        stream_is_passenger: bool,
    ) -> bool {
        let counters = self.0.metrics.get().map(|m| {
            let u = m.user(user);
            if stream_is_passenger {
                (u.up_bytes, u.down_bytes)
            } else {
                (u.down_bytes, u.up_bytes)
            }
        });
        let _ = stream.set_nodelay(true);
        self.lock().pumping.insert(flow);
        let _pumping = Pumping(self, flow);
        // Abortive close until the flow has ended in order: if this process dies (a crash, an
        // OOM kill) the kernel then resets the connection instead of closing it with a FIN,
        // which a passenger (or a server) could take for the end of a complete answer.
        let _ = socket2::SockRef::from(&stream).set_linger(Some(std::time::Duration::ZERO));
        let marking = self.lock().marks.is_some();
        let peer = stream.peer_addr().ok();
        let mut first_write_us = None;
        let (mut rd, mut wr) = stream.into_split();
        let upstream = async {
            let mut buf = vec![0u8; IO_CHUNK];
            loop {
                if !sig.is_open() {
                    return false;
                }
                let cap = self.with(|s, now| {
                    let cap = s.send_capacity(flow);
                    if cap == 0 {
                        // Marks the flow blocked so that an ack wakes us.
                        let _ = s.send(now, flow, &[]);
                    }
                    cap
                });
                if cap == 0 {
                    sig.writable.notified().await;
                    continue;
                }
                let want = cap.min(IO_CHUNK);
                let r = loop {
                    tokio::select! {
                        r = rd.read(&mut buf[..want]) => break r,
                        _ = sig.writable.notified() => {
                            if !sig.is_open() {
                                return false;
                            }
                        }
                    }
                };
                match r {
                    Ok(0) => {
                        self.with(|s, now| {
                            let _ = s.send_fin(now, flow);
                        });
                        return true;
                    }
                    Ok(n) => {
                        if let Some((read, _)) = &counters {
                            read.inc_by(n as u64);
                        }
                        let ok = self.with(|s, now| s.send(now, flow, &buf[..n]).is_ok());
                        if !ok {
                            return false;
                        }
                    }
                    Err(_) => {
                        self.reset_flow(flow, ResetReason::PeerReset);
                        return false;
                    }
                }
            }
        };
        let downstream = async {
            let mut buf = vec![0u8; IO_CHUNK];
            loop {
                if sig.is_reset() {
                    return false;
                }
                let r = self.with(|s, now| s.read(now, flow, &mut buf));
                match r {
                    ReadOutcome::Data(n) => {
                        if let Some((_, written)) = &counters {
                            written.inc_by(n as u64);
                        }
                        if wr.write_all(&buf[..n]).await.is_err() {
                            self.reset_flow(flow, ResetReason::PeerReset);
                            return false;
                        }
                        if marking {
                            first_write_us.get_or_insert_with(marks::wall_us);
                        }
                    }
                    ReadOutcome::Eof => {
                        let _ = wr.shutdown().await;
                        return true;
                    }
                    ReadOutcome::WouldBlock => {
                        if !sig.is_open() && !sig.is_reset() {
                            // Closed: everything was delivered.
                            return true;
                        }
                        sig.readable.notified().await;
                    }
                }
            }
        };
        let (a, b) = tokio::join!(upstream, downstream);
        if marking {
            self.log_marks(flow, peer, first_write_us);
        }
        if sig.is_reset() || !(a && b) {
            if let Ok(stream) = rd.reunite(wr) {
                let _ = socket2::SockRef::from(&stream).set_linger(Some(std::time::Duration::ZERO));
            }
            if !sig.is_reset() {
                self.reset_flow(flow, ResetReason::PeerReset);
            }
            return false;
        }
        // Ended in order (both FINs): close normally, so what is still queued gets delivered.
        if let Ok(stream) = rd.reunite(wr) {
            let _ = socket2::SockRef::from(&stream).set_linger(None);
        }
        true
    }
}

impl Engine {
    /// The [`marks`] line of `flow`, whose local socket's peer is `peer` and whose pump first
    /// wrote into it at `first_write_us`.
    fn log_marks(
        &self,
        flow: u64,
        peer: Option<std::net::SocketAddr>,
        first_write_us: Option<u64>,
    ) {
        let Some(m) = self.lock().marks.as_mut().map(|m| m.take(flow)) else {
            return;
        };
        let (recv_path, recv_us) = m.recv.map_or(("-".into(), "-".into()), |(p, us)| {
            (p.to_string(), us.to_string())
        });
        debug!(
            target: marks::TARGET,
            flow,
            peer = %peer.map_or("-".into(), |p| p.to_string()),
            first_write_us = %first_write_us.map_or("-".into(), |us| us.to_string()),
            sent_end = m.sent_end,
            sent = %m.sent_field(),
            recv_end = m.recv_end,
            recv_path = %recv_path,
            recv_us = %recv_us,
            "flow marks"
        );
    }
}

/// One log line per scheduler event: when a prediction starts and stops holding a path back,
/// and every reinjection with its trigger.
/// `session` names the path (`path_name`: the relay's `[[path]] name`, `-` if it has none).
fn log_sched_event(e: &polycorn_sched::SchedEvent, session: &Session) {
    use polycorn_sched::{Reason, SchedEvent};
    let name = |path: polycorn_sched::PathId| {
        u8::try_from(path.index())
            .ok()
            .and_then(|p| session.path_name(p))
            .unwrap_or("-")
            .to_owned()
    };
    match *e {
        SchedEvent::PathHeld {
            path,
            stage,
            reason,
            ..
        } => match reason {
            Reason::HandoverFailureSoon { t_hof, threshold } => info!(
                path = path.index(),
                path_name = %name(path),
                stage,
                failure_in_ms = t_hof.as_secs_f64() * 1e3,
                threshold_ms = threshold.as_secs_f64() * 1e3,
                "path held back: handover failure predicted"
            ),
            other => info!(
                path = path.index(),
                path_name = %name(path),
                stage,
                reason = %other,
                "path held back on a prediction"
            ),
        },
        SchedEvent::PathReleased {
            path,
            stage,
            held_for,
            ..
        } => info!(
            path = path.index(),
            path_name = %name(path),
            stage,
            held_ms = held_for.as_secs_f64() * 1e3,
            "path released"
        ),
        // Stuck chunks move a few at a time while a path's queue drains: one line each would
        // flood the log (their count is in the metrics).
        SchedEvent::Reinjected {
            path,
            trigger: trigger @ ReinjectTrigger::Stuck,
            chunks,
            bytes,
            ..
        } => debug!(
            path = path.index(),
            path_name = %name(path),
            %trigger,
            chunks,
            bytes,
            "reinjected chunks stuck on a path"
        ),
        SchedEvent::Reinjected {
            path,
            trigger,
            chunks,
            bytes,
            ..
        } => info!(
            path = path.index(),
            path_name = %name(path),
            %trigger,
            chunks,
            bytes,
            "reinjected a path's unacknowledged chunks"
        ),
    }
}

pub mod marks;
#[cfg(test)]
mod tests;
