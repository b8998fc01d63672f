//! The serial side of `[context] cells = "at"`: one thread per path polls its modem's AT port
//! (raw termios, 115200 baud) and sends a [`Radio`] per poll. Lines are parsed by [`super::at`].
//!
//! On open the module is identified (`AT+CGMI`) to pick its family's serving-cell command; a
//! command not answered within [`COMMAND_TIMEOUT`] is abandoned; a port that cannot be opened,
//! or on which no command is answered, is reopened at the next poll, the path reported without
//! a modem meanwhile.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::termios;
use tokio::sync::mpsc;

use super::at::{final_code, AtFamily, AtReading, Final, MAX_AT_LINE};
use super::mm::Update;
use super::Radio;

/// Longest wait for one command's final result code.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(3);

/// One path's AT port.
#[derive(Clone, Debug)]
pub struct AtPort {
    /// Path index.
    pub path: u8,
    /// Path name (logs).
    pub name: String,
    /// The serial device (`/dev/ttyUSB2`).
    pub port: PathBuf,
}

/// An open port and the bytes read past the last line.
struct Port {
    file: File,
    pending: Vec<u8>,
}

/// Opens `path` raw: 115200 8N1, no echo, reads that return after 0.1 s without data.
fn open(path: &Path) -> std::io::Result<Port> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(path)?;
    let mut t = termios::tcgetattr(&file)?;
    termios::cfmakeraw(&mut t);
    termios::cfsetspeed(&mut t, termios::BaudRate::B115200)?;
    t.control_chars[termios::SpecialCharacterIndices::VMIN as usize] = 0;
    t.control_chars[termios::SpecialCharacterIndices::VTIME as usize] = 1;
    termios::tcsetattr(&file, termios::SetArg::TCSANOW, &t)?;
    Ok(Port {
        file,
        pending: Vec::new(),
    })
}

impl Port {
    /// The next line, or None when `deadline` passes first. Overlong lines are cut.
    fn line(&mut self, deadline: Instant) -> std::io::Result<Option<String>> {
        loop {
            if let Some(i) = self.pending.iter().position(|&b| b == b'\r' || b == b'\n') {
                let raw: Vec<u8> = self.pending.drain(..=i).collect();
                let text = String::from_utf8_lossy(&raw[..raw.len() - 1])
                    .trim()
                    .to_string();
                if text.is_empty() {
                    continue;
                }
                return Ok(Some(text));
            }
            if self.pending.len() > MAX_AT_LINE {
                self.pending.clear();
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            let mut buf = [0u8; 256];
            match self.file.read(&mut buf) {
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends `cmd` and feeds every line until its final result code to `reading` (and to
    /// `seen`). Returns the final code, or None on a timeout.
    fn command(
        &mut self,
        cmd: &str,
        reading: &mut AtReading,
        mut seen: impl FnMut(&str),
    ) -> std::io::Result<Option<Final>> {
        self.file.write_all(format!("{cmd}\r").as_bytes())?;
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        while let Some(line) = self.line(deadline)? {
            if let Some(f) = final_code(&line) {
                return Ok(Some(f));
            }
            // The command's echo is not an answer.
            if line.eq_ignore_ascii_case(cmd) {
                continue;
            }
            seen(&line);
            reading.feed(&line);
        }
        Ok(None)
    }
}

/// Which family the module is, from `AT+CGMI` (Generic when unknown). Every line of the
/// answer counts (an unsolicited code may come first).
fn identify(port: &mut Port) -> std::io::Result<Option<AtFamily>> {
    let mut manufacturer = String::new();
    let mut scratch = AtReading::default();
    let f = port.command("AT+CGMI", &mut scratch, |l| {
        if manufacturer.len() < 1024 {
            manufacturer.push_str(l);
            manufacturer.push(' ');
        }
    })?;
    Ok(f.map(|_| AtFamily::from_manufacturer(&manufacturer).unwrap_or(AtFamily::Generic)))
}

/// Polls `at` every `rate` until `tx` is closed (run it on its own thread).
pub fn poll(at: AtPort, rate: Duration, tx: mpsc::Sender<Update>) {
    let mut port: Option<(Port, AtFamily)> = None;
    let mut problem: Option<String> = None;
    let port_name = at.port.display().to_string();
    while !tx.is_closed() {
        let started = Instant::now();
        if port.is_none() {
            match open(&at.port).and_then(|mut p| identify(&mut p).map(|f| (p, f))) {
                Ok((p, Some(family))) => {
                    tracing::info!(path = %at.name, port = %port_name, ?family, "AT port open");
                    problem = None;
                    port = Some((p, family));
                }
                Ok((_, None)) => {
                    let text = format!("path {:?}: {port_name}: no answer to AT+CGMI", at.name);
                    if problem.as_deref() != Some(text.as_str()) {
                        tracing::error!("context.cells = \"at\": {text}");
                        problem = Some(text);
                    }
                }
                Err(e) => {
                    let text = format!("path {:?}: {port_name}: {e}", at.name);
                    if problem.as_deref() != Some(text.as_str()) {
                        tracing::error!("context.cells = \"at\": {text}");
                        problem = Some(text);
                    }
                }
            }
        }
        let radio = match port.as_mut() {
            None => Radio::absent(at.path),
            Some((p, family)) => {
                let mut reading = AtReading::default();
                let mut answered = 0;
                let mut failed = None;
                for cmd in family.commands() {
                    match p.command(cmd, &mut reading, |_| {}) {
                        Ok(Some(_)) => answered += 1,
                        Ok(None) => {}
                        Err(e) => {
                            failed = Some(e.to_string());
                            break;
                        }
                    }
                }
                if answered == 0 || failed.is_some() {
                    tracing::warn!(path = %at.name, port = %port_name, "AT port not answering ({}); reopening", failed.unwrap_or_else(|| "timeouts".into()));
                    port = None;
                    Radio::absent(at.path)
                } else {
                    reading.radio(at.path, &port_name)
                }
            }
        };
        if tx.blocking_send(Update::Radio(radio)).is_err() {
            return;
        }
        std::thread::sleep(rate.saturating_sub(started.elapsed()));
    }
}

/// The relay's context with cells from AT ports: a polling thread per path, joined with the
/// positions of `fixes` into `out` as [`super::mm::run`] does. Ends when `out` is closed.
pub async fn run(
    ports: Vec<AtPort>,
    rate: Duration,
    fixes: mpsc::Receiver<crate::context::ContextFix>,
    out: mpsc::Sender<crate::context::ContextFix>,
    on_radio: impl FnMut(&Radio) + Send + 'static,
) {
    let (tx, rx) = mpsc::channel(64);
    let paths = ports.len();
    for p in ports {
        let tx = tx.clone();
        let name = format!("at-{}", p.name);
        if let Err(e) = std::thread::Builder::new()
            .name(name)
            .spawn(move || poll(p, rate, tx))
        {
            tracing::error!("context.cells = \"at\": cannot start a polling thread: {e}");
        }
    }
    drop(tx);
    super::mm::join(paths, Some(fixes), rx, out, on_radio).await;
}
