//! A relay's check of its paths before it is put in service (`polycorn relay --check-paths`):
//! over every path, as the relay itself would, look the proxy up, connect pinned to the path's
//! interface and source, TLS with the relay's certificate, and exchange Hellos under the path
//! check's session id ([`CHECK_SESSION`]), then send [`PROBE_BYTES`] of data in full-size
//! segments and have the proxy send as many back, which finds a path-MTU black hole (a carrier
//! that drops large packets silently lets the handshakes through and stalls the data). The
//! proxy answers and closes without opening a session, so a check run beside a working relay
//! changes nothing for its passengers.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use polycorn_proto::frame::{decode, encode_data_header};
use polycorn_proto::{Frame, Role, CHECK_SESSION, VERSION};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tracing::{debug, info};

use crate::path::RelayPath;
use crate::proxy_addr::{ProxyAddr, ProxyResolver};
use crate::subflow::{self, ConnectTimeouts, HandshakeError, SubflowSockopts};

/// How long a path's check may take: TCP (staggered attempts as the relay makes them), then
/// TLS and the Hellos, then the proxy's closing words.
pub const TIMEOUTS: ConnectTimeouts = ConnectTimeouts {
    tcp: Duration::from_secs(10),
    handshake: Duration::from_secs(10),
    tcp_stagger: Some(Duration::from_millis(250)),
};
/// Data sent each way after the Hellos (flow 0, which no passenger's flow uses).
pub const PROBE_BYTES: usize = 32 * 1024;
/// How long the proxy waits for the relay's probe before it closes the check without it.
pub const PROBE_WAIT: Duration = Duration::from_secs(5);
/// How long the relay waits, after the Hellos, for the proxy's probe and closing words.
pub const ANSWER_WAIT: Duration = Duration::from_secs(8);
/// How long the relay waits for a proxy of an earlier build (which ignores the probe and never
/// closes the check itself).
const OLDER_WAIT: Duration = Duration::from_secs(2);

/// One path's result.
#[derive(Debug)]
pub struct PathCheck {
    /// The path's name.
    pub path: String,
    /// Its interface.
    pub device: Option<String>,
    /// The proxy as configured (address or `host:port`).
    pub proxy: String,
    /// The proxy's address this check tried (`None`: none was found for the path).
    pub addr: Option<SocketAddr>,
    /// What happened.
    pub outcome: Result<Reached, HandshakeError>,
}

/// A path that reached the proxy.
#[derive(Debug)]
pub struct Reached {
    /// The path's address and port (the source the relay's subflow would use).
    pub local: Option<SocketAddr>,
    /// The proxy's address it reached.
    pub proxy: SocketAddr,
    /// From the first TCP attempt to the proxy's Hello.
    pub setup: Duration,
    /// TCP's smoothed round-trip time after the handshakes (a handful of samples).
    pub rtt: Option<Duration>,
    /// The segment size TCP settled on (`mtu` of the path bounds it).
    pub mss: Option<u32>,
    /// When the proxy's certificate stops being valid, seconds since 1970.
    pub proxy_cert_not_after: Option<i64>,
    /// How the exchange after the Hellos went.
    pub answer: Answer,
}

/// What followed the Hellos.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The probe went both ways and the proxy closed the check with these words.
    Checked(String),
    /// The proxy closed the check with these words without having received the probe: large
    /// packets from the train are lost on this path.
    ProbeLost(String),
    /// Neither the proxy's probe nor its closing words arrived within [`ANSWER_WAIT`]: large
    /// packets to the train are lost on this path, or it lost coverage just then.
    AnswerLost,
    /// A proxy of an earlier build: it answered the Hello as a new session's (with an epoch),
    /// ignored the probe and did not close; the check closed that session.
    Older,
}

impl PathCheck {
    /// Whether the path reached the proxy, and data went both ways (or the proxy is of a build
    /// that cannot tell).
    pub fn ok(&self) -> bool {
        matches!(
            &self.outcome,
            Ok(Reached {
                answer: Answer::Checked(_) | Answer::Older,
                ..
            })
        )
    }
}

/// Checks every path at once; the results in the paths' order. A proxy name with several
/// addresses of a path's family (failover between proxy hosts, see [`crate::proxy_addr`]) is
/// checked at each, the one the relay would take first; so every path has one result or more.
/// `sockopts` as the relay's subflows have them (each path's own `mtu` applies).
pub async fn check_paths(
    paths: &[RelayPath],
    tls: Arc<rustls::ClientConfig>,
    sockopts: SubflowSockopts,
) -> Vec<PathCheck> {
    let connector = subflow::connector(tls);
    // Paths naming the same proxy share a resolver, as in the relay.
    let mut resolvers = std::collections::BTreeMap::new();
    let mut tasks = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let resolver = resolvers
            .entry(p.proxy.clone())
            .or_insert_with(|| {
                ProxyResolver::new(p.proxy.clone(), crate::proxy_addr::MIN_FAILOVER_AFTER)
            })
            .clone();
        let (p, connector) = (p.clone(), connector.clone());
        let sockopts = SubflowSockopts {
            mtu: p.mtu,
            ..sockopts.clone()
        };
        let path = u8::try_from(i).unwrap_or(u8::MAX);
        tasks.push(tokio::spawn(async move {
            let result = |addr, outcome| PathCheck {
                path: p.name.clone(),
                device: p.device.clone(),
                proxy: p.proxy.to_string(),
                addr,
                outcome,
            };
            let (source, addrs) = match targets(&p, &resolver).await {
                Ok(t) => t,
                Err(e) => return vec![result(None, Err(e))],
            };
            let mut out = Vec::new();
            for addr in addrs {
                let outcome = check_path(&p, path, (source, addr), &connector, &sockopts).await;
                out.push(result(Some(addr), outcome));
            }
            out
        }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for (t, p) in tasks.into_iter().zip(paths) {
        match t.await {
            Ok(v) => out.extend(v),
            Err(e) => out.push(PathCheck {
                path: p.name.clone(),
                device: p.device.clone(),
                proxy: p.proxy.to_string(),
                addr: None,
                outcome: Err(HandshakeError::Io {
                    what: "check the path".into(),
                    source: std::io::Error::other(e.to_string()),
                }),
            }),
        }
    }
    out
}

/// The source address path `p` connects from and the proxy addresses to check from it: the
/// one the relay would take, then the name's other addresses of the same family.
async fn targets(
    p: &RelayPath,
    resolver: &Arc<ProxyResolver>,
) -> Result<(Option<IpAddr>, Vec<SocketAddr>), HandshakeError> {
    let (source, first) = crate::path::path_target(p, resolver, false).await?;
    let mut addrs = vec![first];
    if let ProxyAddr::Name { host, port } = &p.proxy {
        if let Ok(all) = crate::proxy_addr::lookup(host, *port).await {
            for a in all {
                if a.is_ipv4() == first.is_ipv4() && !addrs.contains(&a) {
                    addrs.push(a);
                }
            }
        }
    }
    Ok((source, addrs))
}

async fn check_path(
    p: &RelayPath,
    path: u8,
    (source, addr): (Option<IpAddr>, SocketAddr),
    connector: &tokio_rustls::TlsConnector,
    sockopts: &SubflowSockopts,
) -> Result<Reached, HandshakeError> {
    let hello = check_hello(Role::Relay, path, VERSION, Some(&p.name));
    let start = Instant::now();
    let est = subflow::relay_connect(
        connector,
        addr,
        source,
        p.device.as_deref(),
        sockopts,
        &hello,
        (CHECK_SESSION, path, 0),
        TIMEOUTS,
    )
    .await?;
    let setup = start.elapsed();
    let sample = (est.tcp_info)().ok();
    let local = est.stream.get_ref().0.local_addr().ok();
    let proxy_cert_not_after = est.peer_cert_not_after;
    let older = est.peer_epoch != 0;
    let mut stream = est.stream;
    let mut frames = FrameReader::new(est.initial);
    let answer = if older {
        // It runs a session for the check: let it settle, then close it.
        let _ = tokio::time::timeout(OLDER_WAIT, frames.next(&mut stream)).await;
        Answer::Older
    } else {
        let sent = async {
            stream.write_all(&probe()).await?;
            stream.flush().await
        };
        sent.await.map_err(|source| HandshakeError::Io {
            what: "send the probe".into(),
            source,
        })?;
        // The proxy's probe, then its closing words.
        let mut got = 0usize;
        let r = tokio::time::timeout(ANSWER_WAIT, async {
            while let Some(seen) = frames.next(&mut stream).await {
                match seen {
                    Seen::Probe(n, _) => got += n,
                    Seen::Close(words) => return Some(words),
                    Seen::Other => {}
                }
            }
            None
        })
        .await;
        match r {
            Ok(Some(words)) if got >= PROBE_BYTES => Answer::Checked(words),
            Ok(Some(words)) => Answer::ProbeLost(words),
            _ => Answer::AnswerLost,
        }
    };
    subflow::close_session(stream, "path check done").await;
    Ok(Reached {
        local,
        proxy: addr,
        setup,
        rtt: sample
            .as_ref()
            .map(|s| Duration::from_micros(s.sample.srtt.as_micros())),
        mss: sample.as_ref().map(|s| s.sample.mss_bytes),
        proxy_cert_not_after,
        answer,
    })
}

/// The Hello of a path check from `role` for `path` in protocol `version` (epoch 0, which no
/// session uses), naming the path as the relay's config does.
fn check_hello(role: Role, path: u8, version: u16, name: Option<&str>) -> Vec<u8> {
    Frame::Hello {
        version,
        role,
        session: CHECK_SESSION,
        path,
        epoch: 0,
        name: name
            .filter(|n| polycorn_proto::valid_path_name(n))
            .map(str::to_owned),
    }
    .to_vec()
}

/// One Data frame of flow 0 carrying [`PROBE_BYTES`], with FIN.
fn probe() -> Vec<u8> {
    let mut out = Vec::with_capacity(PROBE_BYTES + 32);
    encode_data_header(&mut out, 0, 0, true, PROBE_BYTES);
    // Not all zeros: nothing on the way should find it easy to compress.
    out.extend((0..PROBE_BYTES).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    out
}

/// What a check looks at in a frame.
enum Seen {
    /// Probe data (flow 0): its length and whether it is the last.
    Probe(usize, bool),
    /// The other end closed, saying this.
    Close(String),
    /// Anything else.
    Other,
}

/// Frames from a stream, one at a time.
struct FrameReader {
    buf: Vec<u8>,
    at: usize,
}

impl FrameReader {
    fn new(initial: Vec<u8>) -> FrameReader {
        FrameReader {
            buf: initial,
            at: 0,
        }
    }

    /// What the next frame says; `None` at the end of the stream, on an error or an
    /// undecodable frame.
    async fn next<S: AsyncRead + Unpin>(&mut self, s: &mut S) -> Option<Seen> {
        loop {
            match decode(&self.buf[self.at..]) {
                Ok(Some((frame, n))) => {
                    self.at += n;
                    let seen = match frame {
                        Frame::Data {
                            flow: 0, data, fin, ..
                        } => Seen::Probe(data.len(), fin),
                        Frame::Close { message, .. } => Seen::Close(message.to_string()),
                        _ => Seen::Other,
                    };
                    return Some(seen);
                }
                Ok(None) => {}
                Err(_) => return None,
            }
            // Only an incomplete frame is left (at most a frame's length, which `decode`
            // bounds): the buffer holds no more than that and one read, however much the other
            // end sends.
            self.buf.drain(..self.at);
            self.at = 0;
            match s.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }
}

/// The proxy's side of a check (a Hello naming [`CHECK_SESSION`]): answer the Hello, wait
/// [`PROBE_WAIT`] at most for the relay's probe, send as much back, and close with words that
/// say who answered; no session is made.
pub(crate) async fn answer(acc: subflow::Accepted, peer: SocketAddr) {
    // In the relay's version, so that a relay of an older one accepts it.
    let hello = check_hello(Role::Proxy, acc.path, acc.version, None);
    let mut stream = acc.stream;
    if let Err(e) = subflow::send_hello(&mut stream, &hello).await {
        debug!(%peer, error = %e, "cannot answer a path check");
        return;
    }
    let mut frames = FrameReader::new(acc.initial);
    let mut got = 0usize;
    let complete = tokio::time::timeout(PROBE_WAIT, async {
        while let Some(seen) = frames.next(&mut stream).await {
            if let Seen::Probe(n, fin) = seen {
                got += n;
                if fin || got >= PROBE_BYTES {
                    return true;
                }
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    let words = if complete {
        let sent = stream.write_all(&probe()).await;
        if let Err(e) = sent {
            debug!(%peer, error = %e, "cannot answer a path check");
            return;
        }
        format!(
            "path check answered by polycorn {} (proxy, protocol {VERSION})",
            env!("CARGO_PKG_VERSION")
        )
    } else {
        format!(
            "path check answered by polycorn {} (proxy, protocol {VERSION}); of the relay's \
             probe only {got} bytes arrived in {} s",
            env!("CARGO_PKG_VERSION"),
            PROBE_WAIT.as_secs()
        )
    };
    info!(
        %peer,
        relay = %acc.relay,
        path = acc.path,
        path_name = %acc.name.as_deref().unwrap_or("-"),
        probe_bytes = got,
        "path check from a relay answered"
    );
    subflow::close_session(stream, &words).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer that sends frame after frame (pings here) leaves the reader holding no more than
    /// one incomplete frame and one read, however long it goes on; the probe and the Close
    /// behind them are still seen.
    #[tokio::test]
    async fn the_frame_reader_keeps_no_more_than_one_frame_and_one_read() {
        let (mut tx, mut rx) = tokio::io::duplex(64 * 1024);
        let writer = tokio::spawn(async move {
            let ping = Frame::Ping { id: 7, sent_us: 1 }.to_vec();
            for _ in 0..20_000 {
                tx.write_all(&ping).await.unwrap();
            }
            tx.write_all(&probe()).await.unwrap();
            let close = Frame::Close {
                reason: polycorn_proto::CloseReason::Shutdown,
                message: "done".into(),
            };
            tx.write_all(&close.to_vec()).await.unwrap();
        });
        let mut frames = FrameReader::new(Vec::new());
        let (mut pings, mut largest) = (0, 0);
        loop {
            let seen = frames.next(&mut rx).await.expect("a frame");
            largest = largest.max(frames.buf.capacity());
            match seen {
                Seen::Other => pings += 1,
                Seen::Probe(n, fin) => assert!(n == PROBE_BYTES && fin),
                Seen::Close(words) => {
                    assert_eq!(words, "done");
                    break;
                }
            }
        }
        writer.await.unwrap();
        assert_eq!(pings, 20_000);
        assert!(
            largest <= 4 * PROBE_BYTES,
            "the reader grew to {largest} bytes"
        );
    }
}
