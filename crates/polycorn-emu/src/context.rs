//! Replays a trip's context log to the relay, in step with the emulated links, over gpsd's
//! JSON protocol.
//!
//! A server listens inside the relay namespace (default `127.0.0.1:2947`, gpsd's port). Like
//! gpsd it greets every client with a `VERSION` object and, after `?WATCH={"enable":true,…};`,
//! streams one `TPV` report per context row when the row's time comes (rows are 1 Hz). Each
//! `TPV` is followed by a `POLYCORN` object carrying what gpsd does not: the serving cell and
//! RSRP of every carrier (`null` during a blackout). gpsd clients ignore classes they do not
//! know. Time 0 of the trip is when the server starts, which is when the emulator starts.
//!
//! ```text
//! {"class":"TPV","device":"polycorn-replay","mode":3,"time":"2026-11-21T06:00:01.000Z","lat":39.86,"lon":116.37,"speed":83.3,"track":160.0}
//! {"class":"POLYCORN","time":"2026-11-21T06:00:01.000Z","t_ms":1000,"carriers":[{"path":0,"name":"A","cell":1203000,"rsrp":-85.6},…]}
//! ```

use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use polycorn_link::trip::ContextRow;

use crate::netns::{InNamespace, NetError};

/// gpsd's port.
pub const GPSD_PORT: u16 = 2947;
/// Most clients served at once.
const MAX_CLIENTS: usize = 16;
/// Bytes a client may send before its first `?WATCH` (commands are short).
const MAX_COMMAND_BYTES: usize = 4096;

struct Client {
    stream: TcpStream,
    watching: bool,
    inbox: Vec<u8>,
}

/// A running replay server; stops when the stop flag is set.
#[derive(Debug)]
pub struct ContextServer {
    addr: SocketAddr,
    handle: Option<JoinHandle<()>>,
    /// Set on drop, so dropping never waits for the caller's stop flag.
    done: Arc<AtomicBool>,
}

impl ContextServer {
    /// Listen on `addr` inside namespace `ns` (or the current one if `None`) and replay `rows`
    /// (names of the carriers in `names`) from now on, until `stop` is set.
    pub fn start(
        ns: Option<&str>,
        addr: SocketAddr,
        rows: Vec<ContextRow>,
        names: Vec<String>,
        stop: Arc<AtomicBool>,
    ) -> Result<ContextServer, NetError> {
        let io = |what: &str, source: std::io::Error| NetError::Io {
            what: what.into(),
            source,
        };
        let listener = {
            let _inside = ns.map(InNamespace::enter).transpose()?;
            TcpListener::bind(addr).map_err(|e| io(&format!("bind context server on {addr}"), e))?
        };
        listener
            .set_nonblocking(true)
            .map_err(|e| io("set context listener non-blocking", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| io("context listener address", e))?;
        let start = Instant::now();
        let wall_start = SystemTime::now();
        let done = Arc::new(AtomicBool::new(false));
        let done2 = done.clone();
        let handle =
            thread::spawn(move || serve(listener, rows, names, start, wall_start, stop, done2));
        Ok(ContextServer {
            addr,
            handle: Some(handle),
            done,
        })
    }

    /// The address it listens on (inside its namespace).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for ContextServer {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn serve(
    listener: TcpListener,
    rows: Vec<ContextRow>,
    names: Vec<String>,
    start: Instant,
    wall_start: SystemTime,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
) {
    let mut clients: Vec<Client> = Vec::new();
    let mut next_row = 0usize;
    let version = "{\"class\":\"VERSION\",\"release\":\"polycorn-replay\",\"rev\":\"1\",\"proto_major\":3,\"proto_minor\":14}\n";
    while !stop.load(Ordering::Relaxed) && !done.load(Ordering::Relaxed) {
        while let Ok((stream, _)) = listener.accept() {
            if clients.len() >= MAX_CLIENTS || stream.set_nonblocking(true).is_err() {
                continue;
            }
            let mut c = Client {
                stream,
                watching: false,
                inbox: Vec::new(),
            };
            if c.stream.write_all(version.as_bytes()).is_ok() {
                clients.push(c);
            }
        }
        for c in clients.iter_mut() {
            let mut buf = [0u8; 512];
            loop {
                match c.stream.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => c.inbox.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => break,
                }
            }
            let text = String::from_utf8_lossy(&c.inbox).to_string();
            if !c.watching && text.contains("?WATCH") && text.contains("\"enable\":true") {
                c.watching = true;
                let mut reply = String::from("{\"class\":\"DEVICES\",\"devices\":[{\"class\":\"DEVICE\",\"path\":\"polycorn-replay\",\"driver\":\"polycorn\"}]}\n{\"class\":\"WATCH\",\"enable\":true,\"json\":true}\n");
                // A new watcher gets the current fix at once, not up to a second later.
                if next_row > 0 {
                    reply.push_str(&render(&rows[next_row - 1], &names, wall_start));
                }
                let _ = c.stream.write_all(reply.as_bytes());
            }
            if c.inbox.len() > MAX_COMMAND_BYTES {
                c.inbox.clear();
            }
        }
        let elapsed_ms = start.elapsed().as_millis() as u64;
        let mut out = String::new();
        while next_row < rows.len() && rows[next_row].t_ms <= elapsed_ms {
            out.push_str(&render(&rows[next_row], &names, wall_start));
            next_row += 1;
        }
        if !out.is_empty() {
            // A client that cannot take a report (gone, or not reading) is dropped.
            clients.retain_mut(|c| !c.watching || c.stream.write_all(out.as_bytes()).is_ok());
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The TPV and POLYCORN lines of one context row.
pub fn render(row: &ContextRow, names: &[String], wall_start: SystemTime) -> String {
    let time = iso8601(wall_start + Duration::from_millis(row.t_ms));
    let mut s = format!(
        "{{\"class\":\"TPV\",\"device\":\"polycorn-replay\",\"mode\":3,\"time\":\"{time}\",\"lat\":{:.7},\"lon\":{:.7},\"speed\":{:.2},\"track\":{:.1}}}\n",
        row.lat, row.lon, row.speed_mps, row.heading_deg
    );
    let _ = write!(
        s,
        "{{\"class\":\"POLYCORN\",\"time\":\"{time}\",\"t_ms\":{},\"carriers\":[",
        row.t_ms
    );
    for (i, c) in row.carriers.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let name = names.get(i).map_or("", String::as_str);
        let cell = c.cell.map_or_else(|| "null".to_string(), |v| v.to_string());
        let rsrp = c
            .rsrp_dbm
            .map_or_else(|| "null".to_string(), |v| format!("{v:.1}"));
        let _ = write!(
            s,
            "{{\"path\":{i},\"name\":\"{name}\",\"cell\":{cell},\"rsrp\":{rsrp}}}"
        );
    }
    s.push_str("]}\n");
    s
}

/// UTC time as gpsd writes it (`2026-11-21T06:00:01.000Z`); a time past year 9999 is
/// written as the last millisecond of 9999.
fn iso8601(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (t, ms) = i64::try_from(d.as_secs())
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .map_or((time::PrimitiveDateTime::MAX.assume_utc(), 999), |t| {
            (t, d.subsec_millis())
        });
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_matches_known_dates() {
        assert_eq!(iso8601(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            iso8601(UNIX_EPOCH + Duration::from_millis(1_795_219_200_250)),
            "2026-11-21T00:00:00.250Z"
        );
        assert_eq!(
            iso8601(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
    }
}
