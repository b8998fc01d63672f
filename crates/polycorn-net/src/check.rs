//! A relay's check of its paths before it is put in service (`polycorn relay --check-paths`):
//! over every path, as the relay itself would, look the proxy up, connect pinned to the path's
//! interface and source, TLS with the relay's certificate, and exchange Hellos under the path
//! check's session id ([`CHECK_SESSION`]). The proxy answers and closes without opening a
//! session, so a check run beside a working relay changes nothing for its passengers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use polycorn_proto::frame::decode;
use polycorn_proto::{Frame, Role, CHECK_SESSION, VERSION};
use tokio::io::AsyncReadExt;

use crate::proxy_addr::ProxyResolver;
use crate::relay::RelayPath;
use crate::subflow::{self, ConnectTimeouts, HandshakeError, SubflowSockopts};

/// How long a path's check may take: TCP (staggered attempts as the relay makes them), then
/// TLS and the Hellos, then the proxy's closing words.
pub const TIMEOUTS: ConnectTimeouts = ConnectTimeouts {
    tcp: Duration::from_secs(10),
    handshake: Duration::from_secs(10),
    tcp_stagger: Some(Duration::from_millis(250)),
};
/// How long the proxy has, after its Hello, to close the check.
const ANSWER_WAIT: Duration = Duration::from_secs(3);

/// One path's result.
#[derive(Debug)]
pub struct PathCheck {
    /// The path's name.
    pub path: String,
    /// Its interface.
    pub device: Option<String>,
    /// The proxy as configured (address or `host:port`).
    pub proxy: String,
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
    /// What the proxy said when it closed the check; `None`: it did not close it (a proxy of
    /// an earlier build, which opened a session for the check; the check closed that).
    pub answer: Option<String>,
}

impl PathCheck {
    /// Whether the path reached the proxy.
    pub fn ok(&self) -> bool {
        self.outcome.is_ok()
    }
}

/// Checks every path at once; the results in the paths' order. `sockopts` as the relay's
/// subflows have them (each path's own `mtu` applies).
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
            let outcome = check_path(&p, path, &resolver, &connector, &sockopts).await;
            PathCheck {
                path: p.name.clone(),
                device: p.device.clone(),
                proxy: p.proxy.to_string(),
                outcome,
            }
        }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for (t, p) in tasks.into_iter().zip(paths) {
        out.push(t.await.unwrap_or_else(|e| PathCheck {
            path: p.name.clone(),
            device: p.device.clone(),
            proxy: p.proxy.to_string(),
            outcome: Err(HandshakeError::Io {
                what: "check the path".into(),
                source: std::io::Error::other(e.to_string()),
            }),
        }));
    }
    out
}

async fn check_path(
    p: &RelayPath,
    path: u8,
    resolver: &Arc<ProxyResolver>,
    connector: &tokio_rustls::TlsConnector,
    sockopts: &SubflowSockopts,
) -> Result<Reached, HandshakeError> {
    let (source, addr) = crate::relay::path_target(p, resolver, false).await?;
    let hello = Frame::Hello {
        version: VERSION,
        role: Role::Relay,
        session: CHECK_SESSION,
        path,
        epoch: 0,
    }
    .to_vec();
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
    let mut stream = est.stream;
    let mut buf = est.initial;
    // The proxy's closing words; anything else it sends first is skipped.
    let answer = tokio::time::timeout(ANSWER_WAIT, async {
        let mut at = 0;
        loop {
            while let Ok(Some((frame, n))) = decode(&buf[at..]) {
                at += n;
                if let Frame::Close { message, .. } = frame {
                    return Some(message.to_string());
                }
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
    .flatten();
    subflow::close_session(stream, "path check done").await;
    Ok(Reached {
        local,
        proxy: addr,
        setup,
        rtt: sample
            .as_ref()
            .map(|s| Duration::from_micros(s.sample.srtt.as_micros())),
        mss: sample.as_ref().map(|s| s.sample.mss_bytes),
        answer,
    })
}
