//! `polycorn net bench`: how fast relay + proxy carry one bulk download (and one bulk upload)
//! over two unshaped veth paths with encryption on, and kernel MPTCP over the same paths in the
//! same run.
//!
//! Topology (namespaces `{name}-c/-r/-p/-s`, removed at the end):
//! client 10.0.1.2 ─lan0─ relay 10.0.1.1 ═path0/path1 (veth, 10.100.i.1 ⇄ 10.100.i.2)═ proxy
//! ─wan0─ server 10.0.2.2. The client's connection is intercepted transparently (TPROXY).
//! Throughput is counted at the receiver (the client for a download, the server for an upload);
//! CPU time of the relay and proxy processes comes from /proc (user + system), as a share of
//! one core.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::harness::{Daemon, Topology};
use polycorn_emu::netns::InNamespace;
use polycorn_net::config::{Limits, PathConfig, ProxyConfig, RelayConfig, TlsFiles};

/// Which way the bulk transfer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Direction {
    /// Server to client (a passenger downloading).
    Down,
    /// Client to server (a passenger uploading).
    Up,
    /// A download, then an upload.
    Both,
}

impl Direction {
    fn each(self) -> &'static [Direction] {
        match self {
            Direction::Down => &[Direction::Down],
            Direction::Up => &[Direction::Up],
            Direction::Both => &[Direction::Down, Direction::Up],
        }
    }
    fn label(self) -> &'static str {
        match self {
            Direction::Down => "down",
            Direction::Up => "up",
            Direction::Both => "both",
        }
    }
}

/// One measurement.
#[derive(Debug, Clone)]
pub struct Measured {
    /// System label.
    pub system: String,
    /// `down` or `up`.
    pub direction: &'static str,
    /// Goodput at the receiver (client for a download, server for an upload), Gbit/s.
    pub gbit: f64,
    /// Relay CPU, % of one core.
    pub relay_cpu: f64,
    /// Proxy CPU, % of one core.
    pub proxy_cpu: f64,
}

/// CPU seconds (user + system) of a process.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat; here index 11 and 12.
    (ticks(11) + ticks(12)) / 100.0
}

/// The bench server: bulk data to every connection on port 5201 (downloads); on port 5202 it
/// reads every connection to the end (uploads) and hands the counter of the bytes it received
/// to `uploads`, one per connection, in order.
fn start_server(ns: &str) -> Result<mpsc::Receiver<Arc<AtomicU64>>> {
    let ns = ns.to_string();
    let (tx, rx) = mpsc::channel();
    let (up_tx, up_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _g = InNamespace::enter(&ns).expect("enter server namespace");
        let down = TcpListener::bind("10.0.2.2:5201").expect("bind bench server");
        let up = TcpListener::bind("10.0.2.2:5202").expect("bind bench upload server");
        tx.send(()).ok();
        std::thread::spawn(move || {
            for s in up.incoming().flatten() {
                let got = Arc::new(AtomicU64::new(0));
                if up_tx.send(got.clone()).is_err() {
                    return;
                }
                std::thread::spawn(move || {
                    let mut s = s;
                    let mut buf = vec![0u8; 1 << 20];
                    while let Ok(n @ 1..) = s.read(&mut buf) {
                        got.fetch_add(n as u64, Ordering::Relaxed);
                    }
                });
            }
        });
        for s in down.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let buf = vec![0u8; 256 * 1024];
                while s.write_all(&buf).is_ok() {}
            });
        }
    });
    rx.recv_timeout(Duration::from_secs(5))
        .context("bench server did not start")?;
    Ok(up_rx)
}

/// Gbit/s of one download, counted at the client.
fn download(ns: &str, secs: f64) -> Result<f64> {
    let ns = ns.to_string();
    std::thread::spawn(move || -> Result<f64> {
        let _g = InNamespace::enter(&ns)?;
        let dst: SocketAddr = "10.0.2.2:5201".parse().expect("literal");
        let mut s = TcpStream::connect_timeout(&dst, Duration::from_secs(10))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut buf = vec![0u8; 1 << 20];
        // Warm-up: let congestion windows open.
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(1) {
            if s.read(&mut buf)? == 0 {
                bail!("server closed during warm-up");
            }
        }
        let t1 = Instant::now();
        let mut bytes = 0u64;
        while t1.elapsed().as_secs_f64() < secs {
            let n = s.read(&mut buf)?;
            if n == 0 {
                bail!("server closed");
            }
            bytes += n as u64;
        }
        if bytes == 0 {
            bail!("the client received nothing of the download in {secs} s");
        }
        Ok(bytes as f64 * 8.0 / t1.elapsed().as_secs_f64() / 1e9)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("client thread panicked"))?
}

/// Gbit/s of one upload, counted at the server (bytes the client's socket took but the server
/// has not received do not count).
fn upload(ns: &str, secs: f64, uploads: &mpsc::Receiver<Arc<AtomicU64>>) -> Result<f64> {
    let (conn_tx, conn_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let ns = ns.to_string();
    let writer = std::thread::spawn(move || -> Result<()> {
        let _g = InNamespace::enter(&ns)?;
        let dst: SocketAddr = "10.0.2.2:5202".parse().expect("literal");
        let mut s = TcpStream::connect_timeout(&dst, Duration::from_secs(10))?;
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        conn_tx.send(()).ok();
        let buf = vec![0u8; 256 * 1024];
        while stop_rx.try_recv().is_err() {
            s.write_all(&buf).context("upload write")?;
        }
        Ok(())
    });
    let got = conn_rx
        .recv_timeout(Duration::from_secs(15))
        .map_err(|_| anyhow::anyhow!("upload connection failed"))
        .and_then(|()| {
            uploads
                .recv_timeout(Duration::from_secs(10))
                .context("the server saw no upload connection")
        });
    let got = match got {
        Ok(g) => g,
        Err(e) => {
            drop(stop_tx);
            return match writer.join() {
                Ok(Err(w)) => Err(w.context(e.to_string())),
                _ => Err(e),
            };
        }
    };
    // Warm-up: let congestion windows open.
    std::thread::sleep(Duration::from_secs(1));
    let (b0, t0) = (got.load(Ordering::Relaxed), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (b1, t1) = (got.load(Ordering::Relaxed), Instant::now());
    stop_tx.send(()).ok();
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("upload thread panicked"))??;
    if b1 == b0 {
        bail!("the server received nothing of the upload in {secs} s");
    }
    Ok((b1 - b0) as f64 * 8.0 / (t1 - t0).as_secs_f64() / 1e9)
}

/// Turns the relay's per-passenger limits off: the soak loads the relay from a few addresses
/// at many times one person's connection rate, and the limits would measure themselves.
pub(crate) fn passenger_limits_off(limits: &mut Limits) {
    limits.passenger_max_flows = 0;
    limits.passenger_flow_rate = 0;
}

/// Relay and proxy configurations for this topology, with `scheduler` at both ends, the
/// relay's per-passenger limits off and, if given, metrics served on `metrics` in each
/// namespace.
pub(crate) fn configs(
    mode: &str,
    scheduler: &str,
    metrics: Option<&str>,
) -> Result<(RelayConfig, ProxyConfig)> {
    let metrics: Option<SocketAddr> = metrics.map(str::parse).transpose()?;
    let mut relay = RelayConfig::new(crate::bench::configs::proxy_addr(0)?);
    relay.relay.mode = crate::bench::configs::relay_mode(mode)?;
    relay.relay.scheduler = scheduler.into();
    relay.paths = (0..2)
        .map(|i| -> Result<PathConfig> {
            Ok(PathConfig {
                name: format!("p{i}"),
                device: format!("path{i}"),
                source: Some(format!("10.100.{i}.1").parse()?),
                proxy: Some(crate::bench::configs::proxy_addr(i)?),
                mtu: None,
                modem: None,
                at_port: None,
            })
        })
        .collect::<Result<_>>()?;
    relay.intercept.transparent = Some("0.0.0.0:7070".parse()?);
    relay.intercept.install_nft = true;
    relay.intercept.lan_device = Some("lan0".into());
    relay.tls = Some(TlsFiles::new("ca.pem", "relay.pem", "relay.key"));
    relay.log.level = "info".into();
    passenger_limits_off(&mut relay.limits);
    relay.metrics.listen = metrics;
    let mut proxy = ProxyConfig::new(TlsFiles::new("ca.pem", "proxy.pem", "proxy.key"));
    proxy.proxy.listen = vec!["0.0.0.0:7700".parse()?];
    proxy.proxy.tunnel_listen = Some("0.0.0.0:7701".parse()?);
    proxy.proxy.tunnel_peers = vec!["10.100.0.0/16".parse()?];
    proxy.proxy.scheduler = scheduler.into();
    proxy.policy.allow = vec!["10.0.2.0/24".parse()?];
    proxy.metrics.listen = metrics;
    Ok((relay, proxy))
}

/// Writes the configurations of [`configs`] to `dir/relay-{mode}.toml` and `dir/proxy.toml`.
pub(crate) fn write_configs(
    dir: &Path,
    mode: &str,
    scheduler: &str,
    metrics: Option<&str>,
) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let (relay, proxy) = configs(mode, scheduler, metrics)?;
    crate::bench::configs::write_pair(dir, &format!("relay-{mode}.toml"), &relay, &proxy)
}

/// Run the benchmark; prints a table and returns the measurements.
pub fn run(name: &str, secs: f64, direction: Direction) -> Result<Vec<Measured>> {
    if !(secs.is_finite() && secs > 0.0) {
        bail!("--secs must be a positive number of seconds, not {secs}");
    }
    let dir = tempdir()?;
    polycorn_net::tls::generate(&dir, &[], true)?;
    let topo = Topology::up(name)?;
    let uploads = start_server(&topo.ns("s"))?;
    let (_, proxy_cfg) = write_configs(&dir, "polycorn", "hrsch", None)?;
    let proxy_log = dir.join("proxy.log");
    let ready_by = || Instant::now() + Duration::from_secs(20);
    let mut proxy = Daemon::start(&topo.ns("p"), "proxy", &proxy_cfg, proxy_log)?;
    proxy.wait_for("proxy running", 1, ready_by())?;
    let mut out = Vec::new();
    for (mode, label) in [
        ("polycorn", "polycorn (hrsch, TLS 1.3)"),
        ("mptcp", "kernel MPTCP (plain)"),
    ] {
        let (relay_cfg, _) = write_configs(&dir, mode, "hrsch", None)?;
        let log = dir.join(format!("relay-{mode}.log"));
        let mut relay = Daemon::start(&topo.ns("r"), "relay", &relay_cfg, log)?;
        relay.wait_for("relay running", 1, ready_by())?;
        if mode == "polycorn" {
            relay.wait_for("subflow up", 2, ready_by())?;
        }
        for &d in direction.each() {
            let (r0, p0) = (cpu_secs(relay.pid()), cpu_secs(proxy.pid()));
            let t0 = Instant::now();
            let gbit = match d {
                Direction::Up => upload(&topo.ns("c"), secs, &uploads),
                _ => download(&topo.ns("c"), secs),
            }
            .with_context(|| format!("{label}, {}", d.label()))?;
            let wall = t0.elapsed().as_secs_f64();
            let (r1, p1) = (cpu_secs(relay.pid()), cpu_secs(proxy.pid()));
            out.push(Measured {
                system: label.into(),
                direction: d.label(),
                gbit,
                relay_cpu: (r1 - r0) / wall * 100.0,
                proxy_cpu: (p1 - p0) / wall * 100.0,
            });
        }
        drop(relay);
    }
    drop(proxy);
    drop(topo);
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "one bulk transfer at a time, 2 unshaped veth paths, {secs:.0} s after 1 s warm-up ({} cores):",
        num_cpus()
    );
    println!(
        "{:<28} {:>9} {:>8} {:>11} {:>11}",
        "system", "direction", "Gbit/s", "relay CPU", "proxy CPU"
    );
    for m in &out {
        println!(
            "{:<28} {:>9} {:>8.2} {:>10.0}% {:>10.0}%",
            m.system, m.direction, m.gbit, m.relay_cpu, m.proxy_cpu
        );
    }
    for &d in direction.each() {
        let of = |prefix: &str| {
            out.iter()
                .find(|m| m.direction == d.label() && m.system.starts_with(prefix))
                .map(|m| m.gbit)
        };
        if let (Some(p), Some(k)) = (of("polycorn"), of("kernel")) {
            if k > 0.0 {
                println!("polycorn / kernel MPTCP, {}: {:.2}x", d.label(), p / k);
            }
        }
    }
    println!(
        "(CPU % of one core, from /proc user+system time; client and server share the same cores)"
    );
    Ok(out)
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn tempdir() -> Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("polycorn-netbench-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The relay and proxy files for `mode`, written out key by key: what the typed
    /// configurations must mean to the daemons.
    fn by_hand(mode: &str, scheduler: &str, metrics: Option<&str>) -> (String, String) {
        let metrics = metrics.map_or(String::new(), |m| {
            format!("\n[metrics]\nlisten = \"{m}\"\n")
        });
        let relay = format!(
            "[relay]\nmode = \"{mode}\"\nscheduler = \"{scheduler}\"\nproxy = \"10.100.0.2:7700\"\n\n\
             [[path]]\nname = \"p0\"\ndevice = \"path0\"\nsource = \"10.100.0.1\"\nproxy = \"10.100.0.2:7700\"\n\n\
             [[path]]\nname = \"p1\"\ndevice = \"path1\"\nsource = \"10.100.1.1\"\nproxy = \"10.100.1.2:7700\"\n\n\
             [intercept]\ntransparent = \"0.0.0.0:7070\"\ninstall_nft = true\nlan_device = \"lan0\"\n\n\
             [tls]\nca = \"ca.pem\"\ncert = \"relay.pem\"\nkey = \"relay.key\"\n\n[log]\nlevel = \"info\"\n\
             \n[limits]\npassenger_max_flows = 0\npassenger_flow_rate = 0\n{metrics}"
        );
        let proxy = format!(
            "[proxy]\nlisten = \"0.0.0.0:7700\"\ntunnel_listen = \"0.0.0.0:7701\"\ntunnel_peers = [\"10.100.0.0/16\"]\nscheduler = \"{scheduler}\"\n\n\
             [tls]\nca = \"ca.pem\"\ncert = \"proxy.pem\"\nkey = \"proxy.key\"\n\n[policy]\nallow = [\"10.0.2.0/24\"]\n{metrics}"
        );
        (relay, proxy)
    }

    #[test]
    fn netbench_and_soak_configurations_read_as_written_by_hand() {
        let dir = std::env::temp_dir().join(format!("pc-netbench-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (mode, scheduler, metrics) in [
            ("polycorn", "hrsch", None),
            ("mptcp", "hrsch", None),
            ("polycorn", "minrtt", Some(crate::harness::METRICS_ADDR)),
        ] {
            let (relay, proxy) = by_hand(mode, scheduler, metrics);
            let (r, p) = write_configs(&dir, mode, scheduler, metrics).unwrap();
            let (r, p) = (
                std::fs::read_to_string(r).unwrap(),
                std::fs::read_to_string(p).unwrap(),
            );
            assert_eq!(
                RelayConfig::from_toml(&r, "written").expect(&r),
                RelayConfig::from_toml(&relay, "by hand").expect(&relay),
                "{mode} {scheduler} {metrics:?}\n{r}"
            );
            assert_eq!(
                ProxyConfig::from_toml(&p, "written").expect(&p),
                ProxyConfig::from_toml(&proxy, "by hand").expect(&proxy),
                "{mode} {scheduler} {metrics:?}\n{p}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
