//! The proxy's outgoing connections to passengers' destinations, under its destination policy.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use polycorn_proto::{Destination, OpenStatus};
use tokio::net::TcpStream;
use tracing::info;

use crate::policy::DestinationPolicy;

/// Opens connections to destinations under the policy, never to the proxy's own host or to
/// an address its relays' subflows come from ([`DestinationPolicy::check_with`]).
#[derive(Debug)]
pub struct Connector {
    policy: crate::live::Live<DestinationPolicy>,
    timeout: Duration,
    host: crate::guard::HostAddrs,
    relays: Arc<crate::guard::RelayPeers>,
}

impl Connector {
    /// A connector with `policy` (the latest at each connection) and per-attempt `timeout`.
    pub fn new(policy: crate::live::Live<DestinationPolicy>, timeout: Duration) -> Connector {
        Connector {
            policy,
            timeout,
            host: crate::guard::HostAddrs::new(),
            relays: crate::guard::RelayPeers::new(),
        }
    }

    /// The addresses relays' subflows come from; the proxy registers each subflow's.
    pub fn relay_peers(&self) -> &Arc<crate::guard::RelayPeers> {
        &self.relays
    }

    /// Resolve (host names), check every address against the policy, connect to the first
    /// allowed one that answers.
    pub async fn connect(&self, dst: &Destination) -> Result<TcpStream, OpenStatus> {
        let addrs: Vec<SocketAddr> = match dst {
            Destination::Addr(a) => vec![*a],
            Destination::Name(n, p) => match tokio::net::lookup_host((n.as_str(), *p)).await {
                Ok(it) => it.collect(),
                Err(_) => return Err(OpenStatus::NameError),
            },
        };
        if addrs.is_empty() {
            return Err(OpenStatus::NameError);
        }
        let mut status = OpenStatus::Denied;
        let policy = self.policy.current().1;
        for a in addrs {
            let checked = policy.check_with(
                a.ip(),
                |ip| self.host.contains(ip),
                |ip| self.relays.contains(ip),
            );
            if let Err(d) = checked {
                info!(dst = %dst, addr = %a, reason = %d, "destination denied by policy");
                continue;
            }
            match tokio::time::timeout(self.timeout, TcpStream::connect(a)).await {
                Ok(Ok(s)) => return Ok(s),
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    status = OpenStatus::Refused
                }
                _ => status = OpenStatus::Unreachable,
            }
        }
        Err(status)
    }
}
