//! Destination policy: table tests for every rule, and seeded randomized properties.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use polycorn_net::policy::{
    normalize, special_range, DenyReason, DestinationPolicy, RangeKind, SPECIAL_RANGES,
};

fn nets(list: &[&str]) -> Vec<IpNet> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn policy(allow: &[&str], deny: &[&str], allow_private: bool) -> DestinationPolicy {
    DestinationPolicy::new(&nets(allow), &nets(deny), allow_private)
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// (allow, deny, allow_private, address, allowed?)
#[allow(clippy::type_complexity)]
const TABLE: &[(&[&str], &[&str], bool, &str, bool)] = &[
    // Defaults: public open, special closed.
    (&[], &[], false, "93.184.216.34", true),
    (&[], &[], false, "2606:2800:220:1::1", true),
    (&[], &[], false, "10.1.2.3", false),
    (&[], &[], false, "172.16.0.1", false),
    (&[], &[], false, "172.31.255.255", false),
    (&[], &[], false, "172.32.0.1", true),
    (&[], &[], false, "192.168.1.1", false),
    (&[], &[], false, "100.64.0.1", false),
    (&[], &[], false, "100.128.0.1", true),
    (&[], &[], false, "127.0.0.1", false),
    (&[], &[], false, "127.255.0.9", false),
    (&[], &[], false, "0.0.0.0", false),
    (&[], &[], false, "0.1.2.3", false),
    (&[], &[], false, "169.254.169.254", false),
    (&[], &[], false, "224.0.0.1", false),
    (&[], &[], false, "239.255.255.250", false),
    (&[], &[], false, "255.255.255.255", false),
    (&[], &[], false, "240.0.0.1", false),
    (&[], &[], false, "192.0.2.1", false),
    (&[], &[], false, "::1", false),
    (&[], &[], false, "::", false),
    (&[], &[], false, "fe80::1", false),
    (&[], &[], false, "fd12:3456::1", false),
    (&[], &[], false, "fc00::1", false),
    (&[], &[], false, "ff02::1", false),
    (&[], &[], false, "2001:db8::1", false),
    // Mapped and NAT64 addresses are checked as IPv4.
    (&[], &[], false, "::ffff:10.1.2.3", false),
    (&[], &[], false, "::ffff:127.0.0.1", false),
    (&[], &[], false, "::ffff:93.184.216.34", true),
    (&[], &[], false, "64:ff9b::10.0.0.1", false),
    (&[], &[], false, "64:ff9b::8.8.8.8", true),
    (&["10.0.2.0/24"], &[], false, "::ffff:10.0.2.7", true),
    (
        &[],
        &["93.184.216.0/24"],
        false,
        "::ffff:93.184.216.34",
        false,
    ),
    (
        &[],
        &["::ffff:93.184.216.0/120"],
        false,
        "93.184.216.34",
        false,
    ),
    (&["::ffff:10.0.2.0/120"], &[], false, "10.0.2.9", true),
    // allow_private opens private kinds, not the host itself or non-unicast.
    (&[], &[], true, "10.1.2.3", true),
    (&[], &[], true, "192.168.1.1", true),
    (&[], &[], true, "169.254.169.254", true),
    (&[], &[], true, "fd00::1", true),
    (&[], &[], true, "::ffff:172.16.0.1", true),
    (&[], &[], true, "127.0.0.1", false),
    (&[], &[], true, "::1", false),
    (&[], &[], true, "0.0.0.0", false),
    (&[], &[], true, "224.0.0.1", false),
    (&[], &[], true, "255.255.255.255", false),
    // A special range is opened only by an allow entry inside it.
    (&["0.0.0.0/0"], &[], false, "10.1.2.3", false),
    (&["0.0.0.0/0", "::/0"], &[], false, "::1", false),
    (&["8.0.0.0/7"], &[], false, "10.0.0.1", false),
    (&["10.0.2.0/24"], &[], false, "10.0.2.9", true),
    (&["10.0.2.0/24"], &[], false, "10.0.3.9", false),
    (&["10.0.0.0/8"], &[], false, "10.200.0.1", true),
    (&["127.0.0.0/8"], &[], false, "127.0.0.1", true),
    (&["127.0.0.1/32"], &[], false, "127.0.0.2", false),
    (&["::1/128"], &[], false, "::1", true),
    (&["fd00::/8"], &[], false, "fd00::5", true),
    // Non-empty allow restricts public space.
    (&["10.0.2.0/24"], &[], false, "93.184.216.34", false),
    (&["93.184.216.0/24"], &[], false, "93.184.216.34", true),
    (&["93.184.216.0/24"], &[], false, "93.184.217.34", false),
    (&["0.0.0.0/0"], &[], false, "93.184.216.34", true),
    (&["0.0.0.0/0"], &[], false, "2606:2800:220:1::1", false),
    (
        &["0.0.0.0/0", "::/0", "10.0.2.2/32"],
        &[],
        false,
        "2606:2800:220:1::1",
        true,
    ),
    (
        &["0.0.0.0/0", "::/0", "10.0.2.2/32"],
        &[],
        false,
        "10.0.2.2",
        true,
    ),
    // Deny wins over everything.
    (&["10.0.2.0/24"], &["10.0.2.5/32"], false, "10.0.2.5", false),
    (&[], &["10.0.0.0/8"], true, "10.0.0.1", false),
    (
        &["93.184.216.0/24"],
        &["93.184.216.34/32"],
        false,
        "93.184.216.34",
        false,
    ),
    (&[], &["0.0.0.0/0"], false, "93.184.216.34", false),
    (&[], &["0.0.0.0/0"], false, "2606:2800:220:1::1", true),
];

#[test]
fn table() {
    let mut failures = Vec::new();
    for (i, (allow, deny, private, addr, expect)) in TABLE.iter().enumerate() {
        let got = policy(allow, deny, *private).check(ip(addr));
        if got.is_ok() != *expect {
            failures.push(format!(
                "row {i}: allow={allow:?} deny={deny:?} allow_private={private} {addr}: \
                 expected {}, got {got:?}",
                if *expect { "allowed" } else { "denied" }
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn messages_name_the_rule() {
    let p = policy(&[], &[], false);
    let msg = p.check(ip("10.1.2.3")).unwrap_err().to_string();
    assert_eq!(
        msg,
        "10.1.2.3 is in 10.0.0.0/8 (private, RFC 1918): denied by default; allow it with \
         policy.allow = [\"10.1.0.0/16\"] or policy.allow_private = true"
    );

    let msg = p.check(ip("127.0.0.1")).unwrap_err().to_string();
    assert!(msg.contains("127.0.0.0/8 (loopback)"), "{msg}");
    // No rule is suggested that would open the proxy's host (0.0.0.0/8 and loopback reach it).
    for host in ["127.0.0.1", "0.0.0.7", "::1", "::"] {
        let msg = p.check(ip(host)).unwrap_err().to_string();
        assert!(msg.contains("the proxy's own host"), "{msg}");
        assert!(!msg.contains("policy.allow"), "{msg}");
        assert!(!msg.contains("allow_private"), "{msg}");
    }

    let msg = p.check(ip("255.255.255.255")).unwrap_err().to_string();
    assert!(!msg.contains("policy.allow"), "{msg}");

    let msg = p.check(ip("::ffff:10.1.2.3")).unwrap_err().to_string();
    assert!(
        msg.starts_with("::ffff:10.1.2.3 (10.1.2.3) is in 10.0.0.0/8"),
        "{msg}"
    );

    let msg = p.check(ip("fd12:3456:789a:1::5")).unwrap_err().to_string();
    assert!(msg.contains("[\"fd12:3456:789a:1::/64\"]"), "{msg}");

    let p = policy(&[], &["93.184.216.0/24"], false);
    let err = p.check(ip("93.184.216.34")).unwrap_err();
    assert_eq!(
        err.reason,
        DenyReason::DenyRule("93.184.216.0/24".parse().unwrap())
    );
    assert_eq!(
        err.to_string(),
        "93.184.216.34 is in 93.184.216.0/24: denied by policy.deny"
    );

    let p = policy(
        &[
            "1.0.0.0/8",
            "2.0.0.0/8",
            "3.0.0.0/8",
            "4.0.0.0/8",
            "5.0.0.0/8",
        ],
        &[],
        false,
    );
    let msg = p.check(ip("93.184.216.34")).unwrap_err().to_string();
    assert!(
        msg.contains("not in any policy.allow entry (1.0.0.0/8"),
        "{msg}"
    );
    assert!(msg.contains("… 1 more"), "{msg}");
}

#[test]
fn entries_are_normalised() {
    let p = policy(&["10.1.2.3/16", "::ffff:10.9.0.0/112"], &[], false);
    assert_eq!(p.allow(), &nets(&["10.1.0.0/16", "10.9.0.0/16"])[..]);
}

#[test]
fn special_table_is_consistent() {
    for r in SPECIAL_RANGES {
        assert_eq!(r.net, r.net.trunc(), "{} has host bits", r.net);
        assert!(!r.what.is_empty());
    }
    assert_eq!(
        special_range(ip("::ffff:127.0.0.1")).unwrap().kind,
        RangeKind::Host
    );
    assert_eq!(
        special_range(ip("10.0.0.1")).unwrap().kind,
        RangeKind::Private
    );
    assert!(special_range(ip("93.184.216.34")).is_none());
}

/// splitmix64: a tiny seeded generator, so failures reproduce from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// An IPv4 address, biased towards special ranges so they are hit often.
    fn v4(&mut self) -> Ipv4Addr {
        let raw = self.next();
        let mut a = Ipv4Addr::from(raw as u32);
        if raw >> 62 == 0 {
            let r = &SPECIAL_RANGES[(raw >> 32) as usize % SPECIAL_RANGES.len()];
            if let IpNet::V4(n) = r.net {
                let host = (raw as u32) & !u32::from(n.netmask());
                a = Ipv4Addr::from(u32::from(n.network()) | host);
            }
        }
        a
    }
}

const SEED: u64 = 0x5eed_0f90_11c0;
const CASES: usize = 20_000;

fn policies() -> Vec<DestinationPolicy> {
    vec![
        policy(&[], &[], false),
        policy(&[], &[], true),
        policy(&["0.0.0.0/0", "::/0"], &[], false),
        policy(&["10.0.0.0/9", "93.0.0.0/8"], &["10.0.0.0/24"], false),
        policy(&["127.0.0.0/8"], &["93.184.0.0/16"], true),
    ]
}

#[test]
fn mapped_addresses_get_the_same_verdict() {
    let mut rng = Rng(SEED);
    for p in policies() {
        for _ in 0..CASES {
            let a = rng.v4();
            let mapped = IpAddr::V6(a.to_ipv6_mapped());
            let [x, y, z, w] = a.octets();
            let nat64 = IpAddr::V6(Ipv6Addr::new(
                0x64,
                0xff9b,
                0,
                0,
                0,
                0,
                u16::from_be_bytes([x, y]),
                u16::from_be_bytes([z, w]),
            ));
            let direct = p.check(IpAddr::V4(a)).map_err(|e| e.reason);
            assert_eq!(
                direct,
                p.check(mapped).map_err(|e| e.reason),
                "seed {SEED:#x}: {a}"
            );
            assert_eq!(
                direct,
                p.check(nat64).map_err(|e| e.reason),
                "seed {SEED:#x}: {a}"
            );
            assert_eq!(normalize(mapped), IpAddr::V4(a));
        }
    }
}

#[test]
fn random_addresses_follow_the_rules() {
    let mut rng = Rng(SEED ^ 1);
    let wide_open = policy(&["0.0.0.0/0", "::/0"], &[], false);
    let denied_10 = policy(&[], &["10.0.0.0/8"], true);
    for _ in 0..CASES {
        let a = IpAddr::V4(rng.v4());
        let special = special_range(a);
        // A wide allow entry never opens a special range; public space is all open.
        assert_eq!(
            wide_open.check(a).is_ok(),
            special.is_none(),
            "seed {SEED:#x}: {a}"
        );
        // Deny wins even over allow_private.
        if "10.0.0.0/8".parse::<IpNet>().unwrap().contains(&a) {
            assert!(denied_10.check(a).is_err(), "seed {SEED:#x}: {a}");
        }
        // An address's own /32 inside its special range always opens it.
        if let Some(r) = special {
            let own = IpNet::new(a, 32).unwrap();
            let p = DestinationPolicy::new(&[own], &[], false);
            assert!(p.check(a).is_ok(), "seed {SEED:#x}: {a} in {}", r.net);
        }
    }
}

#[test]
fn the_proxys_own_host_and_its_relays_are_refused_whatever_the_allow_list_says() {
    let own = [ip("93.184.216.34"), ip("2a00:1450:4001::1"), ip("10.0.0.5")];
    let relay = ip("151.101.1.9");
    let is_host = |a: std::net::IpAddr| own.contains(&a);
    let is_relay = |a: std::net::IpAddr| a == relay;
    for p in [
        policy(&[], &[], false),
        policy(&["0.0.0.0/0", "::/0"], &[], true),
        policy(
            &[
                "93.184.216.34/32",
                "151.101.0.0/16",
                "2a00::/16",
                "10.0.0.0/8",
            ],
            &[],
            true,
        ),
    ] {
        for (dst, what) in [
            ("93.184.216.34", "own host"),
            ("::ffff:93.184.216.34", "own host"),
            ("2a00:1450:4001::1", "own host"),
            ("151.101.1.9", "relay"),
            ("::ffff:151.101.1.9", "relay"),
        ] {
            let err = p.check_with(ip(dst), is_host, is_relay).unwrap_err();
            let msg = err.to_string();
            match what {
                "own host" => assert!(msg.contains("the proxy's own host"), "{dst}: {msg}"),
                _ => assert!(msg.contains("a relay's subflow"), "{dst}: {msg}"),
            }
            assert!(!msg.contains("policy.allow"), "{msg}");
        }
        assert!(p.check_with(ip("151.101.2.2"), is_host, is_relay).is_ok());
    }
    // Loopback stays as its allow entry says (single-machine test beds).
    let p = policy(&["127.0.0.0/8"], &[], false);
    assert!(p.check_with(ip("127.0.0.1"), |_| true, |_| true).is_ok());
    assert!(policy(&[], &[], false)
        .check_with(ip("127.0.0.1"), |_| true, |_| true)
        .is_err());
}
