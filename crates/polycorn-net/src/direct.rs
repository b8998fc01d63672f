//! Baselines carried by the same relay and proxy: one tunnel connection per passenger
//! connection, either kernel MPTCP (the kernel's default scheduler over every path, uncoupled
//! congestion control: what OpenMPTCProuter-style deployments run) or plain TCP over the
//! passenger's SIM (passengers assigned round-robin to paths: today's operational HSR WiFi).
//!
//! A tunnel starts with one [`Frame::OpenFlow`] (relay → proxy) and one
//! [`Frame::OpenResult`] (proxy → relay); then the connection carries the passenger's bytes.
//! Tunnels are not encrypted (the baselines as deployed are not); the proxy accepts them only
//! from the source networks listed in `proxy.tunnel_peers`.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use polycorn_proto::frame::decode;
use polycorn_proto::{Destination, Frame, OpenStatus};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

use crate::path::RelayPath;
use crate::{sockopt, socks5, subflow};

/// Which baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectMode {
    /// Kernel MPTCP.
    Mptcp,
    /// One path per passenger.
    Single,
}

/// Relay side of the baselines.
#[derive(Debug)]
pub struct Tunnels {
    mode: DirectMode,
    paths: Vec<RelayPath>,
    /// Each path's proxy address (the baselines take literal addresses only).
    proxies: Vec<SocketAddr>,
    port: u16,
    congestion: Option<String>,
    assign: Mutex<HashMap<IpAddr, usize>>,
}

impl Tunnels {
    /// Tunnels to the proxy's `port` over `paths`. Fails on a path whose proxy is a host name:
    /// the baselines reproduce what operators run today, with the proxy's address configured.
    pub fn new(
        mode: DirectMode,
        paths: Vec<RelayPath>,
        port: u16,
        congestion: Option<String>,
    ) -> Result<Tunnels, String> {
        let proxies = paths
            .iter()
            .map(|p| {
                p.proxy.ip().ok_or_else(|| {
                    format!(
                        "path {}: proxy {}: the mptcp and single baselines need an IP address",
                        p.name, p.proxy
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Tunnels {
            mode,
            paths,
            proxies,
            port,
            congestion,
            assign: Mutex::new(HashMap::new()),
        })
    }

    /// The path a passenger uses in `single` mode: assigned round-robin on first sight.
    pub fn path_of(&self, user: IpAddr) -> usize {
        let mut a = self.assign.lock().unwrap_or_else(|p| p.into_inner());
        let n = a.len();
        *a.entry(user).or_insert(n % self.paths.len().max(1))
    }

    /// Open a tunnel for `user` to `dst`; returns the connected stream or the proxy's answer.
    pub async fn open(&self, user: IpAddr, dst: &Destination) -> Result<TcpStream, OpenStatus> {
        let (i, sock) = match self.mode {
            DirectMode::Mptcp => {
                let p = &self.paths[0];
                let dom = socket2::Domain::for_address(self.proxies[0]);
                let s = sockopt::mptcp_socket(dom).map_err(|e| {
                    warn!(error = %e, "cannot create an MPTCP socket");
                    OpenStatus::Failed
                })?;
                if let Some(src) = p.source {
                    s.bind(&SocketAddr::new(src, 0).into())
                        .map_err(|_| OpenStatus::Failed)?;
                }
                // One socket option for every subflow the kernel adds: the smallest `mtu` of
                // the paths that set one.
                if let Some(mtu) = self.paths.iter().filter_map(|p| p.mtu).min() {
                    let mss = subflow::mss_for_mtu(mtu, self.proxies[0]);
                    if let Err(e) = s.set_mss(mss) {
                        warn!(error = %e, mtu, "MPTCP tunnel keeps the interfaces' segment size");
                    }
                }
                s.set_nonblocking(true).map_err(|_| OpenStatus::Failed)?;
                (0, s)
            }
            DirectMode::Single => {
                let i = self.path_of(user);
                let p = &self.paths[i];
                let s = match (p.source, p.device.as_deref()) {
                    (Some(src), Some(dev)) => sockopt::pinned_tcp_socket(src, dev),
                    _ => socket2::Socket::new(
                        socket2::Domain::for_address(self.proxies[i]),
                        socket2::Type::STREAM,
                        Some(socket2::Protocol::TCP),
                    )
                    .and_then(|s| s.set_nonblocking(true).map(|_| s)),
                }
                .map_err(|_| OpenStatus::Failed)?;
                if let Some(mtu) = p.mtu {
                    let mss = subflow::mss_for_mtu(mtu, self.proxies[i]);
                    if let Err(e) = s.set_mss(mss) {
                        warn!(error = %e, mtu, path = %p.name, "tunnel keeps the interface's segment size");
                    }
                }
                (i, s)
            }
        };
        let target = SocketAddr::new(self.proxies[i].ip(), self.port);
        let tsock = tokio::net::TcpSocket::from_std_stream(sock.into());
        let mut stream =
            match tokio::time::timeout(subflow::HANDSHAKE_TIMEOUT, tsock.connect(target)).await {
                Ok(Ok(s)) => s,
                _ => return Err(OpenStatus::Unreachable),
            };
        let _ = stream.set_nodelay(true);
        if let Some(cc) = &self.congestion {
            if let Err(e) = sockopt::set_congestion(stream.as_fd(), cc) {
                warn!(error = %e, "tunnel keeps the system's congestion control");
            }
        }
        let open = Frame::OpenFlow {
            cseq: 0,
            flow: 0,
            user,
            dst: dst.clone(),
        }
        .to_vec();
        if stream.write_all(&open).await.is_err() {
            return Err(OpenStatus::Unreachable);
        }
        // The proxy answers after its connect attempt (bounded by its connect timeout).
        let status = tokio::time::timeout(Duration::from_secs(60), read_result(&mut stream))
            .await
            .map_err(|_| OpenStatus::Unreachable)?
            .map_err(|_| OpenStatus::Unreachable)?;
        if status == OpenStatus::Ok {
            Ok(stream)
        } else {
            Err(status)
        }
    }

    /// Carry a passenger connection through a tunnel (answering SOCKS5 first if `socks`).
    pub async fn carry(
        &self,
        mut passenger: TcpStream,
        user: IpAddr,
        dst: Destination,
        socks: bool,
    ) {
        match self.open(user, &dst).await {
            Ok(mut tunnel) => {
                if socks
                    && socks5::reply(
                        &mut passenger,
                        socks5::Reply::Succeeded(SocketAddr::from(([0, 0, 0, 0], 0))),
                    )
                    .await
                    .is_err()
                {
                    return;
                }
                let _ = passenger.set_nodelay(true);
                copy_abortive_until_done(&mut passenger, &mut tunnel).await;
            }
            Err(status) => {
                debug!(%user, %dst, ?status, "tunnel open failed");
                if socks {
                    let _ = socks5::reply(&mut passenger, socks5::status_reply(status)).await;
                } else {
                    let _ = socket2::SockRef::from(&passenger).set_linger(Some(Duration::ZERO));
                }
            }
        }
    }
}

/// Copy both ways between `a` and `b` until both directions ended. Both sockets close
/// abortively (reset) unless the copy ended in order, also if this process dies meanwhile:
/// the kernel would otherwise close them with a FIN, which the other side could take for the
/// end of a complete answer (as polycorn's own flows, see `Engine::pump`).
async fn copy_abortive_until_done(a: &mut TcpStream, b: &mut TcpStream) {
    for s in [&*a, &*b] {
        let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
    }
    if tokio::io::copy_bidirectional(a, b).await.is_ok() {
        for s in [&*a, &*b] {
            let _ = socket2::SockRef::from(s).set_linger(None);
        }
    }
}

async fn read_result(s: &mut TcpStream) -> io::Result<OpenStatus> {
    let mut buf = Vec::with_capacity(64);
    loop {
        match decode(&buf) {
            Ok(Some((Frame::OpenResult { status, .. }, _))) => return Ok(status),
            Ok(Some(_)) | Err(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "bad tunnel answer",
                ))
            }
            Ok(None) => {}
        }
        if s.read_buf(&mut buf).await? == 0 || buf.len() > 1024 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// A listening socket that accepts kernel MPTCP connections (and plain TCP, by fallback).
pub fn mptcp_listener(addr: SocketAddr) -> io::Result<TcpListener> {
    let s = sockopt::mptcp_socket(socket2::Domain::for_address(addr))?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    s.set_nonblocking(true)?;
    TcpListener::from_std(s.into())
}

/// Proxy side: serve tunnels from allowed peers.
pub async fn serve_tunnels(
    listener: TcpListener,
    peers: Arc<Vec<ipnet::IpNet>>,
    connector: Arc<crate::connector::Connector>,
    congestion: Option<String>,
) {
    // Warn once, not per tunnel, when the congestion control cannot be set.
    let mut cc_warned = false;
    loop {
        let (mut s, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                warn!(error = %e, "tunnel accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ip = crate::policy::normalize(peer.ip());
        if !peers.iter().any(|n| n.contains(&ip)) {
            warn!(%peer, "tunnel from a peer outside proxy.tunnel_peers refused");
            let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
            continue;
        }
        // The proxy sends the downlink: its congestion control is the tunnel's (on an MPTCP
        // connection the kernel applies it to every subflow, present and joining).
        if let Some(cc) = &congestion {
            if let Err(e) = sockopt::set_congestion(s.as_fd(), cc) {
                if !std::mem::replace(&mut cc_warned, true) {
                    warn!(error = %e, "tunnel keeps the system's congestion control");
                }
            }
        }
        let c = connector.clone();
        tokio::spawn(async move {
            let mut buf = Vec::with_capacity(512);
            let req = loop {
                match decode(&buf) {
                    Ok(Some((Frame::OpenFlow { user, dst, .. }, n))) => break Some((user, dst, n)),
                    Ok(Some(_)) | Err(_) => break None,
                    Ok(None) => {}
                }
                match tokio::time::timeout(Duration::from_secs(10), s.read_buf(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 && buf.len() <= 1024 => {}
                    _ => break None,
                }
            };
            let Some((user, dst, used)) = req else {
                warn!(%peer, "bad tunnel request; closed");
                return;
            };
            let early = buf[used..].to_vec();
            match c.connect(&dst).await {
                Ok(mut server) => {
                    let ok = Frame::OpenResult {
                        cseq: 0,
                        flow: 0,
                        status: OpenStatus::Ok,
                    }
                    .to_vec();
                    if s.write_all(&ok).await.is_err() {
                        return;
                    }
                    if !early.is_empty() && server.write_all(&early).await.is_err() {
                        return;
                    }
                    let _ = s.set_nodelay(true);
                    info!(%user, %dst, "tunnel");
                    copy_abortive_until_done(&mut s, &mut server).await;
                }
                Err(status) => {
                    let r = Frame::OpenResult {
                        cseq: 0,
                        flow: 0,
                        status,
                    }
                    .to_vec();
                    let _ = s.write_all(&r).await;
                }
            }
        });
    }
}

/// Kernel MPTCP endpoints and limits installed by the relay (and removed on drop).
#[derive(Debug)]
pub struct MptcpEndpoints {
    added: Vec<IpAddr>,
}

fn ip_cmd(args: &[&str]) -> io::Result<()> {
    let out = std::process::Command::new("ip").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl MptcpEndpoints {
    /// Allow `subflows` subflows per connection and, on the relay, add every path but the
    /// first as a `subflow` endpoint (the first path carries the initial subflow).
    pub fn install(paths: &[RelayPath], subflows: usize) -> io::Result<MptcpEndpoints> {
        let n = subflows.clamp(1, 8).to_string();
        ip_cmd(&[
            "mptcp",
            "limits",
            "set",
            "subflows",
            &n,
            "add_addr_accepted",
            &n,
        ])?;
        let mut added = Vec::new();
        for p in paths.iter().skip(1) {
            let (Some(src), Some(dev)) = (p.source, p.device.as_deref()) else {
                continue;
            };
            let s = src.to_string();
            let _ = ip_cmd(&["mptcp", "endpoint", "delete", "address", &s]);
            ip_cmd(&["mptcp", "endpoint", "add", &s, "dev", dev, "subflow"])?;
            added.push(src);
        }
        Ok(MptcpEndpoints { added })
    }

    /// Limits only (the proxy side).
    pub fn limits(subflows: usize) -> io::Result<()> {
        let n = subflows.clamp(1, 8).to_string();
        ip_cmd(&[
            "mptcp",
            "limits",
            "set",
            "subflows",
            &n,
            "add_addr_accepted",
            &n,
        ])
    }
}

impl Drop for MptcpEndpoints {
    fn drop(&mut self) {
        for a in &self.added {
            let _ = ip_cmd(&["mptcp", "endpoint", "delete", "address", &a.to_string()]);
        }
    }
}
