//! Traffic of a bench run, in the testbed's namespaces: the servers (checked bulk downloads via
//! `polycorn_net::loadgen`, an IM echo server, and an upload sink that checks every byte and
//! records when it arrived) and the client side that plays a [`Plan`] against the emulator's
//! clock `t0`. Every downloaded and uploaded byte is verified; every IM answer must name the
//! message it answers.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use polycorn_emu::netns::{ip_in, InNamespace};
use polycorn_net::loadgen::{self, Pattern};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::analysis::{FlowResult, ImResult, BIN_MS, TAIL_SHARE};
use super::plan::{BulkFlow, Plan, IM_DOWN_BYTES, IM_UP_BYTES};

/// Bulk server address (in the server namespace).
pub const BULK_SERVER: &str = "10.0.2.2:9000";
/// IM server address.
pub const IM_SERVER: &str = "10.0.2.2:9001";
/// IM users get client addresses 10.0.1.(IM_FIRST_HOST + user).
const IM_FIRST_HOST: u8 = 100;
/// Upload server address.
pub const UPLOAD_SERVER: &str = "10.0.2.2:9002";
/// The upload server's answer once it has every byte: all bytes as sent.
const UPLOAD_OK: u8 = 1;
/// The upload server's answer once it has every byte: some byte differs.
const UPLOAD_CORRUPT: u8 = 2;

/// When each upload's bytes reached the server: (arrival, bytes) per read, keyed by the token the
/// client sent. Server and client threads share one process clock, so the client times its
/// uploads by what the server received.
#[derive(Clone, Default, Debug)]
pub struct Arrivals(Arc<Mutex<HashMap<u64, Marks>>>);

/// (arrival, bytes) per read.
type Marks = Vec<(Instant, u64)>;

impl Arrivals {
    fn record(&self, token: u64, at: Instant, n: u64) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(token)
            .or_default()
            .push((at, n));
    }
    fn take(&self, token: u64) -> Marks {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&token)
            .unwrap_or_default()
    }
}

/// Servers running in a thread of the server namespace; stopped on drop.
#[derive(Debug)]
pub struct Servers {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// What the upload server received.
    pub arrivals: Arrivals,
}

impl Servers {
    /// Start the bulk, IM and upload servers in namespace `ns`.
    pub fn start(ns: &str) -> Result<Servers> {
        let ns = ns.to_string();
        let arrivals = Arrivals::default();
        let sink = arrivals.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("bench-servers".into())
            .spawn(move || {
                let ready = ready_tx.clone();
                let run = || -> Result<(), String> {
                    let _g = InNamespace::enter(&ns).map_err(|e| e.to_string())?;
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| e.to_string())?;
                    rt.block_on(async move {
                        let bulk = tokio::net::TcpListener::bind(BULK_SERVER)
                            .await
                            .map_err(|e| format!("bind {BULK_SERVER}: {e}"))?;
                        let im = tokio::net::TcpListener::bind(IM_SERVER)
                            .await
                            .map_err(|e| format!("bind {IM_SERVER}: {e}"))?;
                        let up = tokio::net::TcpListener::bind(UPLOAD_SERVER)
                            .await
                            .map_err(|e| format!("bind {UPLOAD_SERVER}: {e}"))?;
                        let _ = ready.send(Ok(()));
                        tokio::select! {
                            _ = loadgen::serve(bulk) => {}
                            _ = serve_im(im) => {}
                            _ = serve_uploads(up, sink) => {}
                            _ = stop_rx => {}
                        }
                        Ok(())
                    })
                };
                if let Err(e) = run() {
                    let _ = ready_tx.send(Err(e));
                }
            })?;
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => Ok(Servers {
                stop: Some(stop_tx),
                thread: Some(thread),
                arrivals,
            }),
            Ok(Err(e)) => anyhow::bail!("bench servers: {e}"),
            Err(_) => anyhow::bail!("bench servers did not start within 10 s"),
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// IM server: for every 100-byte message, answer 4 bytes (the message's index, big-endian,
/// read from its first 4 bytes).
async fn serve_im(l: tokio::net::TcpListener) {
    loop {
        if let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let _ = s.set_nodelay(true);
                let mut m = [0u8; IM_UP_BYTES];
                while s.read_exact(&mut m).await.is_ok() {
                    if s.write_all(&m[..IM_DOWN_BYTES]).await.is_err() {
                        return;
                    }
                }
            });
        }
    }
}

/// Upload server: per connection a 16-byte header (size, token; big-endian u64), then `size`
/// bytes following `Pattern::new(size)`, each read's arrival recorded under the token; once all
/// have arrived, one byte ([`UPLOAD_OK`] or [`UPLOAD_CORRUPT`]) and close.
async fn serve_uploads(l: tokio::net::TcpListener, arrivals: Arrivals) {
    loop {
        if let Ok((s, _)) = l.accept().await {
            let arrivals = arrivals.clone();
            tokio::spawn(async move {
                // A client that gives up reports it; nothing to do here.
                let _ = receive_upload(s, &arrivals).await;
            });
        }
    }
}

async fn receive_upload(mut s: TcpStream, arrivals: &Arrivals) -> std::io::Result<()> {
    let mut hdr = [0u8; 16];
    s.read_exact(&mut hdr).await?;
    let size = u64::from_be_bytes(hdr[..8].try_into().expect("8 bytes"));
    let token = u64::from_be_bytes(hdr[8..].try_into().expect("8 bytes"));
    let mut p = Pattern::new(size);
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0u64;
    let mut verdict = UPLOAD_OK;
    while got < size {
        let want = ((size - got) as usize).min(buf.len());
        let n = s.read(&mut buf[..want]).await?;
        if n == 0 {
            return Ok(());
        }
        arrivals.record(token, Instant::now(), n as u64);
        if verdict == UPLOAD_OK && p.check(&buf[..n]).is_err() {
            verdict = UPLOAD_CORRUPT;
        }
        got += n as u64;
    }
    s.write_all(&[verdict]).await?;
    s.shutdown().await?;
    // Wait for the client to close, so its last bytes are not answered with RST.
    let mut sink = [0u8; 1];
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read(&mut sink)).await;
    Ok(())
}

/// Give the client namespace one address per IM user (idempotent).
pub fn add_user_addresses(ns: &str, users: usize) -> Result<()> {
    for u in 0..users {
        let a = format!("10.0.1.{}/24", IM_FIRST_HOST as usize + u);
        ip_in(ns, &["addr", "add", &a, "dev", "lan0"])
            .with_context(|| format!("add {a} in {ns}"))?;
    }
    Ok(())
}

/// What the client measured.
#[derive(Debug, Default)]
pub struct Played {
    /// Bulk downloads, by plan index.
    pub flows: Vec<FlowResult>,
    /// IM messages.
    pub im: Vec<ImResult>,
    /// Bulk uploads, by plan index, timed by their arrival at the server.
    pub uploads: Vec<FlowResult>,
    /// Per bulk download (by plan index): its connection's local port, if it connected, and
    /// when it started (its FCT counts from here).
    pub download_ports: Vec<(usize, Option<u16>, Instant)>,
}

/// Play `plan` from namespace `ns` against the emulator clock `t0`; `arrivals` is what the
/// upload server of this run records. Returns when every flow and message is done or given up.
pub fn run_client(ns: &str, plan: &Plan, t0: Instant, arrivals: &Arrivals) -> Result<Played> {
    let ns = ns.to_string();
    let plan = plan.clone();
    let arrivals = arrivals.clone();
    std::thread::Builder::new()
        .name("bench-client".into())
        .spawn(move || -> Result<Played> {
            let _g = InNamespace::enter(&ns)?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            Ok(rt.block_on(play(plan, t0, arrivals)))
        })?
        .join()
        .map_err(|_| anyhow::anyhow!("bench client thread panicked"))?
}

fn at(t0: Instant, s: f64) -> tokio::time::Instant {
    tokio::time::Instant::from_std(t0 + Duration::from_secs_f64(s))
}

/// The result of one bulk flow from its progress.
fn flow_result(
    f: &BulkFlow,
    started: Instant,
    prog: &Progress,
    err: Option<String>,
    timeout: f64,
) -> FlowResult {
    let ok = err.is_none();
    let end = prog.last.unwrap_or_else(Instant::now);
    FlowResult {
        idx: f.idx,
        size: f.size,
        start_s: f.start_s,
        ok,
        error: err,
        first_byte_s: prog.first.map_or(f64::NAN, |t| (t - started).as_secs_f64()),
        fct_s: if ok {
            (end - started).as_secs_f64()
        } else {
            timeout
        },
        tail_s: match (prog.tail_start, prog.last) {
            (Some(a), Some(b)) if ok => (b - a).as_secs_f64(),
            _ => f64::NAN,
        },
        bins: prog.bins(started),
        budget: None,
    }
}

fn outcome(
    r: Result<std::io::Result<()>, tokio::time::error::Elapsed>,
    timeout: f64,
) -> Option<String> {
    match r {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!("not complete after {timeout} s")),
    }
}

async fn play(plan: Plan, t0: Instant, arrivals: Arrivals) -> Played {
    let mut bulk = tokio::task::JoinSet::new();
    for f in plan.bulk.clone() {
        let timeout = plan.bulk_timeout_s;
        bulk.spawn(async move {
            tokio::time::sleep_until(at(t0, f.start_s)).await;
            let started = Instant::now();
            let mut prog = Progress::new(f.size);
            let r = tokio::time::timeout(
                Duration::from_secs_f64(timeout),
                download(f.size, &mut prog),
            )
            .await;
            let port = (f.idx, prog.port, started);
            (
                flow_result(&f, started, &prog, outcome(r, timeout), timeout),
                port,
            )
        });
    }
    let mut up = tokio::task::JoinSet::new();
    for f in plan.uploads.clone() {
        let timeout = plan.upload_timeout_s;
        let arrivals = arrivals.clone();
        up.spawn(async move {
            tokio::time::sleep_until(at(t0, f.start_s)).await;
            let started = Instant::now();
            let token = f.idx as u64;
            let r =
                tokio::time::timeout(Duration::from_secs_f64(timeout), upload(f.size, token)).await;
            let mut prog = Progress::new(f.size);
            for (t, n) in arrivals.take(token) {
                prog.on_read_at(t, n);
            }
            flow_result(&f, started, &prog, outcome(r, timeout), timeout)
        });
    }
    let mut im = tokio::task::JoinSet::new();
    for seg in plan.im.clone() {
        for (user, sends) in seg.sends_s.iter().cloned().enumerate() {
            let (users, start_s, deadline_s) = (seg.users, seg.start_s, seg.deadline_s);
            im.spawn(async move {
                tokio::time::sleep_until(at(t0, start_s)).await;
                im_user(t0, users, user, start_s, sends, deadline_s).await
            });
        }
    }
    let mut flows = Vec::new();
    let mut download_ports = Vec::new();
    while let Some(r) = bulk.join_next().await {
        if let Ok((f, port)) = r {
            flows.push(f);
            download_ports.push(port);
        }
    }
    let mut uploads = Vec::new();
    while let Some(r) = up.join_next().await {
        if let Ok(f) = r {
            uploads.push(f);
        }
    }
    let mut msgs = Vec::new();
    while let Some(r) = im.join_next().await {
        if let Ok(v) = r {
            msgs.extend(v);
        }
    }
    flows.sort_by_key(|f| f.idx);
    uploads.sort_by_key(|f| f.idx);
    msgs.sort_by_key(|m| (m.users, m.user, m.msg));
    download_ports.sort_by_key(|p| p.0);
    Played {
        flows,
        im: msgs,
        uploads,
        download_ports,
    }
}

/// Receive progress of one download (at the client) or upload (at the server).
struct Progress {
    size: u64,
    got: u64,
    first: Option<Instant>,
    tail_start: Option<Instant>,
    last: Option<Instant>,
    marks: Vec<(Instant, u64)>,
    /// The connection's local port (downloads).
    port: Option<u16>,
}

impl Progress {
    fn new(size: u64) -> Progress {
        Progress {
            size,
            got: 0,
            first: None,
            tail_start: None,
            last: None,
            marks: Vec::new(),
            port: None,
        }
    }
    fn on_read(&mut self, n: usize) {
        self.on_read_at(Instant::now(), n as u64);
    }
    fn on_read_at(&mut self, now: Instant, n: u64) {
        self.first.get_or_insert(now);
        self.got += n;
        if self.tail_start.is_none() && self.got as f64 >= self.size as f64 * (1.0 - TAIL_SHARE) {
            self.tail_start = Some(now);
        }
        self.last = Some(now);
        self.marks.push((now, n));
    }
    fn bins(&self, started: Instant) -> Vec<u64> {
        let mut v: Vec<u64> = Vec::new();
        for (t, n) in &self.marks {
            let j = ((*t - started).as_millis() as u64 / BIN_MS) as usize;
            if v.len() <= j {
                v.resize(j + 1, 0);
            }
            v[j] += n;
        }
        v
    }
}

/// One checked download over the loadgen protocol (no upload), recording progress.
async fn download(size: u64, prog: &mut Progress) -> std::io::Result<()> {
    let mut s = TcpStream::connect(BULK_SERVER).await?;
    let _ = s.set_nodelay(true);
    prog.port = s.local_addr().ok().map(|a| a.port());
    let mut hdr = [0u8; 16];
    hdr[..8].copy_from_slice(&size.to_be_bytes());
    s.write_all(&hdr).await?;
    let mut p = Pattern::new(size + 1);
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0u64;
    while got < size {
        let want = ((size - got) as usize).min(buf.len());
        let n = s.read(&mut buf[..want]).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("stream ended after {got} of {size} bytes"),
            ));
        }
        if let Err(i) = p.check(&buf[..n]) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("byte {} of {size} differs", got + i as u64),
            ));
        }
        got += n as u64;
        prog.on_read(n);
    }
    // The server closes after the download: nothing more may arrive.
    let mut extra = [0u8; 1];
    match s.read(&mut extra).await? {
        0 => Ok(()),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "bytes after the download",
        )),
    }
}

/// One checked upload of `size` bytes to the upload server under `token`; Ok once the server
/// has every byte and found them as sent.
async fn upload(size: u64, token: u64) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    let mut s = TcpStream::connect(UPLOAD_SERVER).await?;
    let _ = s.set_nodelay(true);
    let mut hdr = [0u8; 16];
    hdr[..8].copy_from_slice(&size.to_be_bytes());
    hdr[8..].copy_from_slice(&token.to_be_bytes());
    s.write_all(&hdr).await?;
    let mut p = Pattern::new(size);
    let mut buf = vec![0u8; 64 * 1024];
    let mut sent = 0u64;
    while sent < size {
        let n = ((size - sent) as usize).min(buf.len());
        p.fill(&mut buf[..n]);
        s.write_all(&buf[..n]).await?;
        sent += n as u64;
    }
    let mut verdict = [0u8; 1];
    match s.read(&mut verdict).await? {
        0 => {
            return Err(Error::new(
                ErrorKind::UnexpectedEof,
                "the server closed before it had every byte",
            ))
        }
        _ if verdict[0] == UPLOAD_OK => {}
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidData,
                "the server found uploaded bytes that differ from those sent",
            ))
        }
    }
    // The server closes after its answer: nothing more may arrive.
    let mut extra = [0u8; 1];
    match s.read(&mut extra).await? {
        0 => Ok(()),
        _ => Err(Error::new(
            ErrorKind::InvalidData,
            "bytes after the upload's answer",
        )),
    }
}

/// One IM user: a long-lived connection from its own address, messages at the planned times
/// (sent even if earlier answers are outstanding), answers matched in order.
async fn im_user(
    t0: Instant,
    users: usize,
    user: usize,
    start_s: f64,
    sends: Vec<f64>,
    deadline_s: f64,
) -> Vec<ImResult> {
    let mut out: Vec<ImResult> = sends
        .iter()
        .enumerate()
        .map(|(msg, s)| ImResult {
            users,
            user,
            msg,
            send_s: start_s + s,
            delivery_s: None,
        })
        .collect();
    let deadline = at(t0, start_s + deadline_s);
    let src = IpAddr::V4(Ipv4Addr::new(10, 0, 1, IM_FIRST_HOST + user as u8));
    let conn = async {
        let sock = TcpSocket::new_v4()?;
        sock.bind(SocketAddr::new(src, 0))?;
        sock.connect(IM_SERVER.parse().expect("valid")).await
    };
    let Ok(Ok(stream)) = tokio::time::timeout_at(deadline, conn).await else {
        return out;
    };
    let _ = stream.set_nodelay(true);
    let (mut r, mut w) = stream.into_split();
    let sent_at: std::sync::Arc<std::sync::Mutex<Vec<Option<Instant>>>> =
        std::sync::Arc::new(std::sync::Mutex::new(vec![None; sends.len()]));
    let writer = {
        let sent_at = sent_at.clone();
        let sends = sends.clone();
        async move {
            for (k, s) in sends.iter().enumerate() {
                tokio::time::sleep_until(at(t0, start_s + s)).await;
                let mut m = [0u8; IM_UP_BYTES];
                m[..4].copy_from_slice(&(k as u32).to_be_bytes());
                m[4] = user as u8;
                sent_at.lock().unwrap_or_else(|p| p.into_inner())[k] = Some(Instant::now());
                if w.write_all(&m).await.is_err() {
                    return;
                }
            }
            // Keep the write half open until the deadline (closing it would end the echo).
            tokio::time::sleep_until(deadline).await;
        }
    };
    let reader = async {
        let mut a = [0u8; IM_DOWN_BYTES];
        for (k, slot) in out.iter_mut().enumerate() {
            if r.read_exact(&mut a).await.is_err() {
                return;
            }
            let now = Instant::now();
            if u32::from_be_bytes(a) as usize != k {
                return; // an answer out of order or corrupted: stop counting this user
            }
            if let Some(t) = sent_at.lock().unwrap_or_else(|p| p.into_inner())[k] {
                slot.delivery_s = Some((now - t).as_secs_f64());
            }
        }
    };
    let _ = tokio::time::timeout_at(deadline, async {
        tokio::join!(writer, reader);
    })
    .await;
    out
}
