//! The attacks `polycorn net soak --attack` runs beside its passengers, each in a thread of
//! its own until the load ends, each counting what it tried and what came back:
//!
//! * **loop from outside**: connections from the Internet side (the proxy's namespace) to the
//!   relay's path addresses at its transparent port — the kernel must refuse them (the listener
//!   takes only the LAN's connections);
//! * **loop from the LAN**: a passenger's connections to the relay's own addresses (its paths'
//!   and its LAN address) — refused by the relay before any flow opens;
//! * **into the proxy's host**: a passenger's connections to the proxy's own addresses, where a
//!   service listens on every address — the proxy must never connect to it;
//! * **greedy passenger**: one address opening connections as fast as it can and holding every
//!   one it gets — the relay's per-passenger limits must stop it, and the others carry on;
//! * **DNS flood**: queries from spoofed LAN addresses to the relay's DNS service, whose
//!   resolver accepts and never answers — each query's flow must end after its timeout;
//! * **rogue relay**: a second gateway holding the train's credential, opening session after
//!   session and sending data for flows it never opened — the proxy must cap its sessions and
//!   close the ones that misbehave, without holding their bytes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use polycorn_emu::netns::{ip_in, InNamespace};

/// The greedy passenger on the LAN.
pub const ATTACKER: &str = "10.0.1.250";
/// The passenger trying loops and the proxy's host (another address, so the greedy one's
/// limits do not stop it before the checks under test).
pub const PROBER: &str = "10.0.1.251";
/// Port of the service on the proxy's host that no passenger may reach.
const HOST_PORT: u16 = 9911;
/// The silent resolver's port in the server's namespace (the relay's `dns.upstream`).
pub const SILENT_DNS: &str = "10.0.2.2:5353";
/// The relay's DNS service in the soak's configuration.
pub const RELAY_DNS: &str = "10.0.1.1:53";
/// Spoofed DNS queries per second.
const DNS_PER_SEC: u64 = 200;
/// New connections per second the greedy passenger tries.
const GREEDY_PER_SEC: u64 = 400;
/// Sessions per second the rogue relay opens.
const ROGUE_PER_SEC: f64 = 1.0;
/// Flows per rogue session it sends data for without opening them, and bytes for each: 10 MiB
/// in all, past what a session holds for flows not yet opened.
const ROGUE_FLOWS: u64 = 160;
const ROGUE_BYTES: usize = 64 << 10;

/// What the attacks did.
#[derive(Debug, Default)]
pub struct AttackCounts {
    /// Loop from outside: attempts; those the relay accepted (a problem).
    pub outside: AtomicU64,
    pub outside_accepted: AtomicU64,
    /// Loop from the LAN: attempts; those answered with data or left open (a problem).
    pub lan: AtomicU64,
    pub lan_answered: AtomicU64,
    /// Into the proxy's host: attempts; connections the host service accepted (a problem).
    pub host: AtomicU64,
    pub host_reached: Arc<AtomicU64>,
    /// Greedy passenger: attempts, connections it holds now and the most it held at once.
    pub greedy: AtomicU64,
    pub greedy_held: AtomicU64,
    pub greedy_peak: AtomicU64,
    /// DNS queries sent.
    pub dns: AtomicU64,
    /// Rogue relay: sessions tried, refused at once, closed by the proxy after its bad data,
    /// and left open 10 s after the data (a problem).
    pub rogue: AtomicU64,
    pub rogue_refused: AtomicU64,
    pub rogue_closed: AtomicU64,
    pub rogue_open: AtomicU64,
}

impl AttackCounts {
    fn add(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Passenger connections the relay may have counted for the attacks (an upper bound):
    /// the greedy passenger's attempts and the DNS queries.
    pub fn flows_bound(&self) -> u64 {
        self.greedy.load(Ordering::Relaxed) + self.dns.load(Ordering::Relaxed)
    }

    /// One line per attack.
    pub fn report(&self, limit: u32) -> Vec<String> {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            format!(
                "attack, loop from outside: {} connections to the relay's path addresses, {} accepted",
                l(&self.outside),
                l(&self.outside_accepted)
            ),
            format!(
                "attack, loop from the LAN: {} connections to the relay's own addresses, {} answered or left open",
                l(&self.lan),
                l(&self.lan_answered)
            ),
            format!(
                "attack, into the proxy's host: {} connections, {} reached its service",
                l(&self.host),
                l(&self.host_reached)
            ),
            format!(
                "attack, greedy passenger: {} connections tried, at most {} held at once (limit {limit})",
                l(&self.greedy),
                l(&self.greedy_peak)
            ),
            format!(
                "attack, DNS flood: {} queries from spoofed addresses to a resolver that never answers",
                l(&self.dns)
            ),
            format!(
                "attack, rogue relay: {} sessions tried, {} refused, {} closed after data for unopened flows, {} left open",
                l(&self.rogue),
                l(&self.rogue_refused),
                l(&self.rogue_closed),
                l(&self.rogue_open)
            ),
        ]
    }

    /// What the attacks got that they never should have.
    pub fn problems(&self, limit: u32) -> Vec<String> {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut p = Vec::new();
        if l(&self.outside_accepted) > 0 {
            p.push(format!(
                "{} connections from outside to the relay's transparent port were accepted",
                l(&self.outside_accepted)
            ));
        }
        if l(&self.lan_answered) > 0 {
            p.push(format!(
                "{} connections to the relay's own addresses were answered or left open",
                l(&self.lan_answered)
            ));
        }
        if l(&self.host_reached) > 0 {
            p.push(format!(
                "passengers reached a service on the proxy's host {} times",
                l(&self.host_reached)
            ));
        }
        // A connection the relay refuses is reset at once; one it carries stays open. Allow a
        // few in the moment between the client's accept and the relay's reset.
        if limit > 0 && l(&self.greedy_peak) > u64::from(limit) + 16 {
            p.push(format!(
                "the greedy passenger held {} connections at once (limit {limit})",
                l(&self.greedy_peak)
            ));
        }
        if l(&self.rogue_open) > 0 {
            p.push(format!(
                "{} rogue sessions were still open 10 s after sending data for unopened flows",
                l(&self.rogue_open)
            ));
        }
        p
    }
}

/// The attacks' threads.
#[derive(Debug)]
pub struct Attacks {
    /// What they did.
    pub counts: Arc<AttackCounts>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Where the attacks run: the soak's namespaces and its credentials.
#[derive(Debug, Clone)]
pub struct Targets {
    /// Client (LAN), relay, proxy and server namespaces.
    pub client: String,
    pub relay: String,
    pub proxy: String,
    pub server: String,
    /// Path count (paths `10.100.i.1` at the relay, `10.100.i.2` at the proxy).
    pub paths: usize,
    /// Directory with `ca.pem`, `relay.pem`, `relay.key`.
    pub credentials: std::path::PathBuf,
}

impl Attacks {
    /// The silent resolver and the proxy host's service, before the daemons start.
    pub fn prepare(t: &Targets) -> Result<Arc<AtomicU64>> {
        for a in [ATTACKER, PROBER] {
            ip_in(
                &t.client,
                &["addr", "add", &format!("{a}/24"), "dev", "lan0"],
            )?;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let ns = t.server.clone();
        std::thread::spawn(move || {
            let _g = InNamespace::enter(&ns).expect("enter server namespace");
            let l = TcpListener::bind(SILENT_DNS).expect("bind the silent resolver");
            tx.send(()).ok();
            // Accept and never answer; hold each until its peer goes.
            for s in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut s = s;
                    let mut b = [0u8; 512];
                    while matches!(s.read(&mut b), Ok(n) if n > 0) {}
                });
            }
        });
        rx.recv_timeout(Duration::from_secs(5))
            .context("silent resolver did not start")?;
        let reached = Arc::new(AtomicU64::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        let (ns, count) = (t.proxy.clone(), reached.clone());
        std::thread::spawn(move || {
            let _g = InNamespace::enter(&ns).expect("enter proxy namespace");
            let l = TcpListener::bind(("0.0.0.0", HOST_PORT)).expect("bind the host service");
            tx.send(()).ok();
            for mut s in l.incoming().flatten() {
                count.fetch_add(1, Ordering::Relaxed);
                let _ = s.write_all(b"the proxy's host");
            }
        });
        rx.recv_timeout(Duration::from_secs(5))
            .context("host service did not start")?;
        Ok(reached)
    }

    /// Start every attack; they run until [`Attacks::stop`].
    pub fn start(t: &Targets, host_reached: Arc<AtomicU64>) -> Attacks {
        let counts = Arc::new(AttackCounts {
            host_reached,
            ..AttackCounts::default()
        });
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let mut spawn = |f: Box<dyn FnOnce() + Send>| threads.push(std::thread::spawn(f));
        {
            let (t, c, s) = (t.clone(), counts.clone(), stop.clone());
            spawn(Box::new(move || loop_outside(&t, &c, &s)));
        }
        {
            let (t, c, s) = (t.clone(), counts.clone(), stop.clone());
            spawn(Box::new(move || loop_lan(&t, &c, &s)));
        }
        {
            let (t, c, s) = (t.clone(), counts.clone(), stop.clone());
            spawn(Box::new(move || greedy(&t, &c, &s)));
        }
        {
            let (t, c, s) = (t.clone(), counts.clone(), stop.clone());
            spawn(Box::new(move || dns_flood(&t, &c, &s)));
        }
        {
            let (t, c, s) = (t.clone(), counts.clone(), stop.clone());
            spawn(Box::new(move || rogue_relay(&t, &c, &s)));
        }
        Attacks {
            counts,
            stop,
            threads,
        }
    }

    /// Stop every attack and wait for its thread.
    pub fn stop(self) -> Arc<AttackCounts> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        self.counts
    }
}

fn pace(every: Duration, next: &mut Instant) {
    *next += every;
    let now = Instant::now();
    if *next > now {
        std::thread::sleep(*next - now);
    } else {
        *next = now;
    }
}

fn connect_from(
    from: Option<&str>,
    dst: SocketAddr,
    timeout: Duration,
) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(dst), Type::STREAM, None)?;
    if let Some(from) = from {
        let src: SocketAddr = format!("{from}:0").parse().expect("literal address");
        s.bind(&src.into())?;
    }
    s.connect_timeout(&dst.into(), timeout)?;
    Ok(s.into())
}

/// Connect and read for at most `wait`: `true` when the connection stayed open that long or
/// sent something (what a refused connection never does).
fn answered(s: &mut TcpStream, wait: Duration) -> bool {
    let _ = s.set_read_timeout(Some(wait));
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

fn loop_outside(t: &Targets, c: &AttackCounts, stop: &AtomicBool) {
    let _g = InNamespace::enter(&t.proxy).expect("enter proxy namespace");
    let mut next = Instant::now();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let dst = SocketAddr::from(([10, 100, (i % t.paths) as u8, 1], 7070));
        i += 1;
        AttackCounts::add(&c.outside);
        if connect_from(None, dst, Duration::from_secs(2)).is_ok() {
            AttackCounts::add(&c.outside_accepted);
        }
        pace(Duration::from_millis(20), &mut next);
    }
}

fn loop_lan(t: &Targets, c: &AttackCounts, stop: &AtomicBool) {
    let _g = InNamespace::enter(&t.client).expect("enter client namespace");
    let mut targets: Vec<SocketAddr> = (0..t.paths)
        .map(|i| SocketAddr::from(([10, 100, i as u8, 1], 7070)))
        .collect();
    targets.push(SocketAddr::from(([10, 0, 1, 1], 7070)));
    let host: Vec<SocketAddr> = [[10, 0, 2, 1]]
        .into_iter()
        .chain((0..t.paths).map(|i| [10, 100, i as u8, 2]))
        .map(|a| SocketAddr::from((a, HOST_PORT)))
        .collect();
    let mut next = Instant::now();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let dst = targets[i % targets.len()];
        AttackCounts::add(&c.lan);
        if let Ok(mut s) = connect_from(Some(PROBER), dst, Duration::from_secs(2)) {
            if answered(&mut s, Duration::from_secs(2)) {
                AttackCounts::add(&c.lan_answered);
            }
        }
        // The proxy's host: the proxy refuses, the passenger's connection is reset; the host
        // service counts any connection that reaches it.
        let dst = host[i % host.len()];
        AttackCounts::add(&c.host);
        if let Ok(mut s) = connect_from(Some(PROBER), dst, Duration::from_secs(2)) {
            let _ = answered(&mut s, Duration::from_millis(500));
        }
        i += 1;
        pace(Duration::from_millis(25), &mut next);
    }
}

fn greedy(t: &Targets, c: &AttackCounts, stop: &AtomicBool) {
    let _g = InNamespace::enter(&t.client).expect("enter client namespace");
    let server = SocketAddr::from(([10, 0, 2, 2], 5202));
    // Every connection it got, with when; the soak's server gives up on a silent one after
    // 30 s, so they are dropped then and opened anew.
    let mut held: Vec<(TcpStream, Instant)> = Vec::new();
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        AttackCounts::add(&c.greedy);
        if let Ok(s) = connect_from(Some(ATTACKER), server, Duration::from_secs(2)) {
            let _ = s.set_nonblocking(true);
            held.push((s, Instant::now()));
        }
        // Keep only those still open: a refused one was reset by the relay.
        if held.len() % 32 == 0 || held.len() > 256 {
            let mut b = [0u8; 1];
            held.retain(|(s, at)| {
                at.elapsed() < Duration::from_secs(25)
                    && match (&*s).read(&mut b) {
                        Ok(0) => false,
                        Ok(_) => true,
                        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
                    }
            });
            // Just accepted ones have not been reset yet: count what survived a moment.
            let settled = held
                .iter()
                .filter(|(_, at)| at.elapsed() > Duration::from_millis(300))
                .count() as u64;
            c.greedy_held.store(held.len() as u64, Ordering::Relaxed);
            c.greedy_peak.fetch_max(settled, Ordering::Relaxed);
        }
        pace(Duration::from_micros(1_000_000 / GREEDY_PER_SEC), &mut next);
    }
}

fn dns_flood(t: &Targets, c: &AttackCounts, stop: &AtomicBool) {
    let _g = InNamespace::enter(&t.client).expect("enter client namespace");
    let relay: SocketAddr = RELAY_DNS.parse().expect("literal address");
    let mut next = Instant::now();
    let mut k: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        // A source address nobody on the LAN has (IP_TRANSPARENT lets the socket use it).
        let src = SocketAddr::from((
            [10, 0, 1, 100 + (k % 100) as u8],
            20_000 + (k % 1000) as u16,
        ));
        if let Ok(sock) = spoofed_udp(src) {
            let mut q = (k as u16).to_be_bytes().to_vec();
            q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
            q.extend_from_slice(b"\x07example\x03com\x00\x00\x01\x00\x01");
            if sock.send_to(&q, relay).is_ok() {
                AttackCounts::add(&c.dns);
            }
        }
        k += 1;
        pace(Duration::from_micros(1_000_000 / DNS_PER_SEC), &mut next);
    }
}

fn spoofed_udp(src: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_ip_transparent(true)?;
    s.set_reuse_address(true)?;
    s.bind(&src.into())?;
    Ok(s.into())
}

fn rogue_relay(t: &Targets, c: &AttackCounts, stop: &AtomicBool) {
    let _g = InNamespace::enter(&t.relay).expect("enter relay namespace");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = &t.credentials;
    let Ok(tls) = polycorn_net::tls::client_config(
        &dir.join("ca.pem"),
        &dir.join("relay.pem"),
        &dir.join("relay.key"),
    ) else {
        return;
    };
    let mut next = Instant::now();
    let mut k: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        k += 1;
        AttackCounts::add(&c.rogue);
        let outcome = rt.block_on(rogue_session(&tls, k, (k as usize) % t.paths));
        match outcome {
            Rogue::Refused => AttackCounts::add(&c.rogue_refused),
            Rogue::Closed => AttackCounts::add(&c.rogue_closed),
            Rogue::Open => AttackCounts::add(&c.rogue_open),
        }
        pace(Duration::from_secs_f64(1.0 / ROGUE_PER_SEC), &mut next);
    }
}

enum Rogue {
    Refused,
    Closed,
    Open,
}

async fn rogue_session(tls: &Arc<polycorn_net::tls::ClientConfig>, k: u64, path: usize) -> Rogue {
    use polycorn_net::subflow;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let id = 0xA77A_C000_0000_0000 | k;
    let mut cfg = polycorn_proto::SessionConfig::new(polycorn_proto::Role::Relay, id, "minrtt");
    cfg.epoch = k;
    let Ok(session) = polycorn_proto::Session::new(cfg) else {
        return Rogue::Refused;
    };
    let hello = session.hello(path as u8).to_vec();
    let proxy = SocketAddr::from(([10, 100, path as u8, 2], 7700));
    let est = subflow::relay_connect(
        &subflow::connector(tls.clone()),
        proxy,
        Some(std::net::IpAddr::from([10, 100, path as u8, 1])),
        None,
        &subflow::SubflowSockopts::default(),
        &hello,
        (id, path as u8, k),
        subflow::ConnectTimeouts::DEFAULT,
    )
    .await;
    let Ok(est) = est else {
        return Rogue::Refused;
    };
    let mut s = est.stream;
    let data = vec![0x5a; ROGUE_BYTES];
    let mut out = Vec::new();
    for flow in 1..=ROGUE_FLOWS {
        // Flow ids far above anything opened.
        polycorn_proto::Frame::Data {
            flow: (1 << 40) + flow * 2,
            offset: 0,
            fin: false,
            data: &data,
        }
        .encode(&mut out);
        if s.write_all(&out).await.is_err() {
            return Rogue::Closed;
        }
        out.clear();
    }
    let mut sink = vec![0u8; 64 << 10];
    let read_all = async { while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {} };
    match tokio::time::timeout(Duration::from_secs(10), read_all).await {
        Ok(()) => Rogue::Closed,
        Err(_) => Rogue::Open,
    }
}
