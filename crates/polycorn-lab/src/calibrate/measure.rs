//! One measured run: the testbed's lifetime, TCP sender and receiver threads per path, and the `ss`/`nstat` sampler.

use super::*;
use crate::harness::TripPlayer;
use polycorn_emu::testbed::Guard;

/// One `ss` view of a sender socket.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct SsInfo {
    pub(super) cc: String,
    pub(super) srtt_ms: f64,
    pub(super) rttvar_ms: f64,
    pub(super) rto_ms: f64,
    pub(super) backoff: u32,
    pub(super) retrans_now: u32,
    pub(super) retrans_total: u64,
    pub(super) cwnd: u64,
    pub(super) ssthresh: Option<u64>,
    pub(super) bytes_acked: u64,
    pub(super) bytes_retrans: u64,
    pub(super) data_segs_out: u64,
    pub(super) lost: u64,
    pub(super) unacked: u64,
    pub(super) delivery_rate_bps: f64,
}

/// One `ss` call: time since the emulator started, and each carrier's sender (if seen).
#[derive(Clone, Debug)]
pub(super) struct SsRow {
    pub(super) t_s: f64,
    pub(super) flows: Vec<Option<SsInfo>>,
}

/// One `nstat` snapshot of the proxy namespace.
#[derive(Clone, Debug)]
pub(super) struct NstatRow {
    pub(super) t_s: f64,
    pub(super) counters: BTreeMap<String, u64>,
}

/// Everything one run recorded.
#[derive(Debug)]
pub(super) struct RawRun {
    pub(super) cc: String,
    /// Receiver goodput per 0.2 s bin since the emulator started, bytes, per carrier.
    pub(super) bins: Vec<Vec<u64>>,
    pub(super) ss: Vec<SsRow>,
    pub(super) nstat: Vec<NstatRow>,
    pub(super) nstat_before: BTreeMap<String, u64>,
    pub(super) nstat_after: BTreeMap<String, u64>,
    pub(super) sent_bytes: Vec<u64>,
    pub(super) connect_s: Vec<f64>,
    pub(super) emu: Vec<(DirStats, DirStats)>,
    pub(super) cc_seen: bool,
}

/// What the sampler thread recorded.
pub(super) type Samples = (Vec<SsRow>, Vec<NstatRow>);

/// Owns a run's testbed and threads. Dropping it stops the flows, then the emulator (a
/// [`TripPlayer`] of the trip's links only: calibration serves no context), and removes the
/// testbed (its [`Guard`]; by name, nothing else is touched). The TCP sender, receiver and
/// sampler threads are calibration's own: they measure the links themselves, with no relay or
/// proxy daemon in between.
pub(super) struct Bed {
    pub(super) guard: Option<Guard>,
    pub(super) flows_stop: Arc<AtomicBool>,
    pub(super) receivers: Vec<JoinHandle<Result<Vec<u64>>>>,
    pub(super) senders: Vec<JoinHandle<Result<u64>>>,
    pub(super) sampler: Option<JoinHandle<Result<Samples>>>,
    pub(super) player: Option<TripPlayer>,
    pub(super) removed: bool,
}

impl Bed {
    pub(super) fn stop_flows(&mut self) {
        self.flows_stop.store(true, Ordering::Relaxed);
    }

    pub(super) fn stop_emulator(&mut self) -> Option<Result<Vec<(DirStats, DirStats)>>> {
        self.player.take().map(TripPlayer::finish)
    }

    pub(super) fn remove(&mut self) -> Result<()> {
        self.stop_flows();
        for h in self.senders.drain(..) {
            let _ = h.join();
        }
        for h in self.receivers.drain(..) {
            let _ = h.join();
        }
        if let Some(h) = self.sampler.take() {
            let _ = h.join();
        }
        let _ = self.stop_emulator();
        self.removed = true;
        let Some(guard) = self.guard.take() else {
            return Ok(());
        };
        let name = guard.name().to_string();
        guard.down().with_context(|| {
            format!("remove testbed `{name}`; run `polycorn testbed down --name {name}`")
        })
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        if !self.removed {
            if let Err(e) = self.remove() {
                eprintln!("error: {e:#}");
            }
        }
    }
}

pub(super) fn join<T>(h: JoinHandle<Result<T>>, what: &str) -> Result<T> {
    h.join()
        .map_err(|_| anyhow!("the {what} thread panicked"))?
}

pub(super) fn measure(
    args: &CalibrateArgs,
    trip: &Trip,
    cc: &str,
    run_ms: u64,
    interrupted: &Arc<AtomicBool>,
) -> Result<RawRun> {
    let n = trip.paths.len();
    let spec = TestbedSpec {
        name: args.name.clone(),
        paths: n,
    };
    let path_models = models::from_trip(trip, args.queue_bytes.map(QueueLimit::Bytes))?;
    let guard = Guard::up(&spec).with_context(|| format!("build testbed `{}`", spec.name))?;
    let mut bed = Bed {
        guard: Some(guard),
        flows_stop: Arc::new(AtomicBool::new(false)),
        receivers: Vec::new(),
        senders: Vec::new(),
        sampler: None,
        player: None,
        removed: false,
    };
    let (relay, proxy) = (spec.ns("relay"), spec.ns("proxy"));
    let player = bed
        .player
        .insert(TripPlayer::start_links(&spec, &path_models)?);
    let t0 = player.t0;
    let nstat_before = nstat_exec(&proxy)?;
    let totals: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let bins_cap = (run_ms / BIN_MS) as usize + 50;
    let (ready_tx, ready_rx) = mpsc::channel::<(usize, Result<()>)>();
    for i in 0..n {
        let (ns, stop, ready, totals) = (
            relay.clone(),
            bed.flows_stop.clone(),
            ready_tx.clone(),
            totals.clone(),
        );
        let port = args.port + i as u16;
        bed.receivers.push(
            thread::Builder::new()
                .name(format!("recv{i}"))
                .spawn(move || receiver(&ns, i, port, &stop, t0, bins_cap, &totals[i], ready))?,
        );
    }
    drop(ready_tx);
    for _ in 0..n {
        let (i, r) = ready_rx
            .recv_timeout(Duration::from_secs(5))
            .context("a receiver did not start within 5 s")?;
        r.with_context(|| format!("receiver of path {i}"))?;
    }
    let connect_at: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    for i in 0..n {
        let (ns, stop, cc, connect_at) = (
            proxy.clone(),
            bed.flows_stop.clone(),
            cc.to_string(),
            connect_at.clone(),
        );
        let port = args.port + i as u16;
        bed.senders.push(
            thread::Builder::new()
                .name(format!("send{i}"))
                .spawn(move || sender(&ns, i, port, &cc, &stop, t0, &connect_at[i]))?,
        );
    }
    {
        let (ns, stop) = (proxy.clone(), bed.flows_stop.clone());
        let (period, port) = (Duration::from_millis(args.sample_ms), args.port);
        bed.sampler = Some(
            thread::Builder::new()
                .name("sampler".into())
                .spawn(move || sampler(&ns, n, port, period, &stop, t0))?,
        );
    }
    eprintln!(
        "[{cc}] {n} downloads running for {:.0} s (Ctrl-C stops and removes the testbed)",
        run_ms as f64 / 1000.0
    );
    let deadline = t0 + Duration::from_millis(run_ms);
    let mut next_report = t0 + Duration::from_secs(30);
    let mut last_totals = vec![0u64; n];
    while Instant::now() < deadline {
        if interrupted.load(Ordering::Relaxed) {
            // `bed` removes the testbed as this returns.
            bail!("interrupted; testbed `{}` removed", args.name);
        }
        if bed.player.as_ref().is_some_and(TripPlayer::is_finished) {
            return match bed.stop_emulator() {
                Some(Err(e)) => Err(e.context("the emulator stopped early")),
                _ => Err(anyhow!("the emulator stopped early")),
            };
        }
        if bed.sampler.as_ref().is_some_and(|h| h.is_finished()) {
            join(bed.sampler.take().expect("checked above"), "sampler")?;
            bail!("the sampler stopped early");
        }
        if let Some(i) = bed.senders.iter().position(|h| h.is_finished()) {
            let h = bed.senders.remove(i);
            join(h, "sender")?;
            bail!("sender {i} stopped early");
        }
        if Instant::now() >= next_report {
            let now: Vec<u64> = totals.iter().map(|t| t.load(Ordering::Relaxed)).collect();
            eprintln!(
                "[{cc}] t={:>4.0}s goodput over the last 30 s: {}",
                t0.elapsed().as_secs_f64(),
                now.iter()
                    .zip(&last_totals)
                    .zip(&trip.paths)
                    .map(|((a, b), p)| format!(
                        "{} {:.2} Mbit/s",
                        p.name,
                        (a - b) as f64 * 8.0 / 30e6
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            last_totals = now;
            next_report += Duration::from_secs(30);
        }
        thread::sleep(Duration::from_millis(100));
    }
    bed.stop_flows();
    let mut sent_bytes = Vec::new();
    for h in std::mem::take(&mut bed.senders) {
        sent_bytes.push(join(h, "sender")?);
    }
    let mut bins = Vec::new();
    for h in std::mem::take(&mut bed.receivers) {
        bins.push(join(h, "receiver")?);
    }
    let (ss, nstat) = join(bed.sampler.take().expect("started above"), "sampler")?;
    let nstat_after = nstat_exec(&proxy)?;
    let emu = bed
        .stop_emulator()
        .unwrap_or_else(|| Err(anyhow!("no emulator")))?;
    bed.remove()?;
    for (i, (up, down)) in emu.iter().enumerate() {
        eprintln!(
            "[{cc}] path{i} downlink: {} in, {} out, {} dropped by the model, {} TUN write failures; uplink: {} in, {} out, {} dropped",
            down.packets_in, down.packets_out, down.dropped, down.write_failures, up.packets_in, up.packets_out, up.dropped
        );
    }
    let cc_seen = ss
        .iter()
        .flat_map(|r| r.flows.iter().flatten())
        .any(|f| f.cc == cc);
    if !cc_seen {
        eprintln!("warning: `ss` never showed congestion control `{cc}` on the senders");
    }
    Ok(RawRun {
        cc: cc.to_string(),
        bins,
        ss,
        nstat,
        nstat_before,
        nstat_after,
        sent_bytes,
        connect_s: connect_at
            .iter()
            .map(|a| a.load(Ordering::Relaxed) as f64 / 1e6)
            .collect(),
        emu,
        cc_seen,
    })
}

pub(super) fn path_addr(i: usize, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 100, i as u8, host)
}

/// Accept one connection on `10.100.i.1:port` in the relay namespace and count the bytes
/// received per 0.2 s bin since `t0`.
#[allow(clippy::too_many_arguments)]
pub(super) fn receiver(
    ns: &str,
    i: usize,
    port: u16,
    stop: &AtomicBool,
    t0: Instant,
    bins_cap: usize,
    total: &AtomicU64,
    ready: mpsc::Sender<(usize, Result<()>)>,
) -> Result<Vec<u64>> {
    let listener = (|| -> Result<TcpListener> {
        let _inside = InNamespace::enter(ns)?;
        let l = TcpListener::bind(SocketAddrV4::new(path_addr(i, 1), port))
            .with_context(|| format!("bind {}:{port} in {ns}", path_addr(i, 1)))?;
        l.set_nonblocking(true)?;
        Ok(l)
    })();
    let listener = match listener {
        Ok(l) => {
            let _ = ready.send((i, Ok(())));
            l
        }
        Err(e) => {
            let msg = format!("{e:#}");
            let _ = ready.send((i, Err(e)));
            bail!(msg);
        }
    };
    let mut bins = vec![0u64; bins_cap];
    let mut stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    return Ok(bins);
                }
                thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e).context("accept"),
        }
    };
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    let mut buf = vec![0u8; 256 * 1024];
    while !stop.load(Ordering::Relaxed) {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => {
                let j = (t0.elapsed().as_millis() as u64 / BIN_MS) as usize;
                if j >= bins.len() {
                    bins.resize(j + 1, 0);
                }
                bins[j] += k as u64;
                total.fetch_add(k as u64, Ordering::Relaxed);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) if stop.load(Ordering::Relaxed) => break,
            Err(e) => return Err(e).context("read"),
        }
    }
    Ok(bins)
}

/// Connect from `10.100.i.2` in the proxy namespace with congestion control `cc` and send
/// until stopped. Returns the bytes handed to the socket.
pub(super) fn sender(
    ns: &str,
    i: usize,
    port: u16,
    cc: &str,
    stop: &AtomicBool,
    t0: Instant,
    connect_at_us: &AtomicU64,
) -> Result<u64> {
    let mut stream = {
        let _inside = InNamespace::enter(ns)?;
        let fd = socket::socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .context("socket")?;
        socket::setsockopt(&fd, sockopt::TcpCongestion, &OsString::from(cc)).map_err(|e| {
            let avail = fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
                .unwrap_or_default();
            anyhow!(
                "congestion control `{cc}`: {e}; available: {} (others may need `modprobe tcp_{cc}`)",
                avail.trim()
            )
        })?;
        let local = path_addr(i, 2);
        socket::bind(
            fd.as_raw_fd(),
            &SockaddrIn::from(SocketAddrV4::new(local, 0)),
        )
        .with_context(|| format!("bind {local} in {ns}"))?;
        let stream = TcpStream::from(fd);
        // SO_SNDTIMEO also bounds a blocking connect, so the stop flag is seen while the SYN
        // is retried through an outage.
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        let peer = SockaddrIn::from(SocketAddrV4::new(path_addr(i, 1), port));
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(0);
            }
            match socket::connect(stream.as_raw_fd(), &peer) {
                Ok(()) | Err(nix::errno::Errno::EISCONN) => break,
                Err(
                    nix::errno::Errno::EINPROGRESS
                    | nix::errno::Errno::EALREADY
                    | nix::errno::Errno::EINTR
                    | nix::errno::Errno::EAGAIN,
                ) => {}
                Err(e) => {
                    return Err(anyhow!(
                        "connect {}:{port} from {local}: {e}",
                        path_addr(i, 1)
                    ))
                }
            }
        }
        stream
    };
    connect_at_us.store(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
    let buf = vec![0x5au8; WRITE_BYTES];
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        match stream.write(&buf) {
            Ok(k) => sent += k as u64,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            // The receiver may close first when both see the stop flag: not an error then.
            Err(_) if stop.load(Ordering::Relaxed) => break,
            Err(e) => return Err(e).context("write"),
        }
    }
    Ok(sent)
}

/// In the proxy namespace: `ss -tinH` every `period`, `nstat -asz` every second.
pub(super) fn sampler(
    ns: &str,
    n: usize,
    port: u16,
    period: Duration,
    stop: &AtomicBool,
    t0: Instant,
) -> Result<Samples> {
    // Children inherit the network namespace of the thread that spawns them.
    let _inside = InNamespace::enter(ns)?;
    let (mut ss, mut nstat) = (Vec::new(), Vec::new());
    let mut next = Instant::now();
    let mut next_nstat = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let before = t0.elapsed().as_secs_f64();
        let out = Command::new("ss").arg("-tinH").output().context("run ss")?;
        let t_s = (before + t0.elapsed().as_secs_f64()) / 2.0;
        ss.push(SsRow {
            t_s,
            flows: parse_ss(&String::from_utf8_lossy(&out.stdout), n, port),
        });
        if Instant::now() >= next_nstat {
            let t_s = t0.elapsed().as_secs_f64();
            let out = Command::new("nstat")
                .arg("-asz")
                .output()
                .context("run nstat")?;
            nstat.push(NstatRow {
                t_s,
                counters: parse_nstat(&String::from_utf8_lossy(&out.stdout)),
            });
            next_nstat += Duration::from_millis(NSTAT_MS);
        }
        next += period;
        let now = Instant::now();
        if next > now {
            thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    Ok((ss, nstat))
}
