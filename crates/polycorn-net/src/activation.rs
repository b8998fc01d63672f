//! Listening sockets handed to the relay or the proxy by systemd (socket activation, the
//! `sd_listen_fds` protocol), so that their listeners outlive a process.
//!
//! A relay that binds its own listeners closes them when it stops or crashes; until the next
//! process listens again, passengers' SYNs find no listener and wait for their retransmission
//! (about 1 s). With a `polycorn-relay.socket` unit (`polycorn config example relay.socket`),
//! systemd binds the listeners once and keeps them across restarts of the service: connections
//! made while no relay runs wait in the listener's backlog and are taken by the next process.
//! The proxy's subflow listeners can be held the same way (`proxy.socket`): relays' subflows
//! then wait in the backlog during a proxy restart instead of being refused.
//!
//! The protocol: `LISTEN_PID` is the process the sockets are for (another process ignores
//! them), `LISTEN_FDS` how many there are, starting at file descriptor 3, and `LISTEN_FDNAMES`
//! optionally names them (`:`-separated). [`Inherited::from_env`] takes them over (marks them
//! close-on-exec, removes the variables so no child inherits them) and the relay matches each to
//! a configured listener by socket type and local address; one it does not use, or a listener
//! of the wrong kind, is an error naming both.

#![allow(unsafe_code)]

use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use socket2::{Socket, Type};

/// The first file descriptor systemd passes (`SD_LISTEN_FDS_START`).
const FIRST_FD: RawFd = 3;
/// More than this many passed sockets is taken as a corrupt `LISTEN_FDS`.
const MAX_FDS: usize = 64;

/// What is wrong with the passed sockets.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    /// A variable of the protocol does not parse.
    #[error("socket activation: {var}={value:?}: {why}")]
    Env {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// A passed file descriptor is not a usable socket.
    #[error("socket activation: file descriptor {fd}{name}: {what}")]
    Fd {
        /// The descriptor.
        fd: RawFd,
        /// ` (NAME)` from `LISTEN_FDNAMES`, or empty.
        name: String,
        /// What is wrong.
        what: String,
    },
}

/// The names (`None`: unnamed) of the sockets the environment passes to process `me`, one per
/// socket. `None` when the variables are absent or meant for another process (a child of the
/// one systemd started).
pub fn parse_env(
    pid: Option<&str>,
    fds: Option<&str>,
    names: Option<&str>,
    me: u32,
) -> Result<Option<Vec<Option<String>>>, ActivationError> {
    let (Some(pid), Some(fds)) = (pid, fds) else {
        return Ok(None);
    };
    let pid_n: u32 = pid.trim().parse().map_err(|_| ActivationError::Env {
        var: "LISTEN_PID",
        value: pid.into(),
        why: "not a process id".into(),
    })?;
    if pid_n != me {
        return Ok(None);
    }
    let n: usize = fds.trim().parse().map_err(|_| ActivationError::Env {
        var: "LISTEN_FDS",
        value: fds.into(),
        why: "not a count".into(),
    })?;
    if n > MAX_FDS {
        return Err(ActivationError::Env {
            var: "LISTEN_FDS",
            value: fds.into(),
            why: format!("more than {MAX_FDS} sockets"),
        });
    }
    let mut out: Vec<Option<String>> = vec![None; n];
    if let Some(names) = names.filter(|s| !s.is_empty()) {
        let list: Vec<&str> = names.split(':').collect();
        if list.len() != n {
            return Err(ActivationError::Env {
                var: "LISTEN_FDNAMES",
                value: names.into(),
                why: format!("{} names for {n} sockets (LISTEN_FDS)", list.len()),
            });
        }
        for (o, name) in out.iter_mut().zip(list) {
            *o = Some(name.to_string()).filter(|s| !s.is_empty());
        }
    }
    Ok(Some(out))
}

/// One passed socket.
#[derive(Debug)]
struct Passed {
    fd: RawFd,
    name: Option<String>,
    sock: Socket,
    stream: bool,
    local: Option<SocketAddr>,
}

impl Passed {
    fn describe(&self) -> String {
        let kind = if self.stream { "TCP" } else { "UDP" };
        let at = self
            .local
            .map_or_else(|| "a non-IP address".to_string(), |a| a.to_string());
        match &self.name {
            Some(n) => format!("{kind} {at} (fd {}, {n})", self.fd),
            None => format!("{kind} {at} (fd {})", self.fd),
        }
    }
}

/// The sockets systemd passed, not yet claimed by a listener.
#[derive(Debug, Default)]
pub struct Inherited {
    sockets: Vec<Passed>,
}

impl Inherited {
    /// No sockets: the daemon binds every listener itself.
    pub fn none() -> Inherited {
        Inherited::default()
    }

    /// Take over the sockets the environment passes to this process (none when `LISTEN_PID`
    /// is unset or names another process). Call it first thing, before any thread or child
    /// process starts: the descriptors are made close-on-exec and the variables removed.
    pub fn from_env() -> Result<Inherited, ActivationError> {
        let get = |k: &str| std::env::var(k).ok();
        let parsed = parse_env(
            get("LISTEN_PID").as_deref(),
            get("LISTEN_FDS").as_deref(),
            get("LISTEN_FDNAMES").as_deref(),
            std::process::id(),
        )?;
        for k in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
            // SAFETY (of the call's contract): called at startup, before other threads exist.
            std::env::remove_var(k);
        }
        let Some(names) = parsed else {
            return Ok(Inherited::none());
        };
        let mut sockets = Vec::with_capacity(names.len());
        for (i, name) in names.into_iter().enumerate() {
            let fd = FIRST_FD + i as RawFd;
            let label = name
                .as_ref()
                .map_or_else(String::new, |n| format!(" ({n})"));
            let err = |what: String| ActivationError::Fd {
                fd,
                name: label.clone(),
                what,
            };
            let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD)
                .map_err(|e| err(format!("not open ({e})")))?;
            let mut flags = nix::fcntl::FdFlag::from_bits_retain(flags);
            flags.insert(nix::fcntl::FdFlag::FD_CLOEXEC);
            nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(flags))
                .map_err(|e| err(format!("set close-on-exec: {e}")))?;
            // SAFETY: the descriptor is open (checked above), the protocol hands it to this
            // process alone, and it is taken exactly once: the variables are gone now.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            sockets.push(Passed::new(fd, name, owned).map_err(err)?);
        }
        Ok(Inherited { sockets })
    }

    /// Sockets already open in this process (a supervisor or a test holding listeners), as if
    /// systemd had passed them.
    pub fn from_sockets(fds: Vec<OwnedFd>) -> Result<Inherited, ActivationError> {
        let mut sockets = Vec::with_capacity(fds.len());
        for fd in fds {
            let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
            let err = |what: String| ActivationError::Fd {
                fd: raw,
                name: String::new(),
                what,
            };
            sockets.push(Passed::new(raw, None, fd).map_err(err)?);
        }
        Ok(Inherited { sockets })
    }

    /// Whether no passed socket is left.
    pub fn is_empty(&self) -> bool {
        self.sockets.is_empty()
    }

    /// How many passed sockets are left.
    pub fn len(&self) -> usize {
        self.sockets.len()
    }

    fn take(&mut self, stream: bool, addr: SocketAddr) -> Option<Passed> {
        let i = self
            .sockets
            .iter()
            .position(|p| p.stream == stream && p.local == Some(addr))?;
        Some(self.sockets.remove(i))
    }

    /// The passed TCP socket bound to `addr`, if any; it must be listening. `transparent`:
    /// it is made `IP_TRANSPARENT`/`IPV6_TRANSPARENT` (a TPROXY listener), whether or not the
    /// socket unit said `Transparent=yes`. Nonblocking, ready for tokio.
    pub fn take_listener(
        &mut self,
        addr: SocketAddr,
        transparent: bool,
    ) -> Result<Option<std::net::TcpListener>, String> {
        let Some(p) = self.take(true, addr) else {
            return Ok(None);
        };
        let what = p.describe();
        if !p.sock.is_listener().map_err(|e| format!("{what}: {e}"))? {
            return Err(format!(
                "{what} is not listening (a socket unit passes listeners: ListenStream=, \
                 not Accept=yes)"
            ));
        }
        if transparent {
            let r = if addr.is_ipv4() {
                p.sock.set_ip_transparent(true)
            } else {
                crate::sockopt::set_ipv6_transparent(std::os::fd::AsFd::as_fd(&p.sock), true)
            };
            r.map_err(|e| format!("{what}: make it transparent (needs CAP_NET_ADMIN): {e}"))?;
        }
        p.sock
            .set_nonblocking(true)
            .map_err(|e| format!("{what}: {e}"))?;
        Ok(Some(p.sock.into()))
    }

    /// The passed UDP socket bound to `addr`, if any. Nonblocking, ready for tokio.
    pub fn take_udp(&mut self, addr: SocketAddr) -> Result<Option<std::net::UdpSocket>, String> {
        let Some(p) = self.take(false, addr) else {
            return Ok(None);
        };
        let what = p.describe();
        p.sock
            .set_nonblocking(true)
            .map_err(|e| format!("{what}: {e}"))?;
        Ok(Some(p.sock.into()))
    }

    /// Fails naming every passed socket no listener claimed: the socket unit and the
    /// configuration disagree, and a passenger connecting there would wait forever.
    pub fn check_all_used(&self, daemon: &str, listeners: &[String]) -> Result<(), String> {
        if self.sockets.is_empty() {
            return Ok(());
        }
        let left: Vec<String> = self.sockets.iter().map(Passed::describe).collect();
        let configured = if listeners.is_empty() {
            "none".to_string()
        } else {
            listeners.join(", ")
        };
        Err(format!(
            "systemd passed {} that the configuration does not listen on: {}; the {daemon}'s \
             listeners are {configured}. Make the socket unit's ListenStream=/ListenDatagram= \
             lines name exactly these addresses",
            if left.len() == 1 {
                "a socket"
            } else {
                "sockets"
            },
            left.join(", ")
        ))
    }
}

impl Passed {
    fn new(fd: RawFd, name: Option<String>, owned: OwnedFd) -> Result<Passed, String> {
        let sock = Socket::from(owned);
        let ty = sock.r#type().map_err(|e| format!("not a socket ({e})"))?;
        let stream = if ty == Type::STREAM {
            true
        } else if ty == Type::DGRAM {
            false
        } else {
            return Err(format!(
                "a socket of type {ty:?}; expected TCP (ListenStream=) or UDP (ListenDatagram=)"
            ));
        };
        let local = sock
            .local_addr()
            .map_err(|e| format!("local address: {e}"))?
            .as_socket();
        Ok(Passed {
            fd,
            name,
            sock,
            stream,
            local,
        })
    }
}

/// Most sockets [`pass_sockets`] hands to one child.
pub const MAX_PASSED: usize = 8;

/// Have `cmd`'s child receive `fds` as systemd passes sockets: file descriptors 3, 4, … in
/// order, open across its exec (for a supervisor holding listeners, the soak, tests). The
/// caller sets `LISTEN_FDS` and `LISTEN_PID` (the child's PID is known only after the fork,
/// so a shell wrapper exports `LISTEN_PID=$$` and execs the daemon). At most [`MAX_PASSED`].
pub fn pass_sockets(cmd: &mut std::process::Command, fds: &[RawFd]) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    if fds.len() > MAX_PASSED {
        return Err(format!(
            "{} sockets to pass, at most {MAX_PASSED}",
            fds.len()
        ));
    }
    let mut list = [0 as RawFd; MAX_PASSED];
    list[..fds.len()].copy_from_slice(fds);
    let n = fds.len();
    // SAFETY: between fork and exec the closure calls only fcntl and dup2 (async-signal-safe)
    // on a copied array, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            use nix::fcntl::{fcntl, FcntlArg};
            // Out of the way first (a descriptor may already sit at 3, 4, …), then into place;
            // dup2's copy stays open across exec.
            let mut high = [0 as RawFd; MAX_PASSED];
            for i in 0..n {
                high[i] = fcntl(list[i], FcntlArg::F_DUPFD_CLOEXEC(100))?;
            }
            for (i, h) in high.iter().take(n).enumerate() {
                nix::unistd::dup2(*h, FIRST_FD + i as RawFd)?;
            }
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_is_read_as_systemd_writes_it() {
        assert!(parse_env(None, None, None, 7).unwrap().is_none());
        assert!(parse_env(Some("7"), None, None, 7).unwrap().is_none());
        // Meant for another process (e.g. the relay's parent, a wrapper script).
        assert!(parse_env(Some("8"), Some("2"), None, 7).unwrap().is_none());
        assert_eq!(
            parse_env(Some("7"), Some("2"), None, 7).unwrap(),
            Some(vec![None, None])
        );
        assert_eq!(
            parse_env(Some("7"), Some("2"), Some("tproxy:"), 7).unwrap(),
            Some(vec![Some("tproxy".into()), None])
        );
        assert_eq!(
            parse_env(Some("7"), Some("0"), Some(""), 7).unwrap(),
            Some(vec![])
        );
    }

    #[test]
    fn a_corrupt_environment_is_refused_naming_the_variable() {
        let e = parse_env(Some("x"), Some("1"), None, 7).unwrap_err();
        assert!(e.to_string().contains("LISTEN_PID=\"x\""), "{e}");
        let e = parse_env(Some("7"), Some("-1"), None, 7).unwrap_err();
        assert!(e.to_string().contains("LISTEN_FDS=\"-1\""), "{e}");
        let e = parse_env(Some("7"), Some("100"), None, 7).unwrap_err();
        assert!(e.to_string().contains("more than 64"), "{e}");
        let e = parse_env(Some("7"), Some("2"), Some("a"), 7).unwrap_err();
        assert!(
            e.to_string()
                .contains("LISTEN_FDNAMES=\"a\": 1 names for 2 sockets"),
            "{e}"
        );
    }

    fn owned(s: impl Into<OwnedFd>) -> OwnedFd {
        s.into()
    }

    #[test]
    fn passed_sockets_are_matched_by_kind_and_address() {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp_addr = tcp.local_addr().unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let udp_addr = udp.local_addr().unwrap();
        let mut inh = Inherited::from_sockets(vec![owned(tcp), owned(udp)]).unwrap();
        assert_eq!(inh.len(), 2);
        // The UDP socket's address over TCP: no match.
        assert!(inh.take_listener(udp_addr, false).unwrap().is_none());
        let l = inh.take_listener(tcp_addr, false).unwrap().unwrap();
        assert_eq!(l.local_addr().unwrap(), tcp_addr);
        let e = inh
            .check_all_used("relay", &["TCP 127.0.0.1:1".into()])
            .unwrap_err();
        assert!(e.contains(&format!("UDP {udp_addr}")), "{e}");
        assert!(
            e.contains("the relay's listeners are TCP 127.0.0.1:1"),
            "{e}"
        );
        assert!(inh.take_udp(udp_addr).unwrap().is_some());
        inh.check_all_used("relay", &[]).unwrap();
    }

    #[test]
    fn a_bound_but_not_listening_socket_is_refused() {
        let s = Socket::new(socket2::Domain::IPV4, Type::STREAM, None).unwrap();
        s.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let addr = s.local_addr().unwrap().as_socket().unwrap();
        let mut inh = Inherited::from_sockets(vec![owned(s)]).unwrap();
        let e = inh.take_listener(addr, false).unwrap_err();
        assert!(e.contains("is not listening"), "{e}");
    }

    #[test]
    fn a_file_is_not_a_socket() {
        let f = std::fs::File::open("/dev/null").unwrap();
        let e = Inherited::from_sockets(vec![owned(f)]).unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
    }
}
