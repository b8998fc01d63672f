//! A relay's cellular path: its interface, source address and proxy, and where it connects
//! now.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::proxy_addr::{ProxyAddr, ProxyResolver};
use crate::subflow;

/// One cellular path as the relay sees it.
#[derive(Clone, Debug)]
pub struct RelayPath {
    /// Display name (metrics, logs).
    pub name: String,
    /// Interface the path's socket is bound to.
    pub device: Option<String>,
    /// Source address on that interface.
    pub source: Option<IpAddr>,
    /// Proxy reached over this path: an address, or a host name the relay resolves (polycorn
    /// mode only; see [`crate::proxy_addr`]).
    pub proxy: ProxyAddr,
    /// Largest IP packet of the path (`mtu` in the configuration; `None`: the interface's).
    pub mtu: Option<u16>,
}

/// Where path `p` connects now: its source address (the configured one, else its interface's
/// address of the moment, of a family the proxy has an address in, IPv4 first) and the proxy's
/// address. `failing`: the path's previous attempt failed (see [`ProxyResolver::resolve`]).
pub(crate) async fn path_target(
    p: &RelayPath,
    resolver: &Arc<ProxyResolver>,
    failing: bool,
) -> Result<(Option<IpAddr>, SocketAddr), subflow::HandshakeError> {
    match (p.source, p.device.as_deref()) {
        (None, Some(dev)) => match crate::sockopt::device_addresses(dev) {
            Ok(addrs) if addrs.is_empty() => Err(subflow::HandshakeError::Io {
                what: format!("find an address of {dev}"),
                source: std::io::Error::new(
                    std::io::ErrorKind::AddrNotAvailable,
                    "the interface has none (modem not attached?)",
                ),
            }),
            Ok(addrs) => resolver
                .resolve_from(&addrs, failing)
                .await
                .map(|(s, addr)| (Some(s), addr)),
            // No such interface: as for a path with a source, a setup failure.
            Err(e) => Err(subflow::HandshakeError::Setup {
                what: format!("read the addresses of {dev}"),
                source: e,
            }),
        },
        (s, _) => resolver.resolve(s, failing).await.map(|addr| (s, addr)),
    }
}
