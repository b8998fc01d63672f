//! Staggered subflow connects in a real network namespace (needs root, nft and ip): while the
//! proxy's port drops every SYN (a blackout), new TCP attempts keep starting; once SYNs get
//! through, one connection wins and the other attempts are closed. A port that refuses (the
//! proxy is down) ends the attempts after 2 s instead.
//!
//! The namespace `pcn-t<pid>-conn` (and the nftables table inside it) is deleted by name when
//! the test ends, also on failure.

use std::fs::File;
use std::os::fd::AsFd;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sched::{setns, CloneFlags};
use polycorn_net::subflow::{connect_staggered, REFUSED_GIVE_UP};

const PORT: u16 = 7702;

mod common;
use common::sh;

/// Root, nft, ip and ss.
fn can_run() -> bool {
    common::can_run(&[("nft", "--version"), ("ip", "-V"), ("ss", "-V")])
}

/// A named network namespace with loopback up, deleted by name on drop.
struct Ns(String);

impl Ns {
    fn create(name: String) -> Ns {
        sh("ip", &["netns", "add", &name]);
        let ns = Ns(name);
        ns.sh("ip", &["link", "set", "lo", "up"]);
        ns
    }
    fn sh(&self, program: &str, args: &[&str]) -> String {
        let mut full = vec!["netns", "exec", &self.0, program];
        full.extend_from_slice(args);
        sh("ip", &full)
    }
    /// Sockets to the proxy port still waiting for their SYN-ACK.
    fn syn_sent(&self) -> usize {
        let dst = format!("dport = :{PORT}");
        self.sh("ss", &["-Htn", "state", "syn-sent", &dst])
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count()
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Run `f` on a thread inside `ns`.
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let target = File::open(path).unwrap();
        setns(target.as_fd(), CloneFlags::CLONE_NEWNET).unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// Poll `cond` every 50 ms for up to `secs` seconds.
fn eventually(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

/// A staggered connect to the proxy port on `ns`'s loopback (new attempt every 250 ms, 20 s
/// in all), on its own thread.
fn connect_in(
    ns: String,
) -> std::thread::JoinHandle<Result<tokio::net::TcpStream, polycorn_net::subflow::HandshakeError>> {
    std::thread::spawn(move || {
        in_ns(&ns, || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(connect_staggered(
                    ([127, 0, 0, 1], PORT).into(),
                    None,
                    None,
                    None,
                    Duration::from_secs(20),
                    Duration::from_millis(250),
                ))
        })
    })
}

#[test]
fn staggered_attempts_overlap_in_a_blackout_and_one_wins_after_it() {
    if !can_run() {
        return;
    }
    let ns = Ns::create(format!("pcn-t{}-conn", std::process::id()));
    let listener = in_ns(&ns.0, || {
        std::net::TcpListener::bind(("127.0.0.1", PORT)).expect("bind the proxy port")
    });
    // The blackout: every SYN to the proxy port is dropped.
    ns.sh("nft", &["add", "table", "inet", "pcn_conn"]);
    ns.sh(
        "nft",
        &["add chain inet pcn_conn input { type filter hook input priority 0 ; }"],
    );
    let rule = format!(
        "add rule inet pcn_conn input tcp dport {PORT} tcp flags & (syn | ack) == syn drop"
    );
    ns.sh("nft", &[&rule]);
    let connect = connect_in(ns.0.clone());
    // A single attempt would keep one socket in SYN-SENT; staggering keeps several.
    assert!(
        eventually(10, || ns.syn_sent() >= 3),
        "fewer than 3 attempts in SYN-SENT at once during the blackout (now {})",
        ns.syn_sent()
    );
    assert!(!connect.is_finished(), "connected through the blackout");
    ns.sh("nft", &["delete", "table", "inet", "pcn_conn"]);
    let stream = connect
        .join()
        .unwrap()
        .expect("connected once the blackout ended");
    assert_eq!(stream.peer_addr().unwrap().port(), PORT);
    let (accepted, _) = listener.accept().expect("the winner reached the listener");
    assert_eq!(
        accepted.peer_addr().unwrap(),
        stream.local_addr().unwrap(),
        "the listener's connection is the winner's"
    );
    // The other attempts were closed: none keeps retransmitting its SYN.
    assert!(
        eventually(5, || ns.syn_sent() == 0),
        "{} attempts still in SYN-SENT after one connected",
        ns.syn_sent()
    );
}

/// A proxy host that answers every SYN with a reset (no process listens: the proxy is down)
/// ends the staggered connect soon after `REFUSED_GIVE_UP`, not at its timeout, so the relay
/// can look the name up again sooner; a proxy that comes back within it is still connected to.
#[test]
fn a_refusing_proxy_ends_staggered_attempts_early_and_one_back_within_them_is_reached() {
    if !can_run() {
        return;
    }
    let ns = Ns::create(format!("pcn-t{}-refu", std::process::id()));
    let t0 = Instant::now();
    let r = connect_in(ns.0.clone()).join().unwrap();
    let took = t0.elapsed();
    let e = r.expect_err("nothing listens");
    assert!(e.is_refused(), "{e}");
    assert!(
        took >= REFUSED_GIVE_UP && took < Duration::from_secs(10),
        "gave up after {took:?} (timeout 20 s)"
    );

    // The proxy comes back 1 s into the attempts.
    let attempts = connect_in(ns.0.clone());
    std::thread::sleep(Duration::from_secs(1));
    let listener = in_ns(&ns.0, || {
        std::net::TcpListener::bind(("127.0.0.1", PORT)).expect("bind the proxy port")
    });
    let r = attempts.join().unwrap();
    let stream = r.expect("connected once the proxy listened again");
    let (accepted, _) = listener.accept().unwrap();
    assert_eq!(accepted.peer_addr().unwrap(), stream.local_addr().unwrap());
}
