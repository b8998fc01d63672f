//! `[context] cells = "at"`: the AT poller against a Quectel-like responder on a real pty
//! (echo, unsolicited codes and garbage between the answers), through a handover and a lost
//! registration.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use polycorn_net::modem::at_port::{poll, AtPort};
use polycorn_net::modem::mm::Update;
use polycorn_net::modem::Tech;
use tokio::sync::mpsc;

/// What the responder's modem is on: (cell id, registered).
type State = Arc<Mutex<(u64, bool)>>;

fn answer(cmd: &str, state: &State) -> String {
    let (cell, registered) = *state.lock().unwrap();
    let body = match cmd {
        "AT+CGMI" => "Quectel\r\n".to_string(),
        "AT+QENG=\"servingcell\"" if registered => format!(
            "+QENG: \"servingcell\",\"NOCONN\",\"LTE\",\"FDD\",262,01,{cell:X},123,1300,3,5,5,7D,-95,-11,-65,12,5,-,40\r\n"
        ),
        "AT+QENG=\"servingcell\"" => "+QENG: \"servingcell\",\"SEARCH\"\r\n".to_string(),
        "AT+CEREG?" => format!("+CEREG: 0,{}\r\n", if registered { 1 } else { 2 }),
        "AT+CGACT?" => "+CGACT: 1,1\r\n".to_string(),
        _ => return "\r\nERROR\r\n".into(),
    };
    // Echo, an unsolicited code and some noise before the answer.
    format!("{cmd}\r\r\nRING\r\n\u{7f}\u{1}junk\r\n{body}\r\nOK\r\n")
}

fn respond(mut master: File, state: State) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 256];
    loop {
        let n = match master.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        while let Some(i) = buf.iter().position(|&b| b == b'\r') {
            let cmd: Vec<u8> = buf.drain(..=i).collect();
            let cmd = String::from_utf8_lossy(&cmd[..cmd.len() - 1])
                .trim()
                .to_string();
            if master.write_all(answer(&cmd, &state).as_bytes()).is_err() {
                return;
            }
        }
    }
}

#[test]
fn polls_a_quectel_through_handover_and_lost_registration() {
    let pty = nix::pty::openpty(
        None::<&nix::pty::Winsize>,
        None::<&nix::sys::termios::Termios>,
    )
    .unwrap();
    let slave_path =
        std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd())).unwrap();
    let state: State = Arc::new(Mutex::new((0x1A2B3C4, true)));
    let master = File::from(pty.master);
    let responder_state = state.clone();
    std::thread::spawn(move || respond(master, responder_state));

    let (tx, mut rx) = mpsc::channel(16);
    let at = AtPort {
        path: 1,
        name: "B".into(),
        port: slave_path,
    };
    let poller = std::thread::spawn(move || poll(at, Duration::from_millis(100), tx));
    let mut next = |what: &str, want: &dyn Fn(&polycorn_net::modem::Radio) -> bool| {
        for _ in 0..200 {
            match rx.blocking_recv() {
                Some(Update::Radio(r)) if want(&r) => return r,
                Some(_) => {}
                None => panic!("the poller stopped"),
            }
        }
        panic!("never saw {what}");
    };
    let r = next("the first cell", &|r| r.cell().is_some());
    assert_eq!(r.path, 1);
    assert_eq!(r.cell(), Some(0x1A2B3C4));
    assert_eq!(r.tech, Some(Tech::Lte));
    assert_eq!(r.pci, Some(123));
    assert_eq!(r.signal.rsrp_dbm, Some(-95.0));
    assert_eq!(r.report().rsrp_dbm, Some(-95.0));

    state.lock().unwrap().0 = 0x1A2B3C5;
    next("the handover", &|r| r.cell() == Some(0x1A2B3C5));
    state.lock().unwrap().1 = false;
    let lost = next("the loss", &|r| !r.registered);
    assert_eq!(lost.report().cell, None);
    state.lock().unwrap().1 = true;
    next("the cell again", &|r| r.cell() == Some(0x1A2B3C5));

    drop(rx);
    poller.join().unwrap();
    drop(pty.slave);
}
