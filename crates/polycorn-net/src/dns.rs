//! Passengers' DNS: the relay answers UDP queries by carrying each one over TCP (RFC 7766
//! framing) to a resolver reached through the proxy, so name resolution works through the
//! same paths and policy as everything else.
//!
//! Each query is one passenger flow, admitted under the passengers' limits but on accounts of
//! its own ([`crate::guard::RelayGate::admit_dns`]: a query's source can be spoofed). A query that gets no complete answer within
//! [`QUERY_TIMEOUT`] has its flow reset, so the proxy closes its connection to the resolver:
//! a resolver that accepts and never answers (or queries with spoofed sources) leaves nothing
//! open behind.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use polycorn_proto::{Destination, ReadOutcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;
use tracing::debug;

use crate::carrier::Carrier;
use crate::guard::RelayGate;

/// Time allowed for one query.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Serve DNS on `sock`, forwarding to `upstream` through `carrier`.
pub async fn serve(sock: UdpSocket, upstream: SocketAddr, carrier: Carrier, gate: Arc<RelayGate>) {
    let sock = Arc::new(sock);
    let mut buf = vec![0u8; 4096];
    loop {
        let Ok((n, from)) = sock.recv_from(&mut buf).await else {
            continue;
        };
        if n < 12 {
            continue;
        }
        let q = buf[..n].to_vec();
        let Some(permit) = gate.admit_dns(from.ip()) else {
            continue;
        };
        let (s, c) = (sock.clone(), carrier.clone());
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(QUERY_TIMEOUT, query(&c, from, upstream, &q)).await {
                Ok(Some(resp)) => {
                    let _ = s.send_to(&resp, from).await;
                }
                _ => debug!(%from, "DNS query failed or timed out"),
            }
        });
    }
}

async fn query(c: &Carrier, from: SocketAddr, upstream: SocketAddr, q: &[u8]) -> Option<Vec<u8>> {
    let mut req = Vec::with_capacity(q.len() + 2);
    req.extend_from_slice(&(q.len() as u16).to_be_bytes());
    req.extend_from_slice(q);
    let dst = Destination::Addr(upstream);
    let resp = match c {
        Carrier::Session(engine) => {
            let (flow, sig, _opened) = engine.open_flow(from.ip(), dst).ok()?;
            // Reset unless a whole answer arrived: on a timeout (this future dropped), a reset
            // from the proxy or an answer too long.
            let mut unanswered = ResetUnlessAnswered {
                engine,
                flow,
                answered: false,
            };
            engine.with(|s, now| {
                let _ = s.send(now, flow, &req);
                let _ = s.send_fin(now, flow);
            });
            let mut out = Vec::new();
            let mut buf = vec![0u8; 4096];
            loop {
                if sig.is_reset() {
                    return None;
                }
                match engine.with(|s, now| s.read(now, flow, &mut buf)) {
                    ReadOutcome::Data(n) => {
                        out.extend_from_slice(&buf[..n]);
                        if out.len() > 65_537 {
                            return None;
                        }
                    }
                    ReadOutcome::Eof => break,
                    ReadOutcome::WouldBlock => {
                        if out.len() >= 2
                            && out.len() >= 2 + usize::from(u16::from_be_bytes([out[0], out[1]]))
                        {
                            break;
                        }
                        sig_wait(&sig).await;
                    }
                }
            }
            unanswered.answered = out.len() >= 2
                && out.len() >= 2 + usize::from(u16::from_be_bytes([out[0], out[1]]));
            out
        }
        Carrier::Direct(t) => {
            let mut s = t.open(from.ip(), &dst).await.ok()?;
            s.write_all(&req).await.ok()?;
            s.shutdown().await.ok()?;
            let mut out = Vec::new();
            s.read_to_end(&mut out).await.ok()?;
            out
        }
    };
    if resp.len() < 2 {
        return None;
    }
    let n = usize::from(u16::from_be_bytes([resp[0], resp[1]]));
    resp.get(2..2 + n).map(<[u8]>::to_vec)
}

/// Resets a query's flow when dropped without a complete answer.
struct ResetUnlessAnswered<'a> {
    engine: &'a crate::engine::Engine,
    flow: u64,
    answered: bool,
}

impl Drop for ResetUnlessAnswered<'_> {
    fn drop(&mut self) {
        if !self.answered {
            debug!(flow = self.flow, "DNS query unanswered: its flow is reset");
            self.engine
                .reset_flow(self.flow, polycorn_proto::ResetReason::PeerReset);
        }
    }
}

async fn sig_wait(sig: &crate::engine::FlowSignal) {
    sig.readable_notified().await;
}
