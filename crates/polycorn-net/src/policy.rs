//! Which destinations the proxy will connect to on a passenger's behalf.
//!
//! The proxy opens TCP connections to whatever address a relay asks for. Without a policy it
//! would be an open door into the cloud host's own network: its loopback services (metrics,
//! databases), the provider's metadata endpoint (169.254.169.254), neighbouring private hosts.
//! [`DestinationPolicy`] decides per destination address, before any connect.
//!
//! # Rules, in order
//!
//! 1. The address is normalised: an IPv4-mapped IPv6 address (`::ffff:10.1.2.3`) and a NAT64
//!    well-known-prefix address (`64:ff9b::10.1.2.3`, RFC 6052) are checked as the IPv4 address
//!    they stand for, because that is where a connect ends up.
//! 2. **`policy.deny` wins.** An address inside any deny entry is refused, whatever else says.
//! 3. **Special ranges are closed by default.** Addresses in a built-in special range (see
//!    [`SPECIAL_RANGES`]: loopback, private RFC 1918, CGNAT, link-local, ULA, multicast, …) are
//!    refused unless
//!    * an allow entry lies entirely inside that special range and contains the address
//!      (`allow = ["10.0.2.0/24"]` opens 10.0.2.x; `allow = ["0.0.0.0/0"]` opens no special
//!      range, it is not inside any), or
//!    * `allow_private = true` and the range is of the private kind ([`RangeKind::Private`]).
//!      Loopback, "this host" (0.0.0.0/8, `::`), multicast, broadcast and reserved space are
//!      **not** opened by `allow_private`: a connect to 0.0.0.0 or 127.0.0.1 reaches the proxy
//!      host itself, so these need an explicit allow entry such as `allow = ["127.0.0.0/8"]`
//!      (single-machine testbeds).
//! 4. **Public addresses** are allowed when `policy.allow` is empty. When it is not empty, a
//!    public address must be inside one of its entries.
//!
//! 5. **The proxy's own host and its relays** (checked by [`DestinationPolicy::check_with`],
//!    which the proxy uses): an address of one of the host's interfaces (public ones too, in
//!    every form) is refused, because a connection from the host itself passes firewall rules
//!    that trust local traffic; so is an address a relay's subflow comes from, because a flow
//!    to it goes back to a train. No allow entry, `allow_private` or `0.0.0.0/0` opens them;
//!    loopback addresses opened by an allow entry inside 127.0.0.0/8 or `::1` stay open (for
//!    single-machine test beds).
//!
//! Rule 4 has a trap: an allow list written only to open a private resolver
//! (`allow = ["10.0.2.2/32"]`) also closes the whole public Internet. Write
//! `allow = ["0.0.0.0/0", "::/0", "10.0.2.2/32"]` to keep the Internet open.
//!
//! Every refusal is a [`Denied`] whose message names the rule that matched and, for special
//! ranges, the allow entry that would open the address, so an operator can act on a log line.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// How a special range may be re-opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeKind {
    /// Private, shared or documentation space: opened by `allow_private = true` or by an allow
    /// entry inside the range.
    Private,
    /// The proxy host itself or no single host (loopback, unspecified / this network,
    /// multicast, broadcast, reserved): opened only by an allow entry inside the range.
    Host,
}

/// One built-in special range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialRange {
    /// The range.
    pub net: IpNet,
    /// What it is, for messages (`private, RFC 1918`).
    pub what: &'static str,
    /// Whether `allow_private` opens it.
    pub kind: RangeKind,
}

const fn v4(
    a: u8,
    b: u8,
    c: u8,
    d: u8,
    len: u8,
    what: &'static str,
    kind: RangeKind,
) -> SpecialRange {
    SpecialRange {
        net: IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len)),
        what,
        kind,
    }
}

const fn v6(segs: [u16; 8], len: u8, what: &'static str, kind: RangeKind) -> SpecialRange {
    let [a, b, c, d, e, f, g, h] = segs;
    SpecialRange {
        net: IpNet::V6(Ipv6Net::new_assert(
            Ipv6Addr::new(a, b, c, d, e, f, g, h),
            len,
        )),
        what,
        kind,
    }
}

use RangeKind::{Host, Private};

/// The built-in special ranges, most specific first (the first match names the range in
/// messages). IPv4-mapped (`::ffff:0:0/96`) and NAT64 well-known (`64:ff9b::/96`) addresses
/// never reach this table: they are checked as IPv4.
pub const SPECIAL_RANGES: &[SpecialRange] = &[
    // IPv4
    v4(255, 255, 255, 255, 32, "limited broadcast", Host),
    v4(0, 0, 0, 0, 8, "this host / unspecified, RFC 791", Host),
    v4(10, 0, 0, 0, 8, "private, RFC 1918", Private),
    v4(
        100,
        64,
        0,
        0,
        10,
        "shared address space / CGNAT, RFC 6598",
        Private,
    ),
    v4(127, 0, 0, 0, 8, "loopback", Host),
    v4(169, 254, 0, 0, 16, "link-local, RFC 3927", Private),
    v4(172, 16, 0, 0, 12, "private, RFC 1918", Private),
    v4(
        192,
        0,
        0,
        0,
        24,
        "IETF protocol assignments, RFC 6890",
        Private,
    ),
    v4(192, 0, 2, 0, 24, "documentation, RFC 5737", Private),
    v4(192, 168, 0, 0, 16, "private, RFC 1918", Private),
    v4(198, 18, 0, 0, 15, "benchmarking, RFC 2544", Private),
    v4(198, 51, 100, 0, 24, "documentation, RFC 5737", Private),
    v4(203, 0, 113, 0, 24, "documentation, RFC 5737", Private),
    v4(224, 0, 0, 0, 4, "multicast", Host),
    v4(240, 0, 0, 0, 4, "reserved, RFC 1112", Host),
    // IPv6
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, "unspecified", Host),
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, "loopback", Host),
    v6(
        [0, 0, 0, 0, 0, 0, 0, 0],
        96,
        "IPv4-compatible, deprecated, RFC 4291",
        Host,
    ),
    v6(
        [0x64, 0xff9b, 1, 0, 0, 0, 0, 0],
        48,
        "NAT64 local use, RFC 8215",
        Private,
    ),
    v6(
        [0x100, 0, 0, 0, 0, 0, 0, 0],
        64,
        "discard-only, RFC 6666",
        Private,
    ),
    v6(
        [0x2001, 0xdb8, 0, 0, 0, 0, 0, 0],
        32,
        "documentation, RFC 3849",
        Private,
    ),
    v6(
        [0xfc00, 0, 0, 0, 0, 0, 0, 0],
        7,
        "unique local, RFC 4193",
        Private,
    ),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "link-local", Private),
    v6(
        [0xfec0, 0, 0, 0, 0, 0, 0, 0],
        10,
        "site-local, deprecated, RFC 3879",
        Private,
    ),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "multicast", Host),
];

/// The special range containing `ip` (after normalisation), if any.
pub fn special_range(ip: IpAddr) -> Option<&'static SpecialRange> {
    let ip = normalize(ip);
    SPECIAL_RANGES.iter().find(|r| r.net.contains(&ip))
}

/// `ip` as the address a connect really reaches: IPv4-mapped (`::ffff:a.b.c.d`) and NAT64
/// well-known-prefix (`64:ff9b::a.b.c.d`) IPv6 addresses become IPv4.
pub fn normalize(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return IpAddr::V4(v4);
            }
            let s = v6.segments();
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let o = v6.octets();
                return IpAddr::V4(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
            }
            ip
        }
    }
}

/// A rule entry normalised like addresses: `::ffff:10.0.0.0/104` becomes `10.0.0.0/8`.
/// Entries wider than the mapped prefix stay IPv6 (they cover more than mapped space).
fn normalize_net(net: IpNet) -> IpNet {
    if let IpNet::V6(n) = net {
        if n.prefix_len() >= 96 {
            if let IpAddr::V4(a) = normalize(IpAddr::V6(n.network())) {
                if let Ok(v4) = Ipv4Net::new(a, n.prefix_len() - 96) {
                    return IpNet::V4(v4.trunc());
                }
            }
        }
    }
    net.trunc()
}

/// Why an address was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DenyReason {
    /// Inside a `policy.deny` entry.
    DenyRule(IpNet),
    /// Inside a built-in special range that no rule opens.
    Special(SpecialRange),
    /// A public address outside every entry of a non-empty `policy.allow`.
    NotAllowed,
    /// An address of the proxy's own host.
    OwnHost,
    /// An address a relay's subflow comes from.
    Relay,
}

/// A refused destination; `Display` explains which rule matched and how to change it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Denied {
    /// The address as asked for.
    pub ip: IpAddr,
    /// The address checked (IPv4 for mapped/NAT64 addresses).
    pub checked: IpAddr,
    /// The rule that refused it.
    pub reason: DenyReason,
    /// The allow entries, for [`DenyReason::NotAllowed`] messages (at most a few).
    allow_excerpt: String,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ip == self.checked {
            write!(f, "{}", self.ip)?;
        } else {
            write!(f, "{} ({})", self.ip, self.checked)?;
        }
        match &self.reason {
            DenyReason::DenyRule(net) => write!(f, " is in {net}: denied by policy.deny"),
            // The host itself or no single host: no rule is suggested (one that opened the
            // range would open the proxy's host to every passenger).
            DenyReason::Special(range) if range.kind == RangeKind::Host => write!(
                f,
                " is in {} ({}): denied; it is the proxy's own host or no single host",
                range.net, range.what
            ),
            DenyReason::Special(range) => {
                let hint = suggestion(self.checked, range.net);
                write!(
                    f,
                    " is in {} ({}): denied by default; allow it with policy.allow = [\"{hint}\"] \
                     or policy.allow_private = true",
                    range.net, range.what
                )
            }
            DenyReason::OwnHost => write!(
                f,
                " is an address of the proxy's own host: always denied (a passenger would reach \
                 the host's own services as local traffic)"
            ),
            DenyReason::Relay => write!(
                f,
                " is the address of a relay's subflow: always denied (the connection would go \
                 back to a train)"
            ),
            DenyReason::NotAllowed => write!(
                f,
                " is not in any policy.allow entry ({}); add it, or \"0.0.0.0/0\" and \"::/0\" \
                 to allow every public address",
                self.allow_excerpt
            ),
        }
    }
}

/// A narrow allow entry around `ip` that lies inside `range`: the /16 (IPv4) or /64 (IPv6)
/// containing the address, or the range itself when that is narrower.
fn suggestion(ip: IpAddr, range: IpNet) -> IpNet {
    let len = match ip {
        IpAddr::V4(_) => 16,
        IpAddr::V6(_) => 64,
    }
    .max(range.prefix_len());
    IpNet::new(ip, len).map(|n| n.trunc()).unwrap_or(range)
}

/// The proxy's destination policy. Cheap to share (`Arc`), immutable after construction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationPolicy {
    allow: Vec<IpNet>,
    deny: Vec<IpNet>,
    allow_private: bool,
}

impl Default for DestinationPolicy {
    /// Every public address, nothing special: `allow = []`, `deny = []`,
    /// `allow_private = false`.
    fn default() -> Self {
        Self::new(&[], &[], false)
    }
}

impl DestinationPolicy {
    /// A policy from the `[policy]` section's entries. Entries are normalised (host bits
    /// cleared, IPv4-mapped IPv6 entries turned into IPv4).
    pub fn new(allow: &[IpNet], deny: &[IpNet], allow_private: bool) -> Self {
        Self {
            allow: allow.iter().copied().map(normalize_net).collect(),
            deny: deny.iter().copied().map(normalize_net).collect(),
            allow_private,
        }
    }

    /// The normalised allow entries.
    pub fn allow(&self) -> &[IpNet] {
        &self.allow
    }

    /// The normalised deny entries.
    pub fn deny(&self) -> &[IpNet] {
        &self.deny
    }

    /// Whether `allow_private` is set.
    pub fn allow_private(&self) -> bool {
        self.allow_private
    }

    /// [`DestinationPolicy::check`], then rule 5: `is_host` says whether an address (already
    /// normalised) belongs to the proxy's host, `is_relay` whether a relay's subflow comes from
    /// it. Loopback addresses an allow entry opened are not refused by rule 5.
    pub fn check_with(
        &self,
        ip: IpAddr,
        is_host: impl Fn(IpAddr) -> bool,
        is_relay: impl Fn(IpAddr) -> bool,
    ) -> Result<(), Denied> {
        self.check(ip)?;
        let checked = normalize(ip);
        if checked.is_loopback() {
            return Ok(());
        }
        let reason = if is_host(checked) {
            DenyReason::OwnHost
        } else if is_relay(checked) {
            DenyReason::Relay
        } else {
            return Ok(());
        };
        Err(Denied {
            ip,
            checked,
            reason,
            allow_excerpt: String::new(),
        })
    }

    /// `Ok(())` if the proxy may connect to `ip` by rules 1–4; otherwise the rule that refuses
    /// it.
    pub fn check(&self, ip: IpAddr) -> Result<(), Denied> {
        let checked = normalize(ip);
        let deny = |reason| {
            Err(Denied {
                ip,
                checked,
                reason,
                allow_excerpt: String::new(),
            })
        };
        if let Some(net) = self.deny.iter().find(|n| n.contains(&checked)) {
            return deny(DenyReason::DenyRule(*net));
        }
        if let Some(range) = SPECIAL_RANGES.iter().find(|r| r.net.contains(&checked)) {
            if self.allow_private && range.kind == RangeKind::Private {
                return Ok(());
            }
            let opened = self
                .allow
                .iter()
                .any(|a| range.net.contains(a) && a.contains(&checked));
            return if opened {
                Ok(())
            } else {
                deny(DenyReason::Special(*range))
            };
        }
        if self.allow.is_empty() || self.allow.iter().any(|a| a.contains(&checked)) {
            return Ok(());
        }
        const SHOWN: usize = 4;
        let mut excerpt = self
            .allow
            .iter()
            .take(SHOWN)
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        if self.allow.len() > SHOWN {
            excerpt.push_str(&format!(", … {} more", self.allow.len() - SHOWN));
        }
        Err(Denied {
            ip,
            checked,
            reason: DenyReason::NotAllowed,
            allow_excerpt: excerpt,
        })
    }
}
