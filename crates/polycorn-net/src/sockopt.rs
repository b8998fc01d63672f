//! Linux socket options the relay and proxy need, in one audited place.
//!
//! This is the crate's only module with `unsafe` code: three raw `getsockopt`/`setsockopt`
//! calls for options `socket2` does not wrap (`TCP_INFO`, `TCP_NOTSENT_LOWAT`,
//! `IPV6_TRANSPARENT`). Everything else goes through `socket2`. Linux only.
//!
//! | what | function | why polycorn needs it |
//! |---|---|---|
//! | kernel TCP state of a subflow | [`tcp_info`], [`TcpInfoRaw::to_sample`] | the scheduler's RTT, cwnd, in-flight and delivery-rate inputs |
//! | keep the send queue short | [`set_notsent_lowat`] | bytes sit in our scheduler, not in a stale kernel queue |
//! | congestion control per socket | [`set_congestion`] | the machine default is BBR; subflows set theirs explicitly |
//! | keep the window across idle gaps | [`set_slow_start_after_idle`] | a sysctl of the namespace, no socket option exists |
//! | pin a subflow to a modem | [`pinned_tcp_socket`], [`bind_device`] | both `SO_BINDTODEVICE` and a bound source address are needed |
//! | abortive close | [`set_linger_zero`] | close sends RST: the passenger sees the server's reset |
//! | REDIRECT interception | [`original_dst`] | where the passenger meant to connect |
//! | kernel MPTCP baseline | [`mptcp_socket`] | benchmark against the kernel's multipath TCP |
//! | TPROXY on IPv6 | [`set_ipv6_transparent`] | `socket2` 0.5 has only the IPv4 option |
//!
//! Errors keep the kernel's [`io::ErrorKind`] and add what was being done, so an operator can
//! act on the message (which device, which algorithm, which sysctl).
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Duration as StdDuration;

use polycorn_sched::path::TcpInfoSample;
use polycorn_sched::time::{Bandwidth, Duration};
use socket2::{Domain, Protocol, SockRef, Socket, Type};

/// The protocol number of multipath TCP sockets (`IPPROTO_MPTCP`).
pub const IPPROTO_MPTCP: i32 = 262;

/// Longest interface name the kernel accepts, without the trailing NUL (`IFNAMSIZ - 1`).
pub const MAX_IFNAME_BYTES: usize = 15;

/// `tcpi_state` of an established connection (`TCP_ESTABLISHED`).
pub const TCP_STATE_ESTABLISHED: u8 = 1;

// The libc struct must have the kernel's (`include/uapi/linux/tcp.h`) layout for the fields we
// read; the kernel only ever appends, so fixed offsets prove it.
const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(libc::tcp_info, tcpi_snd_mss) == 16);
    assert!(offset_of!(libc::tcp_info, tcpi_rtt) == 68);
    assert!(offset_of!(libc::tcp_info, tcpi_snd_cwnd) == 80);
    assert!(offset_of!(libc::tcp_info, tcpi_total_retrans) == 100);
    assert!(offset_of!(libc::tcp_info, tcpi_bytes_acked) == 120);
    assert!(offset_of!(libc::tcp_info, tcpi_notsent_bytes) == 144);
    assert!(offset_of!(libc::tcp_info, tcpi_min_rtt) == 148);
    assert!(offset_of!(libc::tcp_info, tcpi_delivery_rate) == 160);
    assert!(offset_of!(libc::tcp_info, tcpi_bytes_sent) == 200);
    assert!(offset_of!(libc::tcp_info, tcpi_bytes_retrans) == 208);
};

pub use polycorn_proto::path_policy::probes_only;

/// `tcpi_snd_ssthresh` before any loss (the kernel's `TCP_INFINITE_SSTHRESH`).
pub const SSTHRESH_INFINITE: u32 = 0x7fff_ffff;

/// The fields of the kernel's `struct tcp_info` that polycorn reads, in the kernel's units.
///
/// Fields a (older) kernel does not report read as zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpInfoRaw {
    /// Smoothed RTT, µs (`tcpi_rtt`).
    pub rtt_us: u32,
    /// RTT variance, µs (`tcpi_rttvar`).
    pub rttvar_us: u32,
    /// Minimum RTT seen, µs (`tcpi_min_rtt`); `u32::MAX` or 0 before the first sample.
    pub min_rtt_us: u32,
    /// Congestion window, segments (`tcpi_snd_cwnd`).
    pub snd_cwnd: u32,
    /// Slow-start threshold, segments (`tcpi_snd_ssthresh`; [`SSTHRESH_INFINITE`] or more
    /// until the first loss).
    pub snd_ssthresh: u32,
    /// Sender MSS, bytes (`tcpi_snd_mss`).
    pub snd_mss: u32,
    /// Segments sent and not yet acknowledged (`tcpi_unacked`).
    pub unacked: u32,
    /// Bytes written and not yet sent (`tcpi_notsent_bytes`).
    pub notsent_bytes: u32,
    /// Delivery-rate estimate, bytes per second (`tcpi_delivery_rate`).
    pub delivery_rate: u64,
    /// Consecutive RTO back-offs (`tcpi_backoff`).
    pub backoff: u8,
    /// Bytes acknowledged by the peer (`tcpi_bytes_acked`).
    pub bytes_acked: u64,
    /// Bytes sent, retransmissions included (`tcpi_bytes_sent`).
    pub bytes_sent: u64,
    /// Bytes retransmitted (`tcpi_bytes_retrans`).
    pub bytes_retrans: u64,
    /// Segments retransmitted over the connection's life (`tcpi_total_retrans`).
    pub total_retrans: u32,
    /// Unrecovered RTO timeouts of the current segment (`tcpi_retransmits`).
    pub retransmits: u8,
    /// Congestion-avoidance state (`tcpi_ca_state`: 0 open, 1 disorder, 2 CWR, 3 recovery,
    /// 4 loss).
    pub ca_state: u8,
    /// TCP state (`tcpi_state`, e.g. [`TCP_STATE_ESTABLISHED`]).
    pub state: u8,
}

impl TcpInfoRaw {
    /// Bytes handed to the kernel so far, each once: sent without counting retransmissions
    /// again, plus not yet sent (`tcpi_bytes_sent - tcpi_bytes_retrans + tcpi_notsent_bytes`).
    pub fn written_bytes(&self) -> u64 {
        self.bytes_sent
            .saturating_sub(self.bytes_retrans)
            .saturating_add(u64::from(self.notsent_bytes))
    }

    /// Convert to the scheduler's units.
    ///
    /// `min_rtt` is `None` until the kernel has a sample (it reports 0 or `u32::MAX`).
    pub fn to_sample(&self) -> TcpInfoSample {
        let mss = u64::from(self.snd_mss);
        TcpInfoSample {
            srtt: Duration::from_micros(u64::from(self.rtt_us)),
            rttvar: Duration::from_micros(u64::from(self.rttvar_us)),
            min_rtt: match self.min_rtt_us {
                0 | u32::MAX => None,
                us => Some(Duration::from_micros(u64::from(us))),
            },
            cwnd_bytes: u64::from(self.snd_cwnd) * mss,
            mss_bytes: self.snd_mss,
            unacked_bytes: u64::from(self.unacked) * mss,
            notsent_bytes: u64::from(self.notsent_bytes),
            delivery_rate: Bandwidth::from_bytes_per_sec(self.delivery_rate),
            rto_backoff: u32::from(self.backoff),
            bytes_acked: self.bytes_acked,
            unacked_age: Duration::ZERO,
        }
    }
}

/// Read `TCP_INFO` of a TCP socket.
///
/// A kernel older than the `libc` struct returns fewer bytes; the missing fields read as zero.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<TcpInfoRaw> {
    let mut info = MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is a writable buffer of `len` bytes that outlives the call; the kernel
    // writes at most `len` bytes into it and updates `len`; `fd` is a valid open descriptor
    // for the call's duration (it is borrowed).
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("getsockopt TCP_INFO: {e}"),
        ));
    }
    // SAFETY: `libc::tcp_info` is plain integers, for which all-zero bytes are a valid value;
    // the buffer started zeroed and the kernel overwrote a prefix with integers.
    let i = unsafe { info.assume_init() };
    Ok(TcpInfoRaw {
        rtt_us: i.tcpi_rtt,
        rttvar_us: i.tcpi_rttvar,
        min_rtt_us: i.tcpi_min_rtt,
        snd_cwnd: i.tcpi_snd_cwnd,
        snd_ssthresh: i.tcpi_snd_ssthresh,
        snd_mss: i.tcpi_snd_mss,
        unacked: i.tcpi_unacked,
        notsent_bytes: i.tcpi_notsent_bytes,
        delivery_rate: i.tcpi_delivery_rate,
        backoff: i.tcpi_backoff,
        bytes_acked: i.tcpi_bytes_acked,
        bytes_sent: i.tcpi_bytes_sent,
        bytes_retrans: i.tcpi_bytes_retrans,
        total_retrans: i.tcpi_total_retrans,
        retransmits: i.tcpi_retransmits,
        ca_state: i.tcpi_ca_state,
        state: i.tcpi_state,
    })
}

/// `setsockopt` with a `c_int` value.
fn set_int(fd: BorrowedFd<'_>, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: the value pointer refers to a live `c_int` of the size passed; `fd` is a valid
    // open descriptor for the call's duration.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `getsockopt` of a `c_int` value.
fn get_int(fd: BorrowedFd<'_>, level: i32, name: i32) -> io::Result<i32> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the value pointer refers to a live, writable `c_int` of the size passed in
    // `len`; `fd` is a valid open descriptor for the call's duration.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn context(what: String) -> impl FnOnce(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Set `TCP_NOTSENT_LOWAT`: the socket reports writable only while fewer than `bytes` written
/// bytes are not yet sent, so data waits in the scheduler instead of the kernel queue.
pub fn set_notsent_lowat(fd: BorrowedFd<'_>, bytes: u32) -> io::Result<()> {
    let value = i32::try_from(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("TCP_NOTSENT_LOWAT {bytes} exceeds {}", i32::MAX),
        )
    })?;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, value)
        .map_err(context(format!("set TCP_NOTSENT_LOWAT to {bytes}")))
}

/// Read `TCP_NOTSENT_LOWAT` (the kernel reports `u32::MAX` when unset, meaning unlimited).
pub fn notsent_lowat(fd: BorrowedFd<'_>) -> io::Result<u32> {
    get_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT)
        .map(|v| v as u32)
        .map_err(context("get TCP_NOTSENT_LOWAT".into()))
}

/// `TCP_RTO_MAX_MS` (Linux 6.15+): the socket's upper bound on its retransmission timeout,
/// in ms. The `libc` crate does not have it yet; the value is the kernel's uapi one.
pub const TCP_RTO_MAX_MS: i32 = 44;
/// The range the kernel accepts for `TCP_RTO_MAX_MS` (1 s to its built-in 120 s).
pub const RTO_MAX_RANGE_MS: std::ops::RangeInclusive<u32> = 1_000..=120_000;

/// Set `TCP_RTO_MAX_MS`: however many retransmission timeouts in a row a blackout causes, the
/// socket's timer backs off to at most `ms` (the kernel default is 120 s), so the first
/// retransmission after the path comes back is at most `ms` away.
///
/// The error says when the kernel is too old for the option (before 6.15) or `ms` is outside
/// [`RTO_MAX_RANGE_MS`].
pub fn set_rto_max(fd: BorrowedFd<'_>, ms: u32) -> io::Result<()> {
    if !RTO_MAX_RANGE_MS.contains(&ms) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "TCP_RTO_MAX_MS {ms} ms is outside the kernel's {}..={} ms",
                RTO_MAX_RANGE_MS.start(),
                RTO_MAX_RANGE_MS.end()
            ),
        ));
    }
    set_int(fd, libc::IPPROTO_TCP, TCP_RTO_MAX_MS, ms as i32).map_err(|e| {
        let hint = match e.raw_os_error() {
            Some(libc::ENOPROTOOPT) => format!(
                "this kernel ({}) has no TCP_RTO_MAX_MS; it needs Linux 6.15 or later",
                kernel_release()
            ),
            _ => e.to_string(),
        };
        io::Error::new(e.kind(), format!("set TCP_RTO_MAX_MS to {ms} ms: {hint}"))
    })
}

/// Read `TCP_RTO_MAX_MS` (the kernel's `net.ipv4.tcp_rto_max_ms` unless set on the socket).
pub fn rto_max(fd: BorrowedFd<'_>) -> io::Result<u32> {
    get_int(fd, libc::IPPROTO_TCP, TCP_RTO_MAX_MS)
        .map(|v| v as u32)
        .map_err(context("get TCP_RTO_MAX_MS".into()))
}

/// Whether a TCP socket takes `TCP_RTO_MAX_MS` = `ms` (tried on a throwaway socket). The
/// daemons call it at startup so that an old kernel stops them with the reason instead of
/// failing every subflow later.
pub fn check_rto_max(ms: u32) -> io::Result<()> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    set_rto_max(s.as_fd(), ms)
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| format!("Linux {}", s.trim()))
        .unwrap_or_else(|_| "unknown release".into())
}

/// The algorithms the kernel offers (`net.ipv4.tcp_available_congestion_control`), or a
/// placeholder if that cannot be read.
fn available_congestion() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The system's default congestion control (`net.ipv4.tcp_congestion_control` of this network
/// namespace), or a placeholder if that cannot be read.
pub fn system_congestion() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Set the socket's congestion control (`TCP_CONGESTION`), e.g. `"bbr"`, `"cubic"`, `"reno"`.
///
/// The error names the algorithm and the ones the kernel has.
pub fn set_congestion(fd: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    if name.is_empty() || name.len() >= 16 || name.bytes().any(|b| b == 0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("congestion control name `{name}` must be 1-15 bytes without NUL"),
        ));
    }
    SockRef::from(&fd)
        .set_tcp_congestion(name.as_bytes())
        .map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::ENOENT) => format!(
                    "the kernel has no `{name}` (available: {}; try `modprobe tcp_{name}`)",
                    available_congestion()
                ),
                Some(libc::EPERM) => format!(
                    "`{name}` is not in net.ipv4.tcp_allowed_congestion_control and the process \
                     lacks CAP_NET_ADMIN ({e})"
                ),
                _ => e.to_string(),
            };
            io::Error::new(e.kind(), format!("set congestion control `{name}`: {hint}"))
        })
}

/// Whether this process can give a TCP socket the congestion control `name` (tried on a
/// throwaway socket; loading its kernel module if needed and allowed). The daemons call it
/// at startup so that a missing algorithm stops them with the reason instead of failing every
/// subflow later.
pub fn check_congestion(name: &str) -> io::Result<()> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    set_congestion(s.as_fd(), name)
}

/// Where the kernel keeps `net.ipv4.tcp_slow_start_after_idle` (per network namespace).
pub const SLOW_START_AFTER_IDLE: &str = "/proc/sys/net/ipv4/tcp_slow_start_after_idle";

/// Set `net.ipv4.tcp_slow_start_after_idle` of the calling thread's network namespace; returns
/// the previous value. With 0 a TCP sender keeps its congestion window across idle gaps
/// instead of restarting from the initial window (RFC 5681 §4.1); there is no per-socket
/// option, so the setting covers every TCP socket of the namespace, and it stays after the
/// process exits (like an entry in `sysctl.conf`).
pub fn set_slow_start_after_idle(on: bool) -> io::Result<bool> {
    let what = |e: io::Error| {
        let hint = match e.raw_os_error() {
            Some(libc::EACCES | libc::EPERM | libc::EROFS) => {
                " (needs root or CAP_NET_ADMIN, and /proc/sys writable, in this network namespace)"
            }
            _ => "",
        };
        io::Error::new(e.kind(), format!("{SLOW_START_AFTER_IDLE}: {e}{hint}"))
    };
    let before = std::fs::read_to_string(SLOW_START_AFTER_IDLE).map_err(what)?;
    let before = match before.trim() {
        "0" => false,
        "1" => true,
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{SLOW_START_AFTER_IDLE}: unexpected value `{other}`"),
            ))
        }
    };
    if before != on {
        std::fs::write(SLOW_START_AFTER_IDLE, if on { "1\n" } else { "0\n" }).map_err(what)?;
    }
    Ok(before)
}

/// The socket's congestion control (`TCP_CONGESTION`).
pub fn congestion(fd: BorrowedFd<'_>) -> io::Result<String> {
    let raw = SockRef::from(&fd)
        .tcp_congestion()
        .map_err(context("get TCP_CONGESTION".into()))?;
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    Ok(String::from_utf8_lossy(&raw[..end]).into_owned())
}

fn check_ifname(dev: &str) -> io::Result<()> {
    if dev.is_empty() || dev.len() > MAX_IFNAME_BYTES || dev.bytes().any(|b| b == 0 || b == b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{dev}` is not an interface name (1-{MAX_IFNAME_BYTES} bytes, no NUL or /)"),
        ));
    }
    Ok(())
}

/// Bind the socket to network device `dev` (`SO_BINDTODEVICE`): its packets leave through
/// `dev` whatever the routing table says. Needs CAP_NET_RAW.
pub fn bind_device(sock: &Socket, dev: &str) -> io::Result<()> {
    check_ifname(dev)?;
    sock.bind_device(Some(dev.as_bytes()))
        .map_err(context(format!("bind socket to device `{dev}`")))
}

/// Make `close` abortive: it sends RST and discards unsent data (`SO_LINGER` with timeout 0).
/// The relay uses it to pass a server's reset on to the passenger.
pub fn set_linger_zero(fd: BorrowedFd<'_>) -> io::Result<()> {
    SockRef::from(&fd)
        .set_linger(Some(StdDuration::ZERO))
        .map_err(context("set SO_LINGER 0".into()))
}

/// Where a REDIRECTed (NAT) connection was going: `SO_ORIGINAL_DST` for IPv4 and
/// `IP6T_SO_ORIGINAL_DST` for IPv6 (chosen by the socket's local address; an IPv4-mapped IPv6
/// local address counts as IPv4).
///
/// Needs conntrack; fails with `NotFound` for a connection that was not NATed. TPROXY does not
/// need this: there the accepted socket's `local_addr()` is the original destination.
pub fn original_dst(fd: BorrowedFd<'_>) -> io::Result<SocketAddr> {
    let sock = SockRef::from(&fd);
    let local = sock
        .local_addr()
        .map_err(context("original destination: local address".into()))?;
    let v4 = match local.as_socket() {
        Some(SocketAddr::V4(_)) => true,
        Some(SocketAddr::V6(a)) => a.ip().to_ipv4_mapped().is_some(),
        None => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "original destination: not an IP socket",
            ))
        }
    };
    let (raw, what) = if v4 {
        (sock.original_dst(), "SO_ORIGINAL_DST")
    } else {
        (sock.original_dst_ipv6(), "IP6T_SO_ORIGINAL_DST")
    };
    let addr = raw.map_err(context(format!(
        "getsockopt {what} (was the connection redirected by nftables with conntrack?)"
    )))?;
    addr.as_socket().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{what} returned a non-IP address"),
        )
    })
}

/// Let a socket bind to and accept for non-local IPv6 addresses (`IPV6_TRANSPARENT`), as
/// TPROXY needs. Needs CAP_NET_ADMIN.
pub fn set_ipv6_transparent(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    set_int(
        fd,
        libc::IPPROTO_IPV6,
        libc::IPV6_TRANSPARENT,
        i32::from(on),
    )
    .map_err(context("set IPV6_TRANSPARENT (needs CAP_NET_ADMIN)".into()))
}

/// Is `IPV6_TRANSPARENT` set?
pub fn ipv6_transparent(fd: BorrowedFd<'_>) -> io::Result<bool> {
    get_int(fd, libc::IPPROTO_IPV6, libc::IPV6_TRANSPARENT)
        .map(|v| v != 0)
        .map_err(context("get IPV6_TRANSPARENT".into()))
}

/// A blocking multipath-TCP stream socket (`IPPROTO_MPTCP`) of `domain`, for the kernel-MPTCP
/// baseline. It behaves like a TCP socket; the kernel's path manager adds subflows (the
/// `ip mptcp` endpoints set up for the baseline).
///
/// The error says why the kernel refused: no MPTCP support, or `net.mptcp.enabled=0`.
pub fn mptcp_socket(domain: Domain) -> io::Result<Socket> {
    Socket::new(domain, Type::STREAM, Some(Protocol::MPTCP)).map_err(|e| {
        let enabled = std::fs::read_to_string("/proc/sys/net/mptcp/enabled")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "absent: kernel without CONFIG_MPTCP".into());
        io::Error::new(
            e.kind(),
            format!(
                "the kernel refused an MPTCP socket (IPPROTO_MPTCP={IPPROTO_MPTCP}): {e}; \
                 net.mptcp.enabled is {enabled} (enable with `sysctl -w net.mptcp.enabled=1`)"
            ),
        )
    })
}

/// A nonblocking TCP socket pinned to one path: bound to `device` (`SO_BINDTODEVICE`) and to
/// `source` with port 0, ready for `connect`.
///
/// This is how the relay ties a subflow to a cellular modem. Both are needed: the
/// source address selects the per-path `ip rule from <addr> table N`, the device keeps the
/// socket on that modem even when routes change. Needs CAP_NET_RAW for the device binding.
/// Wrap the result with `tokio::net::TcpSocket::from_std_stream` or connect it with
/// `socket2` and hand it to tokio.
pub fn pinned_tcp_socket(source: IpAddr, device: &str) -> io::Result<Socket> {
    pinned_socket(source, device)
}

/// The addresses a subflow on `device` can take when its path names none: the interface's
/// first IPv4 and first IPv6 address that are not link-local, in that order (IPv4 first), each
/// family at most once; empty when it has neither (a modem not attached); an error when there
/// is no such interface.
pub fn device_addresses(device: &str) -> io::Result<Vec<IpAddr>> {
    check_ifname(device)?;
    if nix::net::if_::if_nametoindex(device).is_err() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface `{device}`"),
        ));
    }
    let (mut v4, mut v6) = (None, None);
    for ifa in nix::ifaddrs::getifaddrs().map_err(io::Error::from)? {
        if ifa.interface_name != device {
            continue;
        }
        let Some(addr) = ifa.address else { continue };
        if let Some(a) = addr.as_sockaddr_in() {
            let ip = a.ip();
            if !ip.is_link_local() && !ip.is_unspecified() && v4.is_none() {
                v4 = Some(IpAddr::V4(ip));
            }
        } else if let Some(a) = addr.as_sockaddr_in6() {
            let ip = a.ip();
            // fe80::/10
            let link_local = (ip.segments()[0] & 0xffc0) == 0xfe80;
            if !link_local && !ip.is_unspecified() && v6.is_none() {
                v6 = Some(IpAddr::V6(ip));
            }
        }
    }
    Ok(v4.into_iter().chain(v6).collect())
}

/// The first of [`device_addresses`]: IPv4 when the interface has one.
pub fn device_address(device: &str) -> io::Result<Option<IpAddr>> {
    Ok(device_addresses(device)?.first().copied())
}

fn pinned_socket(source: IpAddr, device: &str) -> io::Result<Socket> {
    let local = SocketAddr::new(source, 0);
    let sock = Socket::new(
        Domain::for_address(local),
        Type::STREAM,
        Some(Protocol::TCP),
    )
    .map_err(context(format!("create TCP socket for {source}")))?;
    bind_device(&sock, device)?;
    sock.bind(&local.into()).map_err(context(format!(
        "bind TCP socket to {source} on `{device}`"
    )))?;
    sock.set_nonblocking(true)
        .map_err(context("set socket nonblocking".into()))?;
    Ok(sock)
}
