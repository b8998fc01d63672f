//! The host's own addresses as relay and proxy see them: every interface, both families, and
//! an address added while they run counted within a second (in a namespace of the test's own).

mod common;

use std::net::IpAddr;
use std::time::Duration;

use polycorn_emu::netns::InNamespace;
use polycorn_net::guard::{HostAddrs, HOST_ADDRS_REFRESH};

#[test]
fn an_address_added_while_running_counts_as_the_hosts_own_within_a_second() {
    if !common::can_run(&[("ip", "-V")]) {
        return;
    }
    let ns = format!("pcg{}", std::process::id() % 100_000);
    let _ = std::process::Command::new("ip")
        .args(["netns", "del", &ns])
        .status();
    common::sh("ip", &["netns", "add", &ns]);
    struct Del(String);
    impl Drop for Del {
        fn drop(&mut self) {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", &self.0])
                .status();
        }
    }
    let _del = Del(ns.clone());
    common::sh("ip", &["-n", &ns, "link", "set", "lo", "up"]);
    let (v4, v6): (IpAddr, IpAddr) = (
        "198.18.5.5".parse().unwrap(),
        "2001:db8:77::5".parse().unwrap(),
    );
    let ns2 = ns.clone();
    let seen = std::thread::spawn(move || {
        let _in = InNamespace::enter(&ns2).unwrap();
        let host = HostAddrs::new();
        let before = (host.contains(v4), host.contains(v6));
        common::sh(
            "ip",
            &["-n", &ns2, "addr", "add", "198.18.5.5/32", "dev", "lo"],
        );
        common::sh(
            "ip",
            &[
                "-n",
                &ns2,
                "addr",
                "add",
                "2001:db8:77::5/128",
                "dev",
                "lo",
                "nodad",
            ],
        );
        std::thread::sleep(HOST_ADDRS_REFRESH + Duration::from_millis(100));
        let after = (
            host.contains(v4),
            host.contains(v6),
            host.contains("::ffff:198.18.5.5".parse().unwrap()),
        );
        (before, after)
    })
    .join()
    .unwrap();
    assert_eq!(
        seen.0,
        (false, false),
        "not the host's before they were added"
    );
    assert_eq!(
        seen.1,
        (true, true, true),
        "the host's once added, in every form"
    );
}
