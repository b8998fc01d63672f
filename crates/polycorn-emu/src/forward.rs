//! The N-path forwarder: moves packets between each path's relay-side and proxy-side TUN device
//! through one link model per direction, in real time.
//!
//! One thread, one `ppoll` over all TUN descriptors with a timeout set to the earliest next
//! event of any link (sub-millisecond), so delivery times follow the model to within the
//! scheduling jitter of the machine. Packet bytes wait in a FIFO per direction next to the
//! model, which only sees ids and lengths; the model is FIFO, so delivered ids come out in
//! order and skipped ids were dropped.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use nix::poll::{PollFd, PollFlags};
use nix::sys::time::TimeSpec;
use polycorn_link::link::{EnqueueOutcome, Link, LinkConfig, Transit};

use crate::netns::{InNamespace, NetError};
use crate::seqtrack::SeqTrack;
use crate::testbed::TestbedSpec;

/// Largest packet read from a TUN device (its MTU is 1500; leave room).
const MAX_PACKET: usize = 65_536;
/// Longest sleep between checks of the stop flag.
const MAX_WAIT_US: u64 = 50_000;

/// Emulator errors.
#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    /// Namespace or command failure.
    #[error(transparent)]
    Net(#[from] NetError),
    /// A TUN device could not be opened.
    #[error("cannot attach to TUN device {dev} in {ns}: {reason}")]
    Tun {
        /// Device name.
        dev: String,
        /// Namespace.
        ns: String,
        /// Why.
        reason: String,
    },
    /// A link model was refused.
    #[error("path {path} {direction}: {reason}")]
    Model {
        /// Path index.
        path: usize,
        /// "uplink" or "downlink".
        direction: &'static str,
        /// Why.
        reason: String,
    },
    /// I/O on a TUN device failed.
    #[error("path {path}: {what}: {source}")]
    Io {
        /// Path index.
        path: usize,
        /// What was being done.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The model count does not match the testbed's paths.
    #[error("{models} link models for a testbed with {paths} paths")]
    PathCount {
        /// Models given.
        models: usize,
        /// Paths in the testbed.
        paths: usize,
    },
}

/// How one direction of a path behaves.
#[derive(Debug, Clone)]
#[allow(
    clippy::large_enum_variant,
    reason = "built once per path and direction at start; boxing would only add an indirection"
)]
pub enum DirectionModel {
    /// Forward immediately (for throughput benchmarks of the forwarder itself).
    Unshaped,
    /// Apply a link model.
    Shaped(LinkConfig),
}

/// Both directions of one path.
#[derive(Debug, Clone)]
pub struct PathModel {
    /// Relay → proxy.
    pub uplink: DirectionModel,
    /// Proxy → relay.
    pub downlink: DirectionModel,
}

/// Per-direction counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirStats {
    /// Packets read from the ingress TUN.
    pub packets_in: u64,
    /// Packets written to the egress TUN.
    pub packets_out: u64,
    /// Bytes written to the egress TUN.
    pub bytes_out: u64,
    /// Packets the model dropped (loss, outage, queue).
    pub dropped: u64,
    /// Writes the egress TUN refused (its queue was full).
    pub write_failures: u64,
}

/// A packet a recording link delivered: its way over the link, and when the last byte it
/// carries was first offered to the link (earlier than `transit.sent_us` for a TCP
/// retransmission).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delivered {
    /// Its way over the link, µs since the emulator's start.
    pub transit: Transit,
    /// When its last byte was first offered, µs since the emulator's start.
    pub first_offered_us: u64,
}

struct Direction {
    model: Option<Link>,
    /// Accepted packets: id, when offered (µs), when its last byte was first offered (µs), the
    /// bytes.
    packets: VecDeque<(u64, u64, u64, Vec<u8>)>,
    next_id: u64,
    stats: DirStats,
    /// When recording: every packet delivered, in order, and the first offers of TCP bytes.
    record: Option<(Vec<Delivered>, SeqTrack)>,
}

impl Direction {
    fn new(m: &DirectionModel, path: usize, name: &'static str) -> Result<Self, EmuError> {
        let model = match m {
            DirectionModel::Unshaped => None,
            DirectionModel::Shaped(cfg) => {
                Some(Link::new(cfg.clone()).map_err(|e| EmuError::Model {
                    path,
                    direction: name,
                    reason: e.to_string(),
                })?)
            }
        };
        Ok(Direction {
            model,
            packets: VecDeque::new(),
            next_id: 0,
            stats: DirStats::default(),
            record: None,
        })
    }
}

struct EmuPath {
    relay: File,
    proxy: File,
    up: Direction,
    down: Direction,
}

/// A running emulator attached to a testbed's TUN devices.
pub struct Emulator {
    paths: Vec<EmuPath>,
    start: Instant,
    start_wall: SystemTime,
    stop: Arc<AtomicBool>,
    buf: Vec<u8>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator")
            .field("paths", &self.paths.len())
            .finish_non_exhaustive()
    }
}

/// Open the existing TUN device `dev` in namespace `ns`, non-blocking.
fn open_tun(ns: &str, dev: &str) -> Result<File, EmuError> {
    let err = |reason: String| EmuError::Tun {
        dev: dev.into(),
        ns: ns.into(),
        reason,
    };
    let device = {
        let _inside = InNamespace::enter(ns)?;
        let mut cfg = tun::Configuration::default();
        cfg.tun_name(dev).layer(tun::Layer::L3);
        tun::create(&cfg).map_err(|e| err(e.to_string()))?
    };
    device.set_nonblock().map_err(|e| err(e.to_string()))?;
    let fd = device.into_raw_fd();
    // SAFETY: `into_raw_fd` hands over sole ownership of an open descriptor; wrapping it in an
    // `OwnedFd` makes it closed exactly once, when the `File` drops.
    #[allow(unsafe_code)]
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(File::from(owned))
}

impl Emulator {
    /// Attach to every path of testbed `spec` with one model per path. `stop` ends [`run`](Self::run).
    pub fn attach(
        spec: &TestbedSpec,
        models: &[PathModel],
        stop: Arc<AtomicBool>,
    ) -> Result<Emulator, EmuError> {
        if models.len() != spec.paths {
            return Err(EmuError::PathCount {
                models: models.len(),
                paths: spec.paths,
            });
        }
        let mut paths = Vec::new();
        for (i, m) in models.iter().enumerate() {
            let dev = TestbedSpec::path_dev(i);
            paths.push(EmuPath {
                relay: open_tun(&spec.ns("relay"), &dev)?,
                proxy: open_tun(&spec.ns("proxy"), &dev)?,
                up: Direction::new(&m.uplink, i, "uplink")?,
                down: Direction::new(&m.downlink, i, "downlink")?,
            });
        }
        Ok(Emulator {
            paths,
            start: Instant::now(),
            start_wall: SystemTime::now(),
            stop,
            buf: vec![0; MAX_PACKET],
        })
    }

    fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    /// The wall-clock time of the emulator's time 0 (every time it reports is µs since then).
    pub fn started_at(&self) -> SystemTime {
        self.start_wall
    }

    /// Record every packet each shaped downlink (proxy → relay) delivers from now on (its
    /// [`Transit`] and when its bytes were first offered), for
    /// [`take_downlink_transits`](Self::take_downlink_transits).
    pub fn record_downlink_transits(&mut self) {
        for p in &mut self.paths {
            if p.down.model.is_some() {
                p.down.record.get_or_insert_with(Default::default);
            }
        }
    }

    /// Per path, the packets its downlink delivered while recording (in delivery order),
    /// leaving none.
    pub fn take_downlink_transits(&mut self) -> Vec<Vec<Delivered>> {
        self.paths
            .iter_mut()
            .map(|p| {
                p.down
                    .record
                    .as_mut()
                    .map(|(d, _)| std::mem::take(d))
                    .unwrap_or_default()
            })
            .collect()
    }

    /// Counters per path: (uplink, downlink).
    pub fn stats(&self) -> Vec<(DirStats, DirStats)> {
        self.paths
            .iter()
            .map(|p| (p.up.stats, p.down.stats))
            .collect()
    }

    /// Forward until the stop flag is set. Returns the counters.
    pub fn run(&mut self) -> Result<Vec<(DirStats, DirStats)>, EmuError> {
        // The kernel may fire a thread's timers up to its timer slack late (50 µs by default),
        // which would add to every emulated delay; ask for none. Best effort: an older kernel
        // that refuses only costs that precision.
        let _ = nix::sys::prctl::set_timerslack(1);
        while !self.stop.load(Ordering::Relaxed) {
            let now = self.now_us();
            let mut wait_us = MAX_WAIT_US;
            for p in &self.paths {
                for d in [&p.up, &p.down] {
                    if let Some(t) = d.model.as_ref().and_then(Link::next_event_us) {
                        wait_us = wait_us.min(t.saturating_sub(now));
                    }
                }
            }
            let readable = {
                let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(self.paths.len() * 2);
                for p in &self.paths {
                    fds.push(PollFd::new(p.relay.as_fd(), PollFlags::POLLIN));
                    fds.push(PollFd::new(p.proxy.as_fd(), PollFlags::POLLIN));
                }
                let timeout = TimeSpec::from_duration(std::time::Duration::from_micros(wait_us));
                match nix::poll::ppoll(&mut fds, Some(timeout), None) {
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => {
                        return Err(EmuError::Io {
                            path: 0,
                            what: "ppoll",
                            source: std::io::Error::from(e),
                        })
                    }
                }
                fds.iter()
                    .map(|f| f.revents().is_some_and(|r| r.intersects(PollFlags::POLLIN)))
                    .collect::<Vec<_>>()
            };
            // Each packet is stamped when it is read, not when the poll returned: reading and
            // forwarding other paths' packets takes time, and an earlier stamp would let the
            // link serve a packet at an opportunity before it arrived (an answer faster than the
            // emulated round trip by the loop's duration).
            let start = self.start;
            for (i, p) in self.paths.iter_mut().enumerate() {
                if readable[2 * i] {
                    ingest(
                        i,
                        &mut p.relay,
                        &mut p.up,
                        &mut p.proxy,
                        start,
                        &mut self.buf,
                    )?;
                }
                if readable[2 * i + 1] {
                    ingest(
                        i,
                        &mut p.proxy,
                        &mut p.down,
                        &mut p.relay,
                        start,
                        &mut self.buf,
                    )?;
                }
                let now = elapsed_us(start);
                deliver(&mut p.up, &mut p.proxy, now);
                deliver(&mut p.down, &mut p.relay, now);
            }
        }
        Ok(self.stats())
    }
}

/// Microseconds since `start`.
fn elapsed_us(start: Instant) -> u64 {
    start.elapsed().as_micros() as u64
}

/// Read every waiting packet from `from` into direction `d` (or straight to `to` if unshaped),
/// each stamped with the time it was read (µs since `start`).
fn ingest(
    path: usize,
    from: &mut File,
    d: &mut Direction,
    to: &mut File,
    start: Instant,
    buf: &mut [u8],
) -> Result<(), EmuError> {
    loop {
        let n = match from.read(buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                return Ok(())
            }
            Err(source) => {
                return Err(EmuError::Io {
                    path,
                    what: "read",
                    source,
                })
            }
        };
        d.stats.packets_in += 1;
        match d.model.as_mut() {
            None => write_out(&mut d.stats, to, &buf[..n]),
            Some(link) => {
                let id = d.next_id;
                d.next_id += 1;
                let now = elapsed_us(start);
                let first = d
                    .record
                    .as_mut()
                    .map_or(now, |(_, seqs)| seqs.first_offered(&buf[..n], now));
                match link.enqueue(now, id, n as u32) {
                    EnqueueOutcome::Enqueued => {
                        d.packets.push_back((id, now, first, buf[..n].to_vec()))
                    }
                    EnqueueOutcome::Dropped(_) => d.stats.dropped += 1,
                }
            }
        }
    }
}

/// Write every packet the model has delivered by `now`.
fn deliver(d: &mut Direction, to: &mut File, now: u64) {
    let Some(link) = d.model.as_mut() else { return };
    link.advance(now);
    while let Some((id, at)) = link.poll_delivered(now) {
        while let Some((front, sent, first, bytes)) = d.packets.pop_front() {
            if front == id {
                write_out(&mut d.stats, to, &bytes);
                if let Some((log, _)) = &mut d.record {
                    log.push(Delivered {
                        transit: link.transit(sent, at),
                        first_offered_us: first,
                    });
                }
                break;
            }
            // Accepted earlier but never delivered (e.g. the trace ended): dropped.
            d.stats.dropped += 1;
        }
    }
}

fn write_out(stats: &mut DirStats, to: &mut File, bytes: &[u8]) {
    // A TUN write takes a whole packet or nothing; a full TUN queue drops, like a NIC would.
    match to.write(bytes) {
        Ok(n) if n == bytes.len() => {
            stats.packets_out += 1;
            stats.bytes_out += bytes.len() as u64;
        }
        _ => stats.write_failures += 1,
    }
}
