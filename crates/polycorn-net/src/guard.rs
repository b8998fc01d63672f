//! What relay and proxy refuse before they carry a connection, so that neither can be turned
//! against the train or the proxy's host:
//!
//! * [`HostAddrs`]: the addresses of this host's interfaces, looked up again at most every
//!   [`HOST_ADDRS_REFRESH`]. The relay refuses a passenger connection aimed at one of its own
//!   addresses (carried to the proxy, which connects back to the train, it would come back as
//!   another passenger connection: a loop); the proxy refuses to connect to its own host (a
//!   passenger would reach services that trust local traffic).
//! * [`RelayPeers`]: (proxy) the addresses its relays' subflows come from. A flow to one of
//!   them would go back to a train.
//! * [`Passengers`]: (relay) per passenger address, a cap on connections open at once and a
//!   token bucket on new ones, so one passenger (or anyone spoofing DNS queries on the LAN)
//!   cannot take every descriptor and flow of the train. Pure: the caller passes the time.
//! * [`AcceptBackoff`]: a listener whose `accept` fails (out of descriptors) waits longer and
//!   longer instead of spinning, and says so once per [`LIMIT_LOG_INTERVAL`].

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::policy::normalize;

/// How long a lookup of the host's addresses is used before the next.
pub const HOST_ADDRS_REFRESH: Duration = Duration::from_secs(1);

/// The host's own interface addresses (all interfaces, IPv4 and IPv6), normalised
/// (IPv4-mapped IPv6 addresses count as their IPv4 address). Cheap to share.
#[derive(Debug, Default)]
pub struct HostAddrs {
    cache: Mutex<Option<(Instant, Arc<HashSet<IpAddr>>)>>,
}

impl HostAddrs {
    /// An empty cache; the first [`HostAddrs::contains`] looks the addresses up.
    pub fn new() -> HostAddrs {
        HostAddrs::default()
    }

    /// Is `ip` (or the IPv4 address it stands for) an address of this host? Unspecified
    /// addresses (`0.0.0.0`, `::`) count: a connection to them reaches the host itself.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = normalize(ip);
        ip.is_unspecified() || self.current().contains(&ip)
    }

    /// The addresses, looked up again when the last lookup is older than
    /// [`HOST_ADDRS_REFRESH`]. A failed lookup keeps the last set.
    pub fn current(&self) -> Arc<HashSet<IpAddr>> {
        let now = Instant::now();
        let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        match &*c {
            Some((at, set)) if now.saturating_duration_since(*at) < HOST_ADDRS_REFRESH => {
                set.clone()
            }
            _ => {
                let set = match lookup_host_addrs() {
                    Ok(s) => Arc::new(s),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot list this host's addresses");
                        c.as_ref().map(|(_, s)| s.clone()).unwrap_or_default()
                    }
                };
                *c = Some((now, set.clone()));
                set
            }
        }
    }
}

/// Every address of every interface of the current network namespace.
pub fn lookup_host_addrs() -> std::io::Result<HashSet<IpAddr>> {
    let mut set = HashSet::new();
    for ifa in nix::ifaddrs::getifaddrs().map_err(std::io::Error::from)? {
        let Some(a) = ifa.address else { continue };
        if let Some(v4) = a.as_sockaddr_in() {
            set.insert(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = a.as_sockaddr_in6() {
            set.insert(normalize(IpAddr::V6(v6.ip())));
        }
    }
    Ok(set)
}

/// (proxy) The addresses its relays' subflows come from, counted per subflow.
#[derive(Debug, Default)]
pub struct RelayPeers {
    peers: Mutex<HashMap<IpAddr, usize>>,
}

/// A subflow's entry in [`RelayPeers`]; removed when dropped.
#[derive(Debug)]
pub struct RelayPeer {
    peers: Arc<RelayPeers>,
    ip: IpAddr,
}

impl RelayPeers {
    /// An empty set.
    pub fn new() -> Arc<RelayPeers> {
        Arc::new(RelayPeers::default())
    }

    /// A subflow from `ip` is up: its address counts until the returned value is dropped.
    pub fn register(self: &Arc<Self>, ip: IpAddr) -> RelayPeer {
        let ip = normalize(ip);
        *self.lock().entry(ip).or_insert(0) += 1;
        RelayPeer {
            peers: self.clone(),
            ip,
        }
    }

    /// Does a subflow of some relay come from `ip` now?
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.lock().contains_key(&normalize(ip))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for RelayPeer {
    fn drop(&mut self) {
        let mut m = self.peers.lock();
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// A refusal is logged once per passenger and this interval, with the count since.
pub const LIMIT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// One log line per [`LIMIT_LOG_INTERVAL`] for an event that may repeat thousands of times a
/// second, with how many went unlogged. Pure: the caller passes the time.
#[derive(Debug, Default, Clone)]
pub struct LogEvery {
    unlogged: u64,
    logged_at: Option<Instant>,
}

impl LogEvery {
    /// The event happened at `now`: `Some(n)` when a line is due, `n` events since the last
    /// line (this one included).
    pub fn hit(&mut self, now: Instant) -> Option<u64> {
        self.unlogged += 1;
        let due = self.quiet(now);
        due.then(|| {
            self.logged_at = Some(now);
            std::mem::take(&mut self.unlogged)
        })
    }

    /// Has a whole interval passed since the last line (or was there none)?
    pub fn quiet(&self, now: Instant) -> bool {
        self.logged_at
            .is_none_or(|t| now.saturating_duration_since(t) >= LIMIT_LOG_INTERVAL)
    }
}

/// Per-passenger limits of the relay (`[limits]`). Zero turns a limit off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PassengerLimits {
    /// Connections (flows) one passenger address may have open at once.
    pub max_flows: u32,
    /// New connections per second one passenger may open, sustained.
    pub rate: f64,
    /// New connections one passenger may open at once beyond the rate (the bucket's size).
    pub burst: u32,
}

impl Default for PassengerLimits {
    /// 512 open connections, 50 new ones a second with bursts of 200: a browser loading a
    /// heavy page opens a few dozen at once, a whole carriage behind one tethered phone a few
    /// hundred.
    fn default() -> Self {
        PassengerLimits {
            max_flows: 512,
            rate: 50.0,
            burst: 200,
        }
    }
}

/// Why a passenger's connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The passenger has [`PassengerLimits::max_flows`] connections open.
    Flows,
    /// The passenger opened connections faster than [`PassengerLimits::rate`] allows.
    Rate,
}

impl Limit {
    /// The label of `polycorn_passenger_refusals_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Flows => "flows",
            Limit::Rate => "rate",
        }
    }
}

/// A refused connection: which limit, and whether to log it now (with how many refusals of
/// this passenger went unlogged since the last line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The limit that refused it.
    pub limit: Limit,
    /// `Some(n)`: log one line now, counting this refusal and `n − 1` unlogged before it.
    pub log: Option<u64>,
}

#[derive(Debug)]
struct PassengerState {
    open: u32,
    tokens: f64,
    at: Instant,
    log: LogEvery,
}

/// Passengers' open connections and new-connection buckets. Entries exist only while a
/// passenger has connections open or a bucket not yet refilled, so memory follows the open
/// flows.
#[derive(Debug)]
pub struct Passengers {
    limits: PassengerLimits,
    state: Mutex<HashMap<IpAddr, PassengerState>>,
    swept_at: Mutex<Option<Instant>>,
}

/// One admitted connection; the passenger's open count drops when it is dropped.
#[derive(Debug)]
pub struct Permit {
    passengers: Arc<Passengers>,
    ip: IpAddr,
}

impl Passengers {
    /// Passengers under `limits`.
    pub fn new(limits: PassengerLimits) -> Arc<Passengers> {
        Arc::new(Passengers {
            limits,
            state: Mutex::new(HashMap::new()),
            swept_at: Mutex::new(None),
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> PassengerLimits {
        self.limits
    }

    /// May passenger `ip` open a connection at `now`? The permit holds its place among the
    /// passenger's open connections until dropped.
    pub fn admit(self: &Arc<Self>, ip: IpAddr, now: Instant) -> Result<Permit, Refused> {
        let ip = normalize(ip);
        let l = self.limits;
        let mut m = self.lock();
        let burst = f64::from(l.burst.max(1));
        let st = m.entry(ip).or_insert(PassengerState {
            open: 0,
            tokens: burst,
            at: now,
            log: LogEvery::default(),
        });
        if l.rate > 0.0 {
            let dt = now.saturating_duration_since(st.at).as_secs_f64();
            st.tokens = (st.tokens + dt * l.rate).min(burst);
        }
        st.at = st.at.max(now);
        let limit = if l.max_flows > 0 && st.open >= l.max_flows {
            Some(Limit::Flows)
        } else if l.rate > 0.0 && st.tokens < 1.0 {
            Some(Limit::Rate)
        } else {
            None
        };
        if let Some(limit) = limit {
            let log = st.log.hit(now);
            return Err(Refused { limit, log });
        }
        if l.rate > 0.0 {
            st.tokens -= 1.0;
        }
        st.open += 1;
        Ok(Permit {
            passengers: self.clone(),
            ip,
        })
    }

    /// Connections passenger `ip` has open.
    pub fn open(&self, ip: IpAddr) -> u32 {
        self.lock().get(&normalize(ip)).map_or(0, |s| s.open)
    }

    /// Passengers with an entry (open connections or a bucket refilling).
    pub fn tracked(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, PassengerState>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn release(&self, ip: IpAddr) {
        let l = self.limits;
        let mut m = self.lock();
        let Some(st) = m.get_mut(&ip) else { return };
        st.open = st.open.saturating_sub(1);
        if st.open > 0 {
            return;
        }
        // Forget a passenger with nothing open once its bucket would be full again (and its
        // last refusal line is old enough that the next refusal logs anyway).
        let now = Instant::now().max(st.at);
        if forgettable(st, l, now) {
            m.remove(&ip);
        }
        // Otherwise the entry stays; `sweep` removes it later.
        drop(m);
        self.sweep(now);
    }

    /// Drop entries with nothing open whose bucket is full and whose last refusal line is
    /// old, so a flood from many (spoofed) addresses leaves nothing behind. Runs through the
    /// entries at most once a second, and only when there are more than a few.
    pub fn sweep(&self, now: Instant) {
        {
            let mut at = self.swept_at.lock().unwrap_or_else(|p| p.into_inner());
            if at.is_some_and(|t| now.saturating_duration_since(t) < Duration::from_secs(1)) {
                return;
            }
            *at = Some(now);
        }
        let l = self.limits;
        let mut m = self.lock();
        if m.len() < 64 {
            return;
        }
        m.retain(|_, st| st.open > 0 || !forgettable(st, l, now));
    }
}

/// A passenger entry with nothing open, whose bucket would be full again at `now` and whose
/// last refusal line is old enough that the next refusal logs anyway: nothing is lost by
/// forgetting it.
fn forgettable(st: &PassengerState, l: PassengerLimits, now: Instant) -> bool {
    let dt = now.saturating_duration_since(st.at).as_secs_f64();
    let full = l.rate <= 0.0 || st.tokens + dt * l.rate >= f64::from(l.burst.max(1));
    st.open == 0 && full && st.log.quiet(now)
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.passengers.release(self.ip);
    }
}

/// Back-off of a listener whose `accept` fails: 10 ms doubling to 1 s while failures go on,
/// one warning per [`LIMIT_LOG_INTERVAL`] with the count since the last. Pure: the caller
/// passes the time.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    streak: u32,
    log: LogEvery,
}

impl AcceptBackoff {
    /// An accept failed at `now`: how long to wait before the next, and `Some(n)` when a
    /// warning is due (`n` failures since the last one, this one included).
    pub fn failed(&mut self, now: Instant) -> (Duration, Option<u64>) {
        self.streak = self.streak.saturating_add(1);
        let wait = Duration::from_millis(10 << self.streak.min(8).saturating_sub(1))
            .min(Duration::from_secs(1));
        (wait, self.log.hit(now))
    }

    /// An accept succeeded: the next failure waits the shortest time again.
    pub fn succeeded(&mut self) {
        self.streak = 0;
    }
}

/// Accept the next connection on `l`, backing off while accepts fail (see
/// [`AcceptBackoff`]); `what` names the listener in the warning.
pub async fn accept(
    l: &tokio::net::TcpListener,
    what: &str,
    backoff: &mut AcceptBackoff,
) -> (tokio::net::TcpStream, std::net::SocketAddr) {
    loop {
        match l.accept().await {
            Ok(x) => {
                backoff.succeeded();
                return x;
            }
            Err(e) => {
                let (wait, log) = backoff.failed(Instant::now());
                if let Some(n) = log {
                    tracing::warn!(
                        listener = what,
                        error = %e,
                        failures = n,
                        retry_in_ms = wait.as_millis() as u64,
                        "accept failed; backing off"
                    );
                }
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// (relay) What the relay checks before it carries a passenger's connection: the destination
/// is not one of the relay's own addresses, and the passenger is within its limits. Refusals
/// are counted in `polycorn_passenger_refusals_total{reason}` and logged once per
/// [`LIMIT_LOG_INTERVAL`] (per passenger for its limits).
#[derive(Debug)]
pub struct RelayGate {
    host: HostAddrs,
    passengers: Arc<Passengers>,
    /// DNS queries' own accounts: their sources can be spoofed, and must not use up the
    /// passenger's connections.
    dns: Arc<Passengers>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    own_log: Mutex<LogEvery>,
}

impl RelayGate {
    /// A gate with these per-passenger limits, counting refusals in `metrics`.
    pub fn new(
        limits: PassengerLimits,
        metrics: Option<Arc<crate::metrics::Metrics>>,
    ) -> Arc<RelayGate> {
        Arc::new(RelayGate {
            host: HostAddrs::new(),
            passengers: Passengers::new(limits),
            dns: Passengers::new(limits),
            metrics,
            own_log: Mutex::new(LogEvery::default()),
        })
    }

    /// The passengers' accounts.
    pub fn passengers(&self) -> &Arc<Passengers> {
        &self.passengers
    }

    /// May passenger `user` open a connection to `dst` now ([`RelayGate::destination_ok`],
    /// then [`RelayGate::admit_passenger`])? `None`: refused (counted and, when due, logged);
    /// the connection must be refused.
    pub fn admit(&self, user: IpAddr, dst: &polycorn_proto::Destination) -> Option<Permit> {
        if !self.destination_ok(user, dst) {
            return None;
        }
        self.admit_passenger(user)
    }

    /// Is `dst` a destination the relay carries? Not one of the relay's own addresses: carried,
    /// the proxy would connect back to the train. Loopback and unspecified destinations are
    /// the proxy's own (its policy refuses them unless a test bed opened loopback). `false` is
    /// counted and, when due, logged.
    pub fn destination_ok(&self, user: IpAddr, dst: &polycorn_proto::Destination) -> bool {
        let polycorn_proto::Destination::Addr(a) = dst else {
            return true;
        };
        let ip = normalize(a.ip());
        if ip.is_loopback() || ip.is_unspecified() || !self.host.contains(ip) {
            return true;
        }
        self.count("own_address");
        let log = self
            .own_log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .hit(Instant::now());
        if let Some(n) = log {
            tracing::warn!(
                %user,
                dst = %a,
                refused = n,
                "refused a connection to one of the relay's own addresses (carried, it would \
                 come back to the relay through the proxy)"
            );
        }
        false
    }

    /// May passenger `user` open another connection now (its open connections and its rate)?
    /// The permit holds its place until dropped; `None`: refused (counted and, when due,
    /// logged).
    pub fn admit_passenger(&self, user: IpAddr) -> Option<Permit> {
        self.admit_in(&self.passengers, user, false)
    }

    /// May a DNS query from `user` open a flow now? Counted like connections, under the same
    /// limits, but apart from them: a query's source address can be spoofed, and queries sent
    /// in another passenger's name must not use up that passenger's connections. Refusals are
    /// counted as `dns_flows` and `dns_rate`.
    pub fn admit_dns(&self, user: IpAddr) -> Option<Permit> {
        self.admit_in(&self.dns, user, true)
    }

    fn admit_in(&self, accounts: &Arc<Passengers>, user: IpAddr, dns: bool) -> Option<Permit> {
        let r = match accounts.admit(user, Instant::now()) {
            Ok(p) => return Some(p),
            Err(r) => r,
        };
        let what = if dns { "DNS queries" } else { "connections" };
        self.count(&format!(
            "{}{}",
            if dns { "dns_" } else { "" },
            r.limit.as_str()
        ));
        if let Some(n) = r.log {
            let l = accounts.limits();
            match r.limit {
                Limit::Flows => tracing::warn!(
                    %user,
                    open = accounts.open(user),
                    refused = n,
                    "passenger at its limit of open {what} (limits.passenger_max_flows = {}); \
                     new ones refused",
                    l.max_flows
                ),
                Limit::Rate => tracing::warn!(
                    %user,
                    refused = n,
                    "passenger opening {what} faster than limits.passenger_flow_rate = {}/s \
                     (burst {}); new ones refused",
                    l.rate,
                    l.burst
                ),
            }
        }
        None
    }

    fn count(&self, reason: &str) {
        if let Some(m) = &self.metrics {
            m.passenger_refused(reason).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_hosts_own_addresses_include_loopback_and_mapped_forms() {
        let h = HostAddrs::new();
        assert!(h.contains(ip("127.0.0.1")));
        assert!(h.contains(ip("::ffff:127.0.0.1")));
        assert!(h.contains(ip("0.0.0.0")));
        assert!(h.contains(ip("::")));
        assert!(!h.contains(ip("192.0.2.77")));
    }

    #[test]
    fn relay_peers_count_subflows() {
        let p = RelayPeers::new();
        let a = p.register(ip("198.51.100.7"));
        let b = p.register(ip("::ffff:198.51.100.7"));
        assert!(p.contains(ip("198.51.100.7")));
        drop(a);
        assert!(p.contains(ip("198.51.100.7")));
        drop(b);
        assert!(!p.contains(ip("198.51.100.7")));
    }

    #[test]
    fn a_passenger_at_its_open_flow_cap_is_refused_and_others_are_not() {
        let p = Passengers::new(PassengerLimits {
            max_flows: 3,
            rate: 0.0,
            burst: 0,
        });
        let t = Instant::now();
        let held: Vec<_> = (0..3)
            .map(|_| p.admit(ip("10.0.1.5"), t).unwrap())
            .collect();
        let r = p.admit(ip("10.0.1.5"), t).unwrap_err();
        assert_eq!(r.limit, Limit::Flows);
        assert_eq!(r.log, Some(1), "the first refusal is logged");
        for _ in 0..5 {
            assert_eq!(p.admit(ip("10.0.1.5"), t).unwrap_err().log, None);
        }
        assert_eq!(
            p.admit(ip("10.0.1.5"), t + LIMIT_LOG_INTERVAL)
                .unwrap_err()
                .log,
            Some(6),
            "one line per interval, with the count since the last"
        );
        // Another passenger is unaffected.
        let _other = p.admit(ip("10.0.1.6"), t).unwrap();
        drop(held);
        assert_eq!(p.open(ip("10.0.1.5")), 0);
        assert!(p.admit(ip("10.0.1.5"), t + LIMIT_LOG_INTERVAL).is_ok());
    }

    #[test]
    fn new_connections_are_rate_limited_per_passenger_with_a_burst() {
        let p = Passengers::new(PassengerLimits {
            max_flows: 0,
            rate: 10.0,
            burst: 20,
        });
        let t = Instant::now();
        let mut held = Vec::new();
        for _ in 0..20 {
            held.push(p.admit(ip("10.0.1.5"), t).unwrap());
        }
        assert_eq!(
            p.admit(ip("10.0.1.5"), t).unwrap_err().limit,
            Limit::Rate,
            "the burst is spent"
        );
        assert!(p.admit(ip("10.0.1.9"), t).is_ok(), "others have their own");
        // 10 per second come back.
        let later = t + Duration::from_millis(500);
        for _ in 0..5 {
            held.push(p.admit(ip("10.0.1.5"), later).unwrap());
        }
        assert!(p.admit(ip("10.0.1.5"), later).is_err());
    }

    #[test]
    fn passengers_with_nothing_open_are_forgotten() {
        let p = Passengers::new(PassengerLimits::default());
        let t = Instant::now();
        for i in 0..1000u32 {
            let a = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            drop(p.admit(a, t).unwrap());
        }
        p.sweep(t + Duration::from_secs(10));
        assert!(p.tracked() < 64, "{} entries left", p.tracked());
    }

    #[test]
    fn accept_failures_back_off_to_a_second_and_warn_once_per_interval() {
        let mut b = AcceptBackoff::default();
        let t = Instant::now();
        let (w, log) = b.failed(t);
        assert_eq!((w, log), (Duration::from_millis(10), Some(1)));
        let mut last = w;
        for _ in 0..20 {
            let (w, log) = b.failed(t);
            assert!(w >= last && w <= Duration::from_secs(1));
            assert_eq!(log, None);
            last = w;
        }
        assert_eq!(last, Duration::from_secs(1));
        assert_eq!(b.failed(t + LIMIT_LOG_INTERVAL).1, Some(21));
        b.succeeded();
        assert_eq!(b.failed(t).0, Duration::from_millis(10));
    }
}
