//! The passengers' load: churning connections, idle connections that ping, blackouts; what they counted.

use super::*;

/// What the clients counted.
pub(super) struct Counts {
    /// When the load started.
    pub(super) t0: Instant,
    pub(super) started: AtomicU64,
    pub(super) done: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) pings: AtomicU64,
    pub(super) ping_failures: AtomicU64,
    /// Idle connections that answered every ping.
    pub(super) idle_ok: AtomicU64,
    /// Idle connections opened again after one failed.
    pub(super) idle_reopened: AtomicU64,
    /// Every failure.
    pub(super) failures: Mutex<Vec<Failure>>,
    /// Completion times of connections that downloaded ≤ 16 KiB, µs.
    pub(super) small_us: Mutex<Vec<u64>>,
    /// Per completed connection: when it started (seconds into the load) and its set-up time
    /// until the first byte of its download, µs.
    pub(super) setup_us: Mutex<Vec<(f64, u64)>>,
    /// The restarts so far.
    pub(super) restarts: Mutex<Vec<Restart>>,
}

impl Counts {
    pub(super) fn new(t0: Instant) -> Counts {
        Counts {
            t0,
            started: AtomicU64::new(0),
            done: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            pings: AtomicU64::new(0),
            ping_failures: AtomicU64::new(0),
            idle_ok: AtomicU64::new(0),
            idle_reopened: AtomicU64::new(0),
            failures: Mutex::new(Vec::new()),
            small_us: Mutex::new(Vec::new()),
            setup_us: Mutex::new(Vec::new()),
            restarts: Mutex::new(Vec::new()),
        }
    }

    /// Seconds since the load started.
    pub(super) fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.t0).as_secs_f64()
    }

    /// A connection opened at `start` failed now.
    pub(super) fn fail(&self, start: Instant, kind: &'static str, msg: String) {
        let f = Failure {
            start: self.secs(start),
            end: self.secs(Instant::now()),
            kind,
            msg,
        };
        self.failures.lock().expect("not poisoned").push(f);
    }

    /// A connection opened at `start` completed now: the first since a restart's signal?
    pub(super) fn completed(&self, start: Instant) {
        let (start, now) = (self.secs(start), self.secs(Instant::now()));
        for r in self.restarts.lock().expect("not poisoned").iter_mut().rev() {
            if r.first_ok.is_some() {
                break;
            }
            if start >= r.at {
                r.first_ok = Some(now);
            }
        }
    }
}

/// The failure kind of an I/O error in `stage`: a time-out means the connection hung.
pub(super) fn io_kind(stage: &'static str, e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind::{TimedOut, UnexpectedEof, WouldBlock};
    match (stage, e.kind()) {
        ("upload", WouldBlock | TimedOut) => "upload hung",
        ("download", WouldBlock | TimedOut) => "download hung",
        ("no close", WouldBlock | TimedOut) => "close hung",
        ("ping", WouldBlock | TimedOut) => "ping hung",
        ("ping", UnexpectedEof) => "ping closed",
        _ => stage,
    }
}

pub(super) fn user_addr(u: usize) -> String {
    format!("10.0.1.{}", 10 + u)
}

pub(super) fn connect(from: &str) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    let src: SocketAddr = format!("{from}:0").parse().expect("literal address");
    s.bind(&src.into())?;
    let dst: SocketAddr = SocketAddr::from(([10, 0, 2, 2], PORT));
    s.connect_timeout(&dst.into(), Duration::from_secs(10))?;
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(CONN_TIMEOUT))?;
    s.set_write_timeout(Some(CONN_TIMEOUT))?;
    Ok(s)
}

/// Download sizes (bytes, weight) and upload sizes of the churn.
pub(super) const DOWN_SIZES: [(u64, u64); 4] =
    [(1 << 10, 50), (16 << 10, 30), (256 << 10, 15), (1 << 20, 5)];
pub(super) const UP_SIZES: [(u64, u64); 3] = [(100, 70), (4 << 10, 25), (64 << 10, 5)];

pub(super) fn pick(sizes: &[(u64, u64)], die: u64) -> u64 {
    let total: u64 = sizes.iter().map(|s| s.1).sum();
    let mut r = die % total;
    for &(v, w) in sizes {
        if r < w {
            return v;
        }
        r -= w;
    }
    sizes[0].0
}

/// One churn connection: its set-up time (connect to the first byte of the download), or the
/// error kind and message if it failed.
pub(super) fn one_connection(
    from: &str,
    seed: u64,
    down: u64,
    up: u64,
) -> Result<Duration, (&'static str, String)> {
    let t = Instant::now();
    let mut first_byte = None;
    let mut s = connect(from).map_err(|e| ("connect", e.to_string()))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut req = header(down, up, seed).to_vec();
    let mut off = 0u64;
    let mut upload = pattern(seed, true);
    while off < up {
        let n = (up - off).min(buf.len() as u64) as usize;
        upload.fill(&mut buf[..n]);
        req.extend_from_slice(&buf[..n]);
        off += n as u64;
    }
    s.write_all(&req)
        .map_err(|e| (io_kind("upload", &e), e.to_string()))?;
    let mut got = 0u64;
    let mut download = pattern(seed, false);
    while got < down {
        let n = s.read(&mut buf).map_err(|e| {
            (
                io_kind("download", &e),
                format!("after {got} of {down} bytes: {e}"),
            )
        })?;
        if n == 0 && got == 0 {
            return Err((
                "no answer",
                format!("closed before the first of {down} bytes (upload of {up} bytes rejected?)"),
            ));
        }
        if n == 0 {
            return Err((
                "short download",
                format!("closed in order after {got} of {down} bytes"),
            ));
        }
        if n as u64 > down - got {
            return Err((
                "extra bytes",
                format!("{} bytes past {down}", n as u64 - (down - got)),
            ));
        }
        if let Err(i) = download.check(&buf[..n]) {
            return Err((
                "wrong byte",
                format!("at offset {} of {down}", got + i as u64),
            ));
        }
        first_byte.get_or_insert_with(|| t.elapsed());
        got += n as u64;
    }
    match s.read(&mut buf) {
        Ok(0) => Ok(first_byte.unwrap_or_else(|| t.elapsed())),
        Ok(n) => Err(("extra bytes", format!("{n} bytes past {down}"))),
        Err(e) => Err((io_kind("no close", &e), format!("after {down} bytes: {e}"))),
    }
}

/// A worker opening connections one after another until `until`, from the passenger
/// addresses `id`, `id + workers`, `id + 2 × workers`, … in turn (modulo `users`).
pub(super) fn worker(
    ns: String,
    (id, workers): (u64, usize),
    users: usize,
    until: Instant,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) -> Result<()> {
    let _g = InNamespace::enter(&ns)?;
    let mut k = 0u64;
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        let from = user_addr((id as usize + k as usize * workers) % users);
        let seed = splitmix((id << 40) ^ k);
        k += 1;
        let down = pick(&DOWN_SIZES, splitmix(seed ^ 1));
        let up = pick(&UP_SIZES, splitmix(seed ^ 2));
        counts.started.fetch_add(1, Ordering::Relaxed);
        let t = Instant::now();
        match one_connection(&from, seed, down, up) {
            Ok(setup) => {
                counts
                    .setup_us
                    .lock()
                    .expect("not poisoned")
                    .push((counts.secs(t), setup.as_micros() as u64));
                counts.done.fetch_add(1, Ordering::Relaxed);
                counts.completed(t);
                counts.bytes.fetch_add(down + up, Ordering::Relaxed);
                if down <= 16 << 10 {
                    let us = t.elapsed().as_micros() as u64;
                    counts.small_us.lock().expect("not poisoned").push(us);
                }
            }
            Err((kind, msg)) => {
                counts.failed.fetch_add(1, Ordering::Relaxed);
                counts.fail(t, kind, format!("{from}: {msg}"));
            }
        }
    }
    Ok(())
}

/// One long-lived connection of [`idle_conns`].
pub(super) struct Idle {
    pub(super) conn: Option<TcpStream>,
    pub(super) opened: Instant,
    /// Every ping of every connection in this slot answered so far.
    pub(super) clean: bool,
}

/// Open idle connection `i`, counting a failure.
pub(super) fn open_idle(i: usize, users: usize, counts: &Counts) -> Option<TcpStream> {
    counts.started.fetch_add(1, Ordering::Relaxed);
    let from = user_addr(i % users);
    let t = Instant::now();
    let c = connect(&from).and_then(|mut s| {
        s.write_all(&header(ECHO, 0, i as u64))?;
        Ok(s)
    });
    match c {
        Ok(s) => Some(s),
        Err(e) => {
            counts.failed.fetch_add(1, Ordering::Relaxed);
            counts.fail(t, "idle connect", format!("{from}: {e}"));
            None
        }
    }
}

/// The long-lived connections: opened at once, pinged every `every` until `stop`. One that
/// failed is opened again at the next round, as a chat app reconnects (and the failure
/// counted).
pub(super) fn idle_conns(
    ns: String,
    n: usize,
    users: usize,
    every: Duration,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) -> Result<()> {
    let _g = InNamespace::enter(&ns)?;
    let mut slots: Vec<Idle> = (0..n)
        .map(|i| Idle {
            opened: Instant::now(),
            conn: open_idle(i, users, &counts),
            clean: true,
        })
        .collect();
    for s in &mut slots {
        s.clean = s.conn.is_some();
    }
    let mut round = 0u64;
    loop {
        let next = Instant::now() + every;
        while Instant::now() < next {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let last = stop.load(Ordering::Relaxed);
        round += 1;
        for (i, slot) in slots.iter_mut().enumerate() {
            let Some(s) = slot.conn.as_mut() else {
                // Failed before: open it again (not after the load: nothing would ping it).
                if !last {
                    slot.opened = Instant::now();
                    slot.conn = open_idle(i, users, &counts);
                    counts.idle_reopened.fetch_add(1, Ordering::Relaxed);
                    if slot.conn.is_none() {
                        // No connection gets through now: the others would wait as long.
                        break;
                    }
                }
                continue;
            };
            let ping = (round << 32 | i as u64).to_be_bytes();
            let mut back = [0u8; 8];
            let r = s.write_all(&ping).and_then(|()| s.read_exact(&mut back));
            counts.pings.fetch_add(1, Ordering::Relaxed);
            let failed = match r {
                Ok(()) if back == ping => None,
                Ok(()) => Some(("wrong ping", String::new())),
                Err(e) => Some((io_kind("ping", &e), format!(": {e}"))),
            };
            if let Some((kind, e)) = failed {
                counts.ping_failures.fetch_add(1, Ordering::Relaxed);
                counts.fail(
                    slot.opened,
                    kind,
                    format!("connection {i}, round {round}{e}"),
                );
                slot.conn = None;
                slot.clean = false;
            }
        }
        if last {
            break;
        }
    }
    let clean = slots.iter().filter(|s| s.clean).count() as u64;
    counts.idle_ok.store(clean, Ordering::Relaxed);
    Ok(())
}

/// Every `every`, drop everything on one path (in turn) at the relay for `secs`, until `stop`.
/// Returns how many blackouts there were.
pub(super) fn blackouts(
    relay_ns: String,
    every: Duration,
    secs: Duration,
    stop: Arc<AtomicBool>,
) -> Result<u64> {
    let nft = |args: &str| -> Result<()> {
        exec_in(&relay_ns, "nft", &[args])
            .map(drop)
            .with_context(|| format!("nft {args} in {relay_ns}"))
    };
    nft("add table inet polycorn_soak")?;
    nft("add chain inet polycorn_soak out { type filter hook output priority 0 ; }")?;
    nft("add chain inet polycorn_soak in { type filter hook input priority 0 ; }")?;
    let wait = |d: Duration| -> bool {
        let until = Instant::now() + d;
        while Instant::now() < until {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    };
    let mut n = 0u64;
    while wait(every.saturating_sub(secs)) {
        let dev = format!("path{}", n % 2);
        nft(&format!(
            "add rule inet polycorn_soak out oifname \"{dev}\" drop"
        ))?;
        nft(&format!(
            "add rule inet polycorn_soak in iifname \"{dev}\" drop"
        ))?;
        n += 1;
        wait(secs);
        nft("flush chain inet polycorn_soak out")?;
        nft("flush chain inet polycorn_soak in")?;
    }
    Ok(n)
}
