//! Where the relay's subflows reach the proxy: an `IP:port`, or a `host:port` the relay
//! resolves itself, so a proxy can move to another address without touching the trains.
//!
//! **One name, one proxy.** Every path of a relay carries the same session, so every path must
//! reach the same proxy. All paths that name the same host share one [`ProxyResolver`] and
//! connect to the same address per address family. When a name has several addresses (DNS
//! round robin), the relay takes the first of the lookup and keeps it for as long as later
//! lookups still list it, whatever their order.
//!
//! **When the name is looked up.** Before a path's first connection, and again when a path's
//! connection attempt fails and the last lookup is at least [`REFRESH_AFTER`] old (a proxy that
//! moved stops answering at its old address). Paths whose subflows work are never disturbed by
//! a new answer: they move when their subflow fails. A lookup that fails or takes longer than
//! [`LOOKUP_TIMEOUT`] keeps the previous answer; a refresh runs in the background, so a path
//! that has an answer never waits for the resolver (whose queries may go over a path that is in
//! a blackout).
//!
//! **Failover between proxies.** A name may list several proxies (one A or AAAA record per
//! proxy host, each with the fleet's credentials). When no path has had a working subflow to
//! the address in use for the relay's hold time (at least [`MIN_FAILOVER_AFTER`]), the next
//! failing attempt moves every path to the name's next address of that family, in the
//! resolver's order and wrapping around. By then the relay's session has ended with its hold
//! time, so the move costs no passenger flow that could still have been saved; one path in a
//! blackout while another still reaches the proxy never moves anything.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tracing::{debug, info, warn};

use crate::subflow::HandshakeError;

/// A failing path asks the resolver again once the last answer is this old.
pub const REFRESH_AFTER: Duration = Duration::from_secs(10);
/// How long one lookup may take.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// Failover to another of the name's addresses never comes sooner than this (the relay waits
/// its hold time, at least this).
pub const MIN_FAILOVER_AFTER: Duration = Duration::from_secs(10);

/// `IP:port` or `host:port` (`relay.proxy`, `path[i].proxy`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProxyAddr {
    /// A literal address (`10.0.2.1:7700`, `[2001:db8::1]:7700`).
    Ip(SocketAddr),
    /// A DNS name resolved by the relay (`proxy.example.net:7700`).
    Name {
        /// The host name, as written.
        host: String,
        /// The port.
        port: u16,
    },
}

impl ProxyAddr {
    /// The literal address, if this is one.
    pub fn ip(&self) -> Option<SocketAddr> {
        match self {
            ProxyAddr::Ip(a) => Some(*a),
            ProxyAddr::Name { .. } => None,
        }
    }
}

impl From<SocketAddr> for ProxyAddr {
    fn from(a: SocketAddr) -> Self {
        ProxyAddr::Ip(a)
    }
}

impl fmt::Display for ProxyAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyAddr::Ip(a) => write!(f, "{a}"),
            ProxyAddr::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

impl FromStr for ProxyAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(ProxyAddr::Ip(a));
        }
        let Some((host, port)) = s.rsplit_once(':') else {
            return Err(format!(
                "{s:?}: expected IP:port or host:port, such as \"10.0.2.1:7700\", \
                 \"[2001:db8::1]:7700\" or \"proxy.example.net:7700\""
            ));
        };
        if host.contains(':') || host.starts_with('[') {
            return Err(format!(
                "{s:?}: not an address (an IPv6 address goes in brackets: [2001:db8::1]:7700)"
            ));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{s:?}: port {port:?} is not a number 1..=65535"))?;
        if port == 0 {
            return Err(format!("{s:?}: port must not be 0"));
        }
        host_name(host).map_err(|why| format!("{s:?}: {why}"))?;
        Ok(ProxyAddr::Name {
            host: host.to_owned(),
            port,
        })
    }
}

impl Serialize for ProxyAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ProxyAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Checks DNS host name syntax (RFC 1123 labels; `_` tolerated, as resolvers do).
fn host_name(host: &str) -> Result<(), String> {
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.is_empty() {
        return Err("no host name before the port".into());
    }
    if name.len() > 253 {
        return Err("host name longer than 253 bytes".into());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!(
                "host name label {label:?} must have 1 to 63 characters"
            ));
        }
        let ok = label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok || label.starts_with('-') || label.ends_with('-') {
            return Err(format!(
                "host name label {label:?}: letters, digits and inner '-' only"
            ));
        }
    }
    // "10.0.2:7700" is a mistyped address, not a name (no top-level domain is all digits).
    if name
        .rsplit('.')
        .next()
        .is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("neither an IP address nor a host name".into());
    }
    Ok(())
}

/// What [`ResolveCache::plan`] tells the caller to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Use the cached answer.
    UseCached,
    /// Use the cached answer, and look the name up again in the background.
    UseCachedAndRefresh,
    /// No answer yet: look the name up now and wait for it.
    LookUpNow,
}

/// What the cached answer holds for one address family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pick {
    /// Connect here.
    Addr(SocketAddr),
    /// The name has not resolved yet.
    Unresolved,
    /// The name resolves, but to no address of the family asked for.
    NoneOfFamily,
}

/// One address family's part of the answer.
#[derive(Clone, Debug, Default)]
struct Family {
    /// The address in use.
    current: Option<SocketAddr>,
    /// The name's latest addresses of this family, in the resolver's order.
    listed: Vec<SocketAddr>,
    /// Since when no subflow has been up to `current` (`None` while one is).
    unreached_since: Option<Instant>,
}

/// The resolver's state, without I/O or clock (times are passed in).
#[derive(Clone, Debug, Default)]
pub struct ResolveCache {
    /// IPv4 and IPv6.
    v4: Family,
    v6: Family,
    /// Subflows up, per proxy address.
    live: std::collections::BTreeMap<SocketAddr, usize>,
    /// Whether any lookup has answered.
    answered: bool,
    /// When the last lookup ended (answered or failed), while there is an answer.
    last_lookup: Option<Instant>,
    /// A background refresh is running.
    refreshing: bool,
}

impl ResolveCache {
    /// What to do before connecting; `failing`: the path's previous attempt failed.
    pub fn plan(&mut self, now: Instant, failing: bool) -> Plan {
        if !self.answered {
            return Plan::LookUpNow;
        }
        let stale = self
            .last_lookup
            .is_none_or(|t| now.saturating_duration_since(t) >= REFRESH_AFTER);
        if failing && stale && !self.refreshing {
            self.refreshing = true;
            return Plan::UseCachedAndRefresh;
        }
        Plan::UseCached
    }

    /// A lookup ended at `now` with `addrs` (empty: it failed). Returns the addresses that
    /// changed, (old, new), for the log.
    pub fn looked_up(
        &mut self,
        now: Instant,
        addrs: &[SocketAddr],
    ) -> Vec<(Option<SocketAddr>, Option<SocketAddr>)> {
        self.refreshing = false;
        let mut changed = Vec::new();
        if addrs.is_empty() {
            // A failed lookup counts as one only while there is an answer to keep using.
            if self.answered {
                self.last_lookup = Some(now);
            }
            return changed;
        }
        self.answered = true;
        self.last_lookup = Some(now);
        for v4 in [true, false] {
            let listed: Vec<SocketAddr> = addrs
                .iter()
                .copied()
                .filter(|a| a.is_ipv4() == v4)
                .collect();
            let live = self.live.clone();
            let f = self.family_mut(v4);
            // Sticky: keep the address in use while the name still lists it.
            let keep = f.current.is_some_and(|cur| listed.contains(&cur));
            if !keep {
                let new = listed.first().copied();
                if new != f.current {
                    changed.push((f.current, new));
                    f.unreached_since = new
                        .filter(|a| live.get(a).copied().unwrap_or(0) == 0)
                        .map(|_| now);
                }
                f.current = new;
            }
            f.listed = listed;
        }
        changed
    }

    fn family_mut(&mut self, v4: bool) -> &mut Family {
        if v4 {
            &mut self.v4
        } else {
            &mut self.v6
        }
    }

    /// A subflow came up to `addr`.
    pub fn subflow_up(&mut self, addr: SocketAddr) {
        *self.live.entry(addr).or_default() += 1;
        let f = self.family_mut(addr.is_ipv4());
        if f.current == Some(addr) {
            f.unreached_since = None;
        }
    }

    /// A subflow to `addr` ended at `now`.
    pub fn subflow_down(&mut self, now: Instant, addr: SocketAddr) {
        let left = match self.live.get_mut(&addr) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n
            }
            None => 0,
        };
        if left == 0 {
            self.live.remove(&addr);
            let f = self.family_mut(addr.is_ipv4());
            if f.current == Some(addr) {
                f.unreached_since = Some(now);
            }
        }
    }

    /// Failover, asked by a path whose attempt failed: when no subflow of any path has been
    /// up to the address in use of the family `v4` for `after`, and the name lists another
    /// address of that family, the next one (in the name's order, wrapping around) is taken.
    /// Returns (old, new, how long the old one went unreached) when it moved.
    pub fn fail_over(
        &mut self,
        now: Instant,
        v4: bool,
        after: Duration,
    ) -> Option<(SocketAddr, SocketAddr, Duration)> {
        let f = self.family_mut(v4);
        let cur = f.current?;
        let since = f.unreached_since?;
        let unreached = now.saturating_duration_since(since);
        if unreached < after || f.listed.len() < 2 {
            return None;
        }
        let next = match f.listed.iter().position(|&a| a == cur) {
            Some(i) => f.listed[(i + 1) % f.listed.len()],
            None => f.listed[0],
        };
        if next == cur {
            return None;
        }
        f.current = Some(next);
        f.unreached_since = Some(now);
        // A subflow still up to the new address (left from before) counts as reaching it.
        if self.live.get(&next).copied().unwrap_or(0) > 0 {
            self.family_mut(v4).unreached_since = None;
        }
        Some((cur, next, unreached))
    }

    /// The address for a path whose source is IPv4 (`Some(true)`), IPv6 (`Some(false)`) or
    /// unknown (`None`: IPv4 when the name has one).
    pub fn pick(&self, v4: Option<bool>) -> Pick {
        if !self.answered {
            return Pick::Unresolved;
        }
        let a = match v4 {
            Some(true) => self.v4.current,
            Some(false) => self.v6.current,
            None => self.v4.current.or(self.v6.current),
        };
        a.map_or(Pick::NoneOfFamily, Pick::Addr)
    }
}

/// Resolves one [`ProxyAddr`] for every path that connects to it (see the module docs).
pub struct ProxyResolver {
    target: ProxyAddr,
    cache: Mutex<ResolveCache>,
    /// Failover: how long no path may reach the address in use before the next is tried.
    failover_after: Duration,
    /// Called at every failover (the relay counts them).
    on_failover: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Asked before a failover: may this resolver move (the relay: none of its paths works,
    /// also those that name another proxy)?
    may_fail_over: std::sync::OnceLock<Box<dyn Fn() -> bool + Send + Sync>>,
}

impl fmt::Debug for ProxyResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyResolver")
            .field("target", &self.target)
            .field("failover_after", &self.failover_after)
            .finish_non_exhaustive()
    }
}

/// A subflow up to one of the proxy's addresses; counted by its resolver as reaching the proxy
/// until it falls silent or is dropped.
#[derive(Debug)]
pub struct LiveSubflow {
    resolver: Arc<ProxyResolver>,
    addr: SocketAddr,
    silent: std::sync::atomic::AtomicBool,
}

impl LiveSubflow {
    /// The subflow no longer hears from the proxy (it stays open, waiting for a replacement).
    pub fn silent(&self) {
        if !self.silent.swap(true, std::sync::atomic::Ordering::Relaxed) {
            self.resolver.lock().subflow_down(Instant::now(), self.addr);
        }
    }
}

impl Drop for LiveSubflow {
    fn drop(&mut self) {
        self.silent();
    }
}

impl ProxyResolver {
    /// A resolver for `target` (a literal address needs none, and is returned as it is).
    /// `failover_after`: when the name has several addresses of a family and no path has had
    /// a subflow up to the one in use for this long, paths whose attempts fail move to the
    /// next (see [`ResolveCache::fail_over`]).
    pub fn new(target: ProxyAddr, failover_after: Duration) -> Arc<ProxyResolver> {
        Arc::new(ProxyResolver {
            target,
            cache: Mutex::new(ResolveCache::default()),
            failover_after,
            on_failover: std::sync::OnceLock::new(),
            may_fail_over: std::sync::OnceLock::new(),
        })
    }

    /// Calls `f` at every failover from now on (set once; later calls are ignored).
    pub fn on_failover(&self, f: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_failover.set(Box::new(f));
    }

    /// Fails over only when `gate` says so as well (set once; later calls are ignored).
    pub fn fail_over_only_if(&self, gate: impl Fn() -> bool + Send + Sync + 'static) {
        let _ = self.may_fail_over.set(Box::new(gate));
    }

    /// Counts a subflow up to `addr` until the returned value is dropped.
    pub fn subflow_up(self: &Arc<Self>, addr: SocketAddr) -> LiveSubflow {
        self.lock().subflow_up(addr);
        LiveSubflow {
            resolver: Arc::clone(self),
            addr,
            silent: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A failing path's failover check (see [`ResolveCache::fail_over`]), for both address
    /// families at once: paths of both move together, in the name's order.
    fn fail_over(&self) {
        if self.may_fail_over.get().is_some_and(|gate| !gate()) {
            return;
        }
        for v4 in [true, false] {
            let moved = self
                .lock()
                .fail_over(Instant::now(), v4, self.failover_after);
            if let Some((old, new, unreached)) = moved {
                warn!(
                    proxy = %self.target,
                    addr = %new,
                    was = %old,
                    unreached_s = unreached.as_secs(),
                    "proxy unreachable from every path: moving to the name's next address"
                );
                if let Some(f) = self.on_failover.get() {
                    f();
                }
            }
        }
    }

    /// What this resolver resolves.
    pub fn target(&self) -> &ProxyAddr {
        &self.target
    }

    /// The address a path with source address `source` connects to; `failing`: that path's
    /// previous connection attempt failed (which may start a new lookup, see the module docs).
    pub async fn resolve(
        self: &Arc<Self>,
        source: Option<IpAddr>,
        failing: bool,
    ) -> Result<SocketAddr, HandshakeError> {
        match source {
            Some(s) => self.resolve_from(&[s], failing).await.map(|(_, a)| a),
            None => {
                let (host, port) = match &self.target {
                    ProxyAddr::Ip(a) => return Ok(*a),
                    ProxyAddr::Name { host, port } => (host.clone(), *port),
                };
                let error = self.refresh(&host, port, failing).await;
                if failing {
                    self.fail_over();
                }
                match self.lock().pick(None) {
                    Pick::Addr(a) => Ok(a),
                    _ => Err(HandshakeError::Resolve {
                        host: format!("{host}:{port}"),
                        reason: error.unwrap_or_else(|| "no answer yet".into()),
                    }),
                }
            }
        }
    }

    /// For a path that may use any of `sources` (a modem's addresses, in order of preference):
    /// the first source the proxy has an address of the same family for, and that address.
    /// With `sources` empty, an error.
    pub async fn resolve_from(
        self: &Arc<Self>,
        sources: &[IpAddr],
        failing: bool,
    ) -> Result<(IpAddr, SocketAddr), HandshakeError> {
        let family = |a: IpAddr| if a.is_ipv4() { "IPv4" } else { "IPv6" };
        let list = || {
            sources
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (host, port) = match &self.target {
            ProxyAddr::Ip(a) => {
                return match sources.iter().find(|s| s.is_ipv4() == a.is_ipv4()) {
                    Some(s) => Ok((*s, *a)),
                    None => Err(HandshakeError::Setup {
                        what: format!(
                            "reach the proxy at {a} (an {} address) from this path's address \
                             ({})",
                            family(a.ip()),
                            list()
                        ),
                        source: io::Error::from(io::ErrorKind::AddrNotAvailable),
                    }),
                };
            }
            ProxyAddr::Name { host, port } => (host.clone(), *port),
        };
        let error = self.refresh(&host, port, failing).await;
        if failing {
            self.fail_over();
        }
        let cache = self.lock();
        for &s in sources {
            match cache.pick(Some(s.is_ipv4())) {
                Pick::Addr(a) => return Ok((s, a)),
                Pick::Unresolved => {
                    return Err(HandshakeError::Resolve {
                        host: format!("{host}:{port}"),
                        reason: error.unwrap_or_else(|| "no answer yet".into()),
                    })
                }
                Pick::NoneOfFamily => {}
            }
        }
        let families: Vec<&str> = sources.iter().map(|s| family(*s)).collect();
        Err(HandshakeError::Setup {
            what: format!(
                "{host} has no {} address for this path (source {})",
                families.join(" or "),
                list()
            ),
            source: io::Error::from(io::ErrorKind::AddrNotAvailable),
        })
    }

    /// Looks `host` up when the cache's plan says so; the lookup's error, if one was made now
    /// and failed.
    async fn refresh(self: &Arc<Self>, host: &str, port: u16, failing: bool) -> Option<String> {
        let plan = self.lock().plan(Instant::now(), failing);
        match plan {
            Plan::UseCached => None,
            Plan::UseCachedAndRefresh => {
                let me = Arc::clone(self);
                let host = host.to_string();
                tokio::spawn(async move {
                    let answer = lookup(&host, port).await;
                    if let Err(e) = &answer {
                        debug!(proxy = %me.target, error = %e, "proxy lookup failed; keeping the last answer");
                    }
                    me.answer(answer);
                });
                None
            }
            Plan::LookUpNow => {
                let answer = lookup(host, port).await;
                let error = answer.as_ref().err().map(ToString::to_string);
                self.answer(answer);
                error
            }
        }
    }

    fn answer(&self, answer: io::Result<Vec<SocketAddr>>) {
        let changed = self
            .lock()
            .looked_up(Instant::now(), answer.as_deref().unwrap_or_default());
        for (old, new) in changed {
            let show = |a: Option<SocketAddr>| a.map_or_else(|| "-".to_string(), |a| a.to_string());
            info!(proxy = %self.target, addr = %show(new), was = %show(old), "proxy address");
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ResolveCache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One lookup of `host` with the system's resolver, at most [`LOOKUP_TIMEOUT`].
pub(crate) async fn lookup(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    match tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((host, port))).await {
        Ok(Ok(addrs)) => {
            let v: Vec<SocketAddr> = addrs.collect();
            if v.is_empty() {
                Err(io::Error::new(io::ErrorKind::NotFound, "no addresses"))
            } else {
                Ok(v)
            }
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer within {} s", LOOKUP_TIMEOUT.as_secs()),
        )),
    }
}

/// The same lookup, blocking, for `config check` (which runs outside tokio).
pub fn lookup_blocking(target: &ProxyAddr) -> io::Result<Vec<SocketAddr>> {
    use std::net::ToSocketAddrs;
    match target {
        ProxyAddr::Ip(a) => Ok(vec![*a]),
        ProxyAddr::Name { host, port } => Ok((host.as_str(), *port).to_socket_addrs()?.collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_and_names_parse_and_bad_ones_say_why() {
        assert_eq!(
            "10.0.2.1:7700".parse::<ProxyAddr>(),
            Ok(ProxyAddr::Ip(a("10.0.2.1:7700")))
        );
        assert_eq!(
            "[2001:db8::1]:7700".parse::<ProxyAddr>(),
            Ok(ProxyAddr::Ip(a("[2001:db8::1]:7700")))
        );
        let n = "proxy.example.net:7700".parse::<ProxyAddr>().unwrap();
        assert_eq!(
            n,
            ProxyAddr::Name {
                host: "proxy.example.net".into(),
                port: 7700
            }
        );
        assert_eq!(n.to_string(), "proxy.example.net:7700");
        assert_eq!(n.ip(), None);
        for (bad, why) in [
            ("proxy.example.net", "expected IP:port or host:port"),
            ("2001:db8::1:7700", "brackets"),
            ("proxy.example.net:0", "port must not be 0"),
            ("proxy.example.net:70000", "not a number"),
            ("proxy.example.net:http", "not a number"),
            (":7700", "no host name"),
            ("10.0.2:7700", "neither an IP address nor a host name"),
            ("300.1.2.3:7700", "neither an IP address nor a host name"),
            ("-proxy.example.net:7700", "inner '-'"),
            ("pro xy.net:7700", "inner '-'"),
            ("a..b:7700", "1 to 63"),
        ] {
            let e = bad.parse::<ProxyAddr>().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
            assert!(e.contains(bad), "{bad}: the error names the value: {e}");
        }
    }

    #[test]
    fn the_first_answer_is_kept_while_later_lookups_still_list_it() {
        let t0 = Instant::now();
        let mut c = ResolveCache::default();
        assert_eq!(c.plan(t0, false), Plan::LookUpNow);
        assert_eq!(c.pick(Some(true)), Pick::Unresolved);
        // A failed first lookup leaves nothing to use: the next attempt looks up again.
        assert!(c.looked_up(t0, &[]).is_empty());
        assert_eq!(c.plan(t0, true), Plan::LookUpNow);
        let first = [
            a("192.0.2.1:7700"),
            a("[2001:db8::1]:7700"),
            a("192.0.2.2:7700"),
        ];
        let changed = c.looked_up(t0, &first);
        assert_eq!(
            changed,
            vec![
                (None, Some(a("192.0.2.1:7700"))),
                (None, Some(a("[2001:db8::1]:7700")))
            ]
        );
        assert_eq!(c.pick(Some(true)), Pick::Addr(a("192.0.2.1:7700")));
        assert_eq!(c.pick(Some(false)), Pick::Addr(a("[2001:db8::1]:7700")));
        assert_eq!(c.pick(None), Pick::Addr(a("192.0.2.1:7700")));
        // Round robin reorders the answer: every path stays on the same proxy.
        let t1 = t0 + REFRESH_AFTER;
        // (IPv6 is gone from this answer.)
        let reordered = [a("192.0.2.2:7700"), a("192.0.2.1:7700")];
        assert_eq!(
            c.looked_up(t1, &reordered),
            vec![(Some(a("[2001:db8::1]:7700")), None)]
        );
        assert_eq!(c.pick(Some(true)), Pick::Addr(a("192.0.2.1:7700")));
        assert_eq!(c.pick(Some(false)), Pick::NoneOfFamily);
        // The proxy moved: its old address is no longer listed.
        let moved = [a("198.51.100.7:7700")];
        assert_eq!(
            c.looked_up(t1, &moved),
            vec![(Some(a("192.0.2.1:7700")), Some(a("198.51.100.7:7700")))]
        );
        assert_eq!(c.pick(Some(true)), Pick::Addr(a("198.51.100.7:7700")));
        // A failed or empty lookup keeps the answer.
        assert!(c.looked_up(t1, &[]).is_empty());
        assert_eq!(c.pick(Some(true)), Pick::Addr(a("198.51.100.7:7700")));
    }

    #[test]
    fn only_a_failing_path_refreshes_and_at_most_once_per_10_s() {
        let t0 = Instant::now();
        let mut c = ResolveCache::default();
        c.looked_up(t0, &[a("192.0.2.1:7700")]);
        let later = t0 + REFRESH_AFTER;
        // Working paths never trigger a lookup.
        assert_eq!(c.plan(later + REFRESH_AFTER * 10, false), Plan::UseCached);
        // A failing path does, once the answer is 10 s old ...
        assert_eq!(c.plan(t0 + Duration::from_secs(9), true), Plan::UseCached);
        assert_eq!(c.plan(later, true), Plan::UseCachedAndRefresh);
        // ... and only one refresh runs at a time.
        assert_eq!(c.plan(later, true), Plan::UseCached);
        // A refresh that failed counts as a lookup: the next one 10 s later.
        c.looked_up(later, &[]);
        assert_eq!(
            c.plan(later + Duration::from_secs(1), true),
            Plan::UseCached
        );
        assert_eq!(
            c.plan(later + REFRESH_AFTER, true),
            Plan::UseCachedAndRefresh
        );
    }

    /// A name with two proxies (two A records): the relay moves to the other only when no
    /// path has reached the one in use for the failover time, never while one path still
    /// does, and comes back around when the other is unreachable as well.
    #[test]
    fn failover_moves_to_the_next_address_only_when_no_path_reaches_the_proxy() {
        let after = Duration::from_secs(30);
        let (p1, p2, v6) = (
            a("192.0.2.1:7700"),
            a("192.0.2.2:7700"),
            a("[2001:db8::1]:7700"),
        );
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut c = ResolveCache::default();
        c.looked_up(t0, &[p1, v6, p2]);
        assert_eq!(c.pick(Some(true)), Pick::Addr(p1));
        // Never reached since the answer: a proxy that is down when the relay starts.
        assert_eq!(c.fail_over(t0 + s(29), true, after), None);
        c.subflow_up(p1);
        c.subflow_up(p1);
        // Both paths up; one falls silent (its carrier in a blackout), the other still
        // reaches the proxy: no move, however long.
        c.subflow_down(t0 + s(40), p1);
        assert_eq!(c.fail_over(t0 + s(400), true, after), None);
        // The second goes silent as well (the proxy's host is gone).
        c.subflow_down(t0 + s(500), p1);
        assert_eq!(c.fail_over(t0 + s(529), true, after), None);
        assert_eq!(c.fail_over(t0 + s(530), true, after), Some((p1, p2, after)));
        assert_eq!(c.pick(Some(true)), Pick::Addr(p2));
        // The other family is untouched.
        assert_eq!(c.pick(Some(false)), Pick::Addr(v6));
        assert_eq!(c.fail_over(t0 + s(530), false, after), None);
        // A later lookup that lists the first again keeps the one in use.
        assert!(
            c.looked_up(t0 + s(531), &[p1, p2]).len() == 1,
            "only IPv6 went"
        );
        assert_eq!(c.pick(Some(true)), Pick::Addr(p2));
        // The second proxy is unreachable too: back to the first, a failover time later.
        assert_eq!(c.fail_over(t0 + s(559), true, after), None);
        assert_eq!(c.fail_over(t0 + s(560), true, after), Some((p2, p1, after)));
        // Reached: no more moves.
        c.subflow_up(p1);
        assert_eq!(c.fail_over(t0 + s(9000), true, after), None);
        // A name with one address has nowhere to go.
        let mut one = ResolveCache::default();
        one.looked_up(t0, &[p1]);
        assert_eq!(one.fail_over(t0 + s(9000), true, after), None);
        // A subflow still up to an address a failover moves to counts as reaching it.
        let mut c = ResolveCache::default();
        c.looked_up(t0, &[p1, p2]);
        c.subflow_up(p2);
        assert_eq!(c.fail_over(t0 + s(30), true, after), Some((p1, p2, after)));
        assert_eq!(c.fail_over(t0 + s(9000), true, after), None);
    }

    #[tokio::test]
    async fn a_literal_address_is_used_as_it_is_and_an_unknown_name_is_a_coverage_error() {
        let r = ProxyResolver::new(ProxyAddr::Ip(a("10.0.2.1:7700")), MIN_FAILOVER_AFTER);
        assert_eq!(r.resolve(None, true).await.unwrap(), a("10.0.2.1:7700"));
        // `.invalid` never resolves (RFC 6761), with or without a network.
        let r = ProxyResolver::new(
            "proxy.polycorn.invalid:7700".parse().unwrap(),
            MIN_FAILOVER_AFTER,
        );
        let e = r.resolve(None, false).await.unwrap_err();
        assert!(matches!(e, HandshakeError::Resolve { .. }), "{e:?}");
        assert!(
            !e.is_setup(),
            "a name that does not resolve may be a dead path's DNS"
        );
        assert!(e.to_string().contains("proxy.polycorn.invalid:7700"), "{e}");
    }

    /// A modem with addresses of both families reaches a proxy of either: the first of its
    /// addresses whose family the proxy has is the source. A proxy of the other family only is a
    /// setup error naming both.
    #[tokio::test]
    async fn a_path_with_both_families_takes_the_one_its_proxy_has() {
        let v4: IpAddr = "10.100.0.1".parse().unwrap();
        let v6: IpAddr = "fd00:100::1".parse().unwrap();
        let r = ProxyResolver::new(ProxyAddr::Ip(a("[fd00:100::2]:7700")), MIN_FAILOVER_AFTER);
        assert_eq!(
            r.resolve_from(&[v4, v6], false).await.unwrap(),
            (v6, a("[fd00:100::2]:7700"))
        );
        let r = ProxyResolver::new(ProxyAddr::Ip(a("10.100.0.2:7700")), MIN_FAILOVER_AFTER);
        assert_eq!(
            r.resolve_from(&[v4, v6], false).await.unwrap(),
            (v4, a("10.100.0.2:7700"))
        );
        let e = r.resolve_from(&[v6], false).await.unwrap_err();
        assert!(e.is_setup(), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains("10.100.0.2:7700")
                && text.contains("IPv4")
                && text.contains("fd00:100::1"),
            "{text}"
        );
        // A name: the first source whose family the name has an address in.
        let r = ProxyResolver::new("localhost:7700".parse().unwrap(), MIN_FAILOVER_AFTER);
        let lo6: IpAddr = "::1".parse().unwrap();
        let lo4: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(
            r.resolve_from(&[lo4, lo6], false).await.unwrap(),
            (lo4, a("127.0.0.1:7700"))
        );
    }

    #[tokio::test]
    async fn localhost_resolves_per_address_family() {
        let r = ProxyResolver::new("localhost:7700".parse().unwrap(), MIN_FAILOVER_AFTER);
        let v4 = r
            .resolve(Some("127.0.0.1".parse().unwrap()), false)
            .await
            .unwrap();
        assert_eq!(v4, a("127.0.0.1:7700"));
    }
}
