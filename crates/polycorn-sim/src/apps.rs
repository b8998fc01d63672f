//! The applications at both ends of a ride: the passengers behind the relay (bulk downloads
//! and uploads, IM users) and the servers behind the proxy (a bulk server that sends the size
//! a 16-byte request names, an IM echo answering 4 bytes per 100-byte message, an upload sink
//! answering one byte once it has every byte), speaking through the production sessions with
//! the same bytes as `polycorn bench`'s workload. The passengers' and servers' own links are
//! not modelled: they reach relay and proxy at once.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use polycorn_proto::{Destination, Event, OpenStatus, ReadOutcome, Session};
use polycorn_sched::time::Instant;

use crate::workload::{ImAnswer, TransferResult, Workload, IM_DOWN_BYTES, IM_UP_BYTES};

/// The bulk server's port.
const BULK_PORT: u16 = 9000;
/// The IM server's port.
const IM_PORT: u16 = 9001;
/// The upload server's port.
const UPLOAD_PORT: u16 = 9002;
/// The upload server's answer once every byte arrived.
const UPLOAD_OK: u8 = 1;
/// Largest piece handed to a session at once.
const CHUNK: usize = 64 * 1024;

fn server(port: u16) -> Destination {
    Destination::Addr(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(10, 0, 2, 2)),
        port,
    ))
}

/// The bulk passenger's address.
fn bulk_user() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2))
}

/// IM user `u`'s address.
fn im_user(u: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 1, 100u8.wrapping_add(u as u8)))
}

/// What one end still has to write on a flow: queued bytes, then `zeros` zero bytes, then
/// (if `fin`) the end of the stream.
#[derive(Debug, Default)]
struct Outbox {
    bytes: Vec<u8>,
    zeros: u64,
    fin: bool,
    fin_sent: bool,
}

impl Outbox {
    /// Hand the session as much as it takes.
    fn flush(&mut self, s: &mut Session, now: Instant, flow: u64) {
        static ZEROS: [u8; CHUNK] = [0; CHUNK];
        while !self.bytes.is_empty() {
            match s.send(now, flow, &self.bytes) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    self.bytes.drain(..n);
                }
            }
        }
        while self.zeros > 0 {
            let n = (self.zeros as usize).min(CHUNK);
            match s.send(now, flow, &ZEROS[..n]) {
                Ok(0) | Err(_) => return,
                Ok(k) => self.zeros -= k as u64,
            }
        }
        if self.fin && !self.fin_sent {
            self.fin_sent = s.send_fin(now, flow).is_ok();
        }
    }
}

/// Read everything `flow` has now; returns (bytes, whether the stream ended).
fn drain(s: &mut Session, now: Instant, flow: u64, buf: &mut Vec<u8>) -> (usize, bool) {
    let mut tmp = [0u8; CHUNK];
    let mut total = 0;
    loop {
        match s.read(now, flow, &mut tmp) {
            ReadOutcome::Data(n) => {
                buf.extend_from_slice(&tmp[..n]);
                total += n;
            }
            ReadOutcome::WouldBlock => return (total, false),
            ReadOutcome::Eof => return (total, true),
        }
    }
}

/// What a passenger's flow is.
#[derive(Debug)]
enum Role {
    Download(usize),
    Upload(usize),
    Im {
        seg: usize,
        user: usize,
        answered: usize,
        partial: Vec<u8>,
    },
}

#[derive(Debug)]
struct PFlow {
    role: Role,
    out: Outbox,
}

/// The passengers behind the relay and everything they measured.
#[derive(Debug)]
pub struct Passengers {
    flows: BTreeMap<u64, PFlow>,
    /// (segment, user) → the flow of that IM user.
    im_flows: BTreeMap<(usize, usize), u64>,
    /// Downloads as measured.
    pub downloads: Vec<TransferResult>,
    /// Uploads as measured (arrivals at the server).
    pub uploads: Vec<TransferResult>,
    /// IM messages, by segment, user and index.
    pub im: Vec<Vec<Vec<ImAnswer>>>,
}

impl Passengers {
    /// Passengers of `w`, nothing started.
    pub fn new(w: &Workload) -> Self {
        Passengers {
            flows: BTreeMap::new(),
            im_flows: BTreeMap::new(),
            downloads: w.downloads.iter().map(TransferResult::new).collect(),
            uploads: w.uploads.iter().map(TransferResult::new).collect(),
            im: w
                .im
                .iter()
                .map(|seg| {
                    seg.sends_us
                        .iter()
                        .enumerate()
                        .map(|(user, sends)| {
                            sends
                                .iter()
                                .enumerate()
                                .map(|(msg, t)| ImAnswer {
                                    users: seg.users,
                                    user,
                                    msg,
                                    send_us: seg.start_us + t,
                                    delivery_us: None,
                                })
                                .collect()
                        })
                        .collect()
                })
                .collect(),
        }
    }

    fn open(
        &mut self,
        s: &mut Session,
        now: Instant,
        user: IpAddr,
        port: u16,
        p: PFlow,
    ) -> Option<u64> {
        match s.open_flow(now, user, server(port)) {
            Ok(flow) => {
                let mut p = p;
                p.out.flush(s, now, flow);
                self.flows.insert(flow, p);
                Some(flow)
            }
            Err(_) => None,
        }
    }

    /// The download `flow` carries, if it is one.
    pub fn download_of(&self, flow: u64) -> Option<usize> {
        match self.flows.get(&flow)?.role {
            Role::Download(i) => Some(i),
            _ => None,
        }
    }

    /// Download `i` starts.
    pub fn start_download(&mut self, s: &mut Session, now: Instant, i: usize) {
        let mut hdr = self.downloads[i].size.to_be_bytes().to_vec();
        hdr.extend_from_slice(&[0; 8]);
        let p = PFlow {
            role: Role::Download(i),
            out: Outbox {
                bytes: hdr,
                ..Outbox::default()
            },
        };
        if self.open(s, now, bulk_user(), BULK_PORT, p).is_none() {
            self.downloads[i].fail("the relay refused the flow");
        }
    }

    /// Upload `i` starts.
    pub fn start_upload(&mut self, s: &mut Session, now: Instant, i: usize) {
        let size = self.uploads[i].size;
        let mut hdr = size.to_be_bytes().to_vec();
        hdr.extend_from_slice(&(i as u64).to_be_bytes());
        let p = PFlow {
            role: Role::Upload(i),
            out: Outbox {
                bytes: hdr,
                zeros: size,
                ..Outbox::default()
            },
        };
        if self.open(s, now, bulk_user(), UPLOAD_PORT, p).is_none() {
            self.uploads[i].fail("the relay refused the flow");
        }
    }

    /// IM user `user` of segment `seg` connects.
    pub fn start_im(&mut self, s: &mut Session, now: Instant, seg: usize, user: usize) {
        let p = PFlow {
            role: Role::Im {
                seg,
                user,
                answered: 0,
                partial: Vec::new(),
            },
            out: Outbox::default(),
        };
        if let Some(flow) = self.open(s, now, im_user(user), IM_PORT, p) {
            self.im_flows.insert((seg, user), flow);
        }
    }

    /// IM user `user` of segment `seg` sends message `msg`.
    pub fn im_send(&mut self, s: &mut Session, now: Instant, seg: usize, user: usize, msg: usize) {
        let Some(&flow) = self.im_flows.get(&(seg, user)) else {
            return;
        };
        let Some(f) = self.flows.get_mut(&flow) else {
            return;
        };
        let mut m = [0u8; IM_UP_BYTES];
        m[..4].copy_from_slice(&(msg as u32).to_be_bytes());
        m[4] = user as u8;
        f.out.bytes.extend_from_slice(&m);
        f.out.flush(s, now, flow);
    }

    /// IM user `user` of segment `seg` hangs up at its deadline.
    pub fn end_im(&mut self, s: &mut Session, now: Instant, seg: usize, user: usize) {
        let Some(flow) = self.im_flows.remove(&(seg, user)) else {
            return;
        };
        if let Some(f) = self.flows.get_mut(&flow) {
            f.out.fin = true;
            f.out.flush(s, now, flow);
        }
    }

    /// Act on an event of the relay's session.
    pub fn on_event(&mut self, s: &mut Session, now: Instant, ev: &Event, buf: &mut Vec<u8>) {
        let now_us = now.as_micros();
        match *ev {
            Event::Readable(flow) => {
                let Some(f) = self.flows.get_mut(&flow) else {
                    return;
                };
                buf.clear();
                let (n, eof) = drain(s, now, flow, buf);
                match &mut f.role {
                    Role::Download(i) => {
                        let r = &mut self.downloads[*i];
                        r.arrived(now_us, n as u64);
                        if eof {
                            if r.bytes() == r.size {
                                r.done_us.get_or_insert(now_us - r.start_us);
                            } else {
                                r.fail(format!(
                                    "stream ended after {} of {} bytes",
                                    r.bytes(),
                                    r.size
                                ));
                            }
                            f.out.fin = true;
                            f.out.flush(s, now, flow);
                        }
                    }
                    Role::Upload(i) => {
                        if n > 0 && buf[0] != UPLOAD_OK {
                            self.uploads[*i].fail("the upload server did not confirm the upload");
                        }
                        if eof {
                            f.out.fin = true;
                            f.out.flush(s, now, flow);
                        }
                    }
                    Role::Im {
                        seg,
                        user,
                        answered,
                        partial,
                    } => {
                        partial.extend_from_slice(buf);
                        let msgs = &mut self.im[*seg][*user];
                        while partial.len() >= IM_DOWN_BYTES {
                            let k = u32::from_be_bytes([
                                partial[0], partial[1], partial[2], partial[3],
                            ]) as usize;
                            partial.drain(..IM_DOWN_BYTES);
                            if k != *answered || k >= msgs.len() {
                                break;
                            }
                            msgs[k].delivery_us = Some(now_us.saturating_sub(msgs[k].send_us));
                            *answered += 1;
                        }
                    }
                }
            }
            Event::Writable(flow) => {
                if let Some(f) = self.flows.get_mut(&flow) {
                    f.out.flush(s, now, flow);
                }
            }
            Event::FlowOpened { flow, status } if status != OpenStatus::Ok => {
                self.fail(flow, format!("the proxy refused the flow: {status:?}"));
            }
            Event::FlowReset { flow, reason } => self.fail(flow, format!("reset: {reason:?}")),
            Event::FlowClosed(flow) => {
                self.flows.remove(&flow);
            }
            _ => {}
        }
    }

    fn fail(&mut self, flow: u64, why: String) {
        let Some(f) = self.flows.remove(&flow) else {
            return;
        };
        match f.role {
            Role::Download(i) => self.downloads[i].fail(why),
            Role::Upload(i) => self.uploads[i].fail(why),
            Role::Im { .. } => {}
        }
    }
}

/// What a server's flow is.
#[derive(Debug)]
enum Service {
    Bulk { hdr: Vec<u8> },
    Im { partial: Vec<u8> },
    Upload { hdr: Vec<u8>, got: u64 },
}

#[derive(Debug)]
struct SFlow {
    service: Service,
    out: Outbox,
}

/// The servers behind the proxy.
#[derive(Debug, Default)]
pub struct Servers {
    flows: BTreeMap<u64, SFlow>,
}

impl Servers {
    /// Act on an event of the proxy's session; uploads' arrivals go to `uploads`.
    pub fn on_event(
        &mut self,
        s: &mut Session,
        now: Instant,
        ev: &Event,
        buf: &mut Vec<u8>,
        uploads: &mut [TransferResult],
    ) {
        match ev {
            Event::FlowRequested { flow, dst, .. } => {
                let port = match dst {
                    Destination::Addr(a) => a.port(),
                    Destination::Name(_, p) => *p,
                };
                let service = match port {
                    BULK_PORT => Service::Bulk { hdr: Vec::new() },
                    IM_PORT => Service::Im {
                        partial: Vec::new(),
                    },
                    UPLOAD_PORT => Service::Upload {
                        hdr: Vec::new(),
                        got: 0,
                    },
                    _ => {
                        let _ = s.refuse_flow(now, *flow, OpenStatus::Refused);
                        return;
                    }
                };
                if s.accept_flow(now, *flow).is_ok() {
                    self.flows.insert(
                        *flow,
                        SFlow {
                            service,
                            out: Outbox::default(),
                        },
                    );
                }
            }
            Event::Readable(flow) => {
                let flow = *flow;
                let Some(f) = self.flows.get_mut(&flow) else {
                    return;
                };
                buf.clear();
                let (_, eof) = drain(s, now, flow, buf);
                let mut data = &buf[..];
                match &mut f.service {
                    Service::Bulk { hdr } => {
                        let take = (16 - hdr.len()).min(data.len());
                        hdr.extend_from_slice(&data[..take]);
                        if hdr.len() == 16 && take > 0 {
                            f.out.zeros = u64::from_be_bytes(hdr[..8].try_into().expect("8 bytes"));
                            f.out.fin = true;
                        }
                    }
                    Service::Im { partial } => {
                        partial.extend_from_slice(data);
                        while partial.len() >= IM_UP_BYTES {
                            f.out.bytes.extend_from_slice(&partial[..IM_DOWN_BYTES]);
                            partial.drain(..IM_UP_BYTES);
                        }
                        if eof {
                            f.out.fin = true;
                        }
                    }
                    Service::Upload { hdr, got } => {
                        let take = (16 - hdr.len()).min(data.len());
                        hdr.extend_from_slice(&data[..take]);
                        data = &data[take..];
                        if hdr.len() == 16 {
                            let size = u64::from_be_bytes(hdr[..8].try_into().expect("8 bytes"));
                            let token = u64::from_be_bytes(hdr[8..].try_into().expect("8 bytes"));
                            let before = *got;
                            *got += data.len() as u64;
                            if let Some(r) = uploads.get_mut(token as usize) {
                                r.arrived(now.as_micros(), data.len() as u64);
                                if before < size && *got >= size {
                                    r.done_us.get_or_insert(now.as_micros() - r.start_us);
                                    f.out.bytes.push(UPLOAD_OK);
                                    f.out.fin = true;
                                }
                            }
                        }
                    }
                }
                f.out.flush(s, now, flow);
            }
            Event::Writable(flow) => {
                if let Some(f) = self.flows.get_mut(flow) {
                    f.out.flush(s, now, *flow);
                }
            }
            Event::FlowReset { flow, .. } | Event::FlowClosed(flow) => {
                self.flows.remove(flow);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use polycorn_proto::{decode, Role, SessionConfig};
    use polycorn_sched::path::TcpInfoSample;
    use polycorn_sched::predict::NoPrediction;
    use polycorn_sched::time::{Bandwidth, Duration};

    use super::*;
    use crate::workload::{ImSegment, Transfer};

    /// Everything `from` sends on path 0, into `to`; true if any frame went.
    fn carry(from: &mut Session, to: &mut Session, wide: &TcpInfoSample, now: Instant) -> bool {
        from.on_tcp_info(now, 0, wide).unwrap();
        from.poll_transmit(now, &NoPrediction);
        let mut out = Vec::new();
        from.take_output(0, &mut out);
        let mut used = 0;
        while let Some((f, k)) = decode(&out[used..]).unwrap() {
            to.on_frame(now, 0, f).unwrap();
            used += k;
        }
        used > 0
    }

    /// Relay and proxy sessions joined directly (one path, every frame delivered at once).
    fn pump(
        relay: &mut Session,
        proxy: &mut Session,
        ps: &mut Passengers,
        sv: &mut Servers,
        now: Instant,
    ) {
        let wide = TcpInfoSample {
            srtt: Duration::from_millis(10),
            rttvar: Duration::from_millis(1),
            min_rtt: Some(Duration::from_millis(10)),
            cwnd_bytes: 1 << 24,
            mss_bytes: 1448,
            unacked_bytes: 0,
            notsent_bytes: 0,
            delivery_rate: Bandwidth::from_bytes_per_sec(100 << 20),
            rto_backoff: 0,
            bytes_acked: 0,
            unacked_age: Duration::ZERO,
        };
        let mut buf = Vec::new();
        for _ in 0..1000 {
            let mut moved = false;
            moved |= carry(relay, proxy, &wide, now);
            moved |= carry(proxy, relay, &wide, now);
            while let Some(ev) = relay.poll_event() {
                moved = true;
                ps.on_event(relay, now, &ev, &mut buf);
            }
            while let Some(ev) = proxy.poll_event() {
                moved = true;
                sv.on_event(proxy, now, &ev, &mut buf, &mut ps.uploads);
            }
            if !moved {
                return;
            }
        }
        panic!("the sessions never settled");
    }

    #[test]
    fn passengers_and_servers_complete_downloads_uploads_and_im() {
        let w = Workload {
            downloads: vec![Transfer {
                idx: 0,
                start_us: 0,
                size: 300_000,
            }],
            download_timeout_us: 1,
            uploads: vec![Transfer {
                idx: 0,
                start_us: 0,
                size: 200_000,
            }],
            upload_timeout_us: 1,
            im: vec![ImSegment {
                users: 2,
                start_us: 0,
                sends_us: vec![vec![0, 1], vec![0]],
                deadline_us: 10,
            }],
        };
        let mut relay = Session::new(SessionConfig::new(Role::Relay, 1, "minrtt")).unwrap();
        let mut proxy = Session::new(SessionConfig::new(Role::Proxy, 1, "minrtt")).unwrap();
        relay.attach_path(Instant::ZERO, 0).unwrap();
        proxy.attach_path(Instant::ZERO, 0).unwrap();
        let (mut ps, mut sv) = (Passengers::new(&w), Servers::default());
        let t = Instant::from_millis(5);
        ps.start_download(&mut relay, t, 0);
        ps.start_upload(&mut relay, t, 0);
        ps.start_im(&mut relay, t, 0, 0);
        ps.start_im(&mut relay, t, 0, 1);
        for (u, m) in [(0, 0), (1, 0), (0, 1)] {
            ps.im_send(&mut relay, t, 0, u, m);
        }
        pump(&mut relay, &mut proxy, &mut ps, &mut sv, t);
        let d = &ps.downloads[0];
        assert_eq!(
            (d.bytes(), d.done_us, &d.error),
            (300_000, Some(5_000), &None)
        );
        let u = &ps.uploads[0];
        assert_eq!(
            (u.bytes(), u.done_us, &u.error),
            (200_000, Some(5_000), &None)
        );
        let answered: Vec<_> = ps
            .im
            .iter()
            .flatten()
            .flatten()
            .map(|m| m.delivery_us)
            .collect();
        assert_eq!(answered.len(), 3);
        assert!(answered.iter().all(Option::is_some), "{answered:?}");
    }
}
