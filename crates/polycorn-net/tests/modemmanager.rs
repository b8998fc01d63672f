//! `[context] cells = "modemmanager"` against a real `dbus-daemon` (a private bus this test
//! starts) with python-dbusmock playing ModemManager:
//! two modems matched to their paths, a handover, a signal fade, a bearer drop, and a modem
//! that vanishes and comes back under a new object path, all without restarting the client.
//!
//! The bus and the mock are `polycorn_net::modem::mock`'s. Needs `dbus-daemon` and python3
//! with `dbusmock` (apt `dbus`, `python3-dbusmock`): integration tier.

use std::time::Duration;

use polycorn_net::context::{CellReport, ContextFix};
use polycorn_net::modem::mm::{self, MmOptions};
use polycorn_net::modem::mock::{MockControl, MockModemManager};
use polycorn_net::modem::{MatchError, ModemPath, Radio, SIGNAL_IFACE};
use tokio::sync::mpsc;

async fn start() -> (MockModemManager, MockControl) {
    let bus = MockModemManager::start().unwrap();
    let control = bus.control().await.unwrap();
    (bus, control)
}

async fn signal_rate(mock: &MockControl, modem: &str) -> u32 {
    let v = mock.property(modem, SIGNAL_IFACE, "Rate").await.unwrap();
    u32::try_from(v).unwrap()
}

/// The next radio of `path` that satisfies `want` (the client reports every path every round).
async fn radio_until(
    radios: &mut mpsc::UnboundedReceiver<Radio>,
    path: u8,
    what: &str,
    want: impl Fn(&Radio) -> bool,
) -> Radio {
    let wait = async {
        loop {
            let r = radios.recv().await.expect("the client stopped");
            if r.path == path && want(&r) {
                return r;
            }
        }
    };
    // A bound on a hang, not a measurement: rounds run every second.
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .unwrap_or_else(|_| panic!("path {path}: never saw {what}"))
}

fn fix(t: u64) -> ContextFix {
    ContextFix {
        unix_ms: t,
        lat: 52.5,
        lon: 13.4,
        speed_mps: 80.0,
        heading_deg: 90.0,
        cells: Vec::new(),
    }
}

fn cell_of(f: &ContextFix, path: u8) -> Option<CellReport> {
    f.cells.iter().find(|c| c.path == path).copied()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modems_through_handover_fade_bearer_drop_and_reset() {
    let (bus, conn) = start().await;
    let m0 = conn.add_modem(0, "350000000000001", "wwan0").await.unwrap();
    let m1 = conn.add_modem(1, "350000000000002", "wwan1").await.unwrap();
    conn.set_cell(&m0, "262,01,0,1A2B,7").await.unwrap();
    conn.set_cell(&m1, "262,02,0,BEEF,9").await.unwrap();

    let paths = vec![
        // Matched by its network interface.
        ModemPath {
            index: 0,
            name: "A".into(),
            device: "wwan0".into(),
            modem: None,
        },
        // Matched by its device identifier.
        ModemPath {
            index: 1,
            name: "B".into(),
            device: "wwan1".into(),
            modem: Some("dev-350000000000002".into()),
        },
    ];
    let opts = MmOptions {
        bus: Some(bus.address().to_string()),
        paths: paths.clone(),
        rate: Duration::from_secs(1),
        gnss: false,
    };

    // The check the relay's start and `--check-paths` make; then a wrong identifier.
    let now = mm::check(&opts).await.unwrap();
    assert_eq!(now[0].as_ref().unwrap().cell(), Some(0x1A2B));
    assert_eq!(now[0].as_ref().unwrap().pci, Some(0x2A));
    assert_eq!(now[1].as_ref().unwrap().cell(), Some(0xBEEF));
    let mut wrong = opts.clone();
    wrong.paths[1].modem = Some("123".into());
    wrong.paths[0].device = "wwan7".into();
    let bad = mm::check(&wrong).await.unwrap();
    let e0 = bad[0].as_ref().unwrap_err();
    assert!(matches!(e0, MatchError::NoModemForDevice { .. }), "{e0}");
    assert!(e0.to_string().contains("path \"A\""), "{e0}");
    let e1 = bad[1].as_ref().unwrap_err();
    assert!(
        e1.to_string().contains("path \"B\"") && e1.to_string().contains("123"),
        "{e1}"
    );
    let mut swapped = opts.clone();
    swapped.paths[1].device = "wwan0".into();
    let bad = mm::check(&swapped).await.unwrap();
    assert!(
        matches!(bad[1], Err(MatchError::WrongDevice { .. })),
        "{:?}",
        bad[1]
    );

    let (fix_tx, fix_rx) = mpsc::channel(8);
    let (out_tx, mut out) = mpsc::channel(64);
    let (radio_tx, mut radios) = mpsc::unbounded_channel();
    let client = tokio::spawn(mm::run(opts, Some(fix_rx), out_tx, move |r: &Radio| {
        let _ = radio_tx.send(r.clone());
    }));

    let a = radio_until(&mut radios, 0, "cell 1A2B", |r| r.cell() == Some(0x1A2B)).await;
    assert_eq!(a.signal.rsrp_dbm, Some(-90.0));
    assert_eq!(a.tech.map(|t| t.as_str()), Some("lte"));
    radio_until(&mut radios, 1, "cell BEEF", |r| r.cell() == Some(0xBEEF)).await;
    // The client set the modems' signal refresh rate.
    assert_eq!(signal_rate(&conn, &m0).await, 1);
    assert_eq!(signal_rate(&conn, &m1).await, 1);

    // A position goes out with both cells.
    fix_tx.send(fix(1_000)).await.unwrap();
    let f = out.recv().await.unwrap();
    assert_eq!(f.unix_ms, 1_000);
    assert_eq!(
        cell_of(&f, 0),
        Some(CellReport {
            path: 0,
            cell: Some(0x1A2B),
            rsrp_dbm: Some(-90.0)
        })
    );
    assert_eq!(cell_of(&f, 1).unwrap().cell, Some(0xBEEF));

    // Handover on A: the next fix carries the new cell.
    conn.set_cell(&m0, "262,01,0,1A2C,7").await.unwrap();
    radio_until(&mut radios, 0, "cell 1A2C", |r| r.cell() == Some(0x1A2C)).await;
    fix_tx.send(fix(2_000)).await.unwrap();
    let f = out.recv().await.unwrap();
    assert_eq!(cell_of(&f, 0).unwrap().cell, Some(0x1A2C));

    // Signal fade on A.
    conn.set_signal(&m0, -118.0f64, -19.0f64, -5.0f64)
        .await
        .unwrap();
    let faded = radio_until(&mut radios, 0, "RSRP -118", |r| {
        r.signal.rsrp_dbm == Some(-118.0)
    })
    .await;
    assert_eq!(faded.signal.sinr_db, Some(-5.0));
    fix_tx.send(fix(3_000)).await.unwrap();
    let f = out.recv().await.unwrap();
    assert_eq!(cell_of(&f, 0).unwrap().rsrp_dbm, Some(-118.0));

    // A's bearer drops: a fix with A's loss goes out without waiting for a position.
    conn.set_bearer(&m0, false).await.unwrap();
    let lost = out.recv().await.unwrap();
    assert!(lost.unix_ms > 3_000, "{lost}");
    assert_eq!(cell_of(&lost, 0).unwrap().cell, None);
    assert_eq!(cell_of(&lost, 1).unwrap().cell, Some(0xBEEF));
    conn.set_bearer(&m0, true).await.unwrap();
    radio_until(&mut radios, 0, "A connected again", |r| {
        r.cell() == Some(0x1A2C)
    })
    .await;

    // B loses its registration: a loss too.
    conn.set_registration(&m1, 2u32).await.unwrap();
    let lost = out.recv().await.unwrap();
    assert_eq!(cell_of(&lost, 1).unwrap().cell, None);
    conn.set_registration(&m1, 1u32).await.unwrap();
    radio_until(&mut radios, 1, "B registered again", |r| {
        r.cell() == Some(0xBEEF)
    })
    .await;

    // A's modem vanishes (a USB reset): a loss, and no modem for A.
    conn.remove_modem(&m0).await.unwrap();
    let lost = out.recv().await.unwrap();
    assert_eq!(cell_of(&lost, 0).unwrap().cell, None);
    radio_until(&mut radios, 0, "no modem", |r| r.modem.is_none()).await;
    // It comes back under another object path: A resumes, no restart.
    let m0b = conn.add_modem(5, "350000000000001", "wwan0").await.unwrap();
    assert_ne!(m0b, m0);
    conn.set_cell(&m0b, "262,01,0,1A2D,7").await.unwrap();
    let back = radio_until(&mut radios, 0, "cell 1A2D", |r| r.cell() == Some(0x1A2D)).await;
    assert_eq!(back.modem.as_deref(), Some(m0b.as_str()));
    assert_eq!(signal_rate(&conn, &m0b).await, 1);
    fix_tx.send(fix(9_000)).await.unwrap();
    // (Loss fixes of the rounds in between may come first.)
    loop {
        let f = out.recv().await.unwrap();
        if f.unix_ms == 9_000 {
            assert_eq!(cell_of(&f, 0).unwrap().cell, Some(0x1A2D));
            break;
        }
    }

    drop(out);
    client.await.unwrap();
}

/// Without gpsd (`source = "modemmanager"`), the modems' GNSS positions are the fixes, with
/// the paths' cells; the client enables the GNSS location sources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gnss_positions_from_the_modems_without_gpsd() {
    let (bus, conn) = start().await;
    let m0 = conn.add_modem(0, "350000000000001", "wwan0").await.unwrap();
    conn.set_cell(&m0, "262,01,0,1A2B,7").await.unwrap();
    conn.set_gnss(&m0, 52.5f64, 13.4f64).await.unwrap();
    let opts = MmOptions {
        bus: Some(bus.address().to_string()),
        paths: vec![ModemPath {
            index: 0,
            name: "A".into(),
            device: "wwan0".into(),
            modem: None,
        }],
        rate: Duration::from_secs(1),
        gnss: true,
    };
    let (out_tx, mut out) = mpsc::channel(64);
    let client = tokio::spawn(mm::run(opts, None, out_tx, |_: &Radio| {}));
    let f = loop {
        let f = out.recv().await.unwrap();
        if cell_of(&f, 0).is_some_and(|c| c.cell == Some(0x1A2B)) {
            break f;
        }
    };
    assert_eq!((f.lat, f.lon), (52.5, 13.4));
    assert!(f.unix_ms > 1_700_000_000_000, "{f}");
    // GPS raw and NMEA enabled beside 3GPP.
    let v = conn
        .property(&m0, polycorn_net::modem::LOCATION_IFACE, "Enabled")
        .await
        .unwrap();
    assert_eq!(u32::try_from(v).unwrap(), 7);
    drop(out);
    client.await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// The same trip through the mock modems and through the gpsd replay

/// Rows of the generated HSR trip (route 1, ride 1, the testbed's `--preset hsr`) where both
/// carriers hand over and one loses its cell and finds one again, times from 0.
fn trip_window(rows_wanted: usize) -> Vec<polycorn_link::trip::ContextRow> {
    use polycorn_link::trip::{Trip, TripConfig};
    let trip = Trip::generate(&TripConfig::hsr(1, 1)).unwrap();
    let rows = &trip.context;
    let changes = |w: &[polycorn_link::trip::ContextRow], p: usize| {
        w.windows(2)
            .filter(|x| x[0].carriers[p].cell != x[1].carriers[p].cell)
            .count()
    };
    // A loss and its recovery inside the window, with two rows of cells before it.
    let found = (2..rows.len().saturating_sub(rows_wanted)).find(|&i| {
        let w = &rows[i..i + rows_wanted];
        let lost = (0..2).any(|p| {
            w[..3].iter().all(|r| r.carriers[p].cell.is_some())
                && w[3..w.len() - 3]
                    .iter()
                    .any(|r| r.carriers[p].cell.is_none())
                && w[w.len() - 3..]
                    .iter()
                    .all(|r| r.carriers[p].cell.is_some())
        });
        lost && changes(w, 0) >= 2 && changes(w, 1) >= 2 && w[0].speed_mps > 50.0
    });
    let i = found.expect("the HSR trip has a window with handovers and a loss on one carrier");
    let t0 = rows[i].t_ms;
    rows[i..i + rows_wanted]
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.t_ms -= t0;
            // The gpsd replay sends RSRP to 0.1 dB; the modems get the same values.
            for c in &mut r.carriers {
                c.rsrp_dbm = c.rsrp_dbm.map(|v| (v * 10.0).round() / 10.0);
            }
            r
        })
        .collect()
}

/// Sets the mock modems to `row`'s cells and RSRP (what changed since `before`): a carrier
/// without a cell is a modem that lost its registration (searching), and registers again on
/// its next cell.
async fn drive(
    mock: &MockControl,
    modems: &[String],
    row: &polycorn_link::trip::ContextRow,
    before: Option<&polycorn_link::trip::ContextRow>,
) {
    use polycorn_net::modem::mock::{location_of_cell, REGISTRATION_HOME, REGISTRATION_SEARCHING};
    for (p, m) in modems.iter().enumerate() {
        let now = &row.carriers[p];
        let was = before.map(|b| &b.carriers[p]);
        match now.cell {
            None => {
                if was.is_none_or(|w| w.cell.is_some()) {
                    mock.set_registration(m, REGISTRATION_SEARCHING)
                        .await
                        .unwrap();
                }
            }
            Some(cell) => {
                if let Some(rsrp) = now
                    .rsrp_dbm
                    .filter(|_| was.is_none_or(|w| w.rsrp_dbm != now.rsrp_dbm))
                {
                    mock.set_signal(m, rsrp, -10.0, 10.0).await.unwrap();
                }
                if was.is_none_or(|w| w.cell != Some(cell)) {
                    mock.set_cell(m, &location_of_cell(u64::from(cell)))
                        .await
                        .unwrap();
                }
                if was.is_some_and(|w| w.cell.is_none()) {
                    mock.set_registration(m, REGISTRATION_HOME).await.unwrap();
                }
            }
        }
    }
}

/// A stream's fixes as LinkDB imports them: recorded as the relay records them
/// (`context::Recorder`, `[context] record`), then read as one ride up the HSR line.
fn linkdb_records(
    fixes: &[ContextFix],
    dir: &std::path::Path,
) -> polycorn_linkdb::record::TripData {
    use polycorn_linkdb::import::relay;
    let mut rec = polycorn_net::context::Recorder::new(dir, vec!["A".into(), "B".into()]).unwrap();
    for f in fixes {
        rec.record(f).unwrap();
    }
    drop(rec);
    let opts = relay::Options {
        route: "hsr/route1".into(),
        track: hsr_track(),
        direction: Some(polycorn_linkdb::record::Direction::Up),
        carriers: Some(vec!["A".into(), "B".into()]),
        before_day: None,
        done: Default::default(),
        monitor_lag_ms: 0,
    };
    let (mut trips, report) = relay::import(dir, &opts).unwrap();
    assert_eq!(trips.len(), 1, "{report:?}");
    trips.remove(0)
}

fn hsr_track() -> polycorn_linkdb::predict::Track {
    polycorn_linkdb::predict::Track {
        origin: (39.865, 116.378),
        heading_deg: 160.0,
    }
}

/// Each path's serving cells in the order a stream's fixes report them (a loss is `None`).
fn cell_sequence(fixes: &[ContextFix], path: u8) -> Vec<Option<u64>> {
    let mut out: Vec<Option<u64>> = Vec::new();
    for f in fixes {
        let c = cell_of(f, path).and_then(|c| c.cell);
        if out.last() != Some(&c) {
            out.push(c);
        }
    }
    out
}

/// What the predictor says of each path after each fix of `fixes` whose time is in `at`:
/// (next failure, in a handover zone, cell lost since), times in ms from `base`.
type Prediction = (Option<u64>, bool, Option<u64>);

fn predictions(
    predictor: &polycorn_net::predictor::LinkDbPredictor,
    fixes: &[ContextFix],
    at: &[u64],
    base: u64,
) -> Vec<[Prediction; 2]> {
    use polycorn_net::predictor::TrainPredictor;
    use polycorn_sched::path::PathId;
    use polycorn_sched::predict::HandoverPredictor;
    use polycorn_sched::time::Instant;
    let mut p = predictor.clone();
    let ms = |i: Instant| i.as_micros() / 1_000;
    let mut out = Vec::new();
    for f in fixes {
        let now = Instant::from_millis(f.unix_ms - base);
        p.on_context(now, &f.to_info());
        if at.contains(&f.unix_ms) {
            out.push([0, 1].map(|k| {
                let path = PathId::new(k).unwrap();
                (
                    p.next_failure(path, now).map(ms),
                    p.in_handover_zone(path, now),
                    p.cell_lost_since(path, now).map(ms),
                )
            }));
        }
    }
    out
}

/// A stretch of the testbed's HSR trip replayed twice at once, in real time (1 fix a second):
/// through the gpsd replay (the emulator's replay server, cells in its `POLYCORN` objects) and
/// through the mock modems (the same server's positions, which the relay joins with the cells
/// and RSRP the modems report, as `[context] cells = "modemmanager"` runs it). LinkDB gets the
/// same records from both streams once the relay's recorder has written them and
/// `linkdb import --ride-log` has read them, and a LinkDB predictor (the proxy's) says the
/// same of both.
///
/// The streams' timing differs, by design: the modems are set half a fix interval before each
/// fix (a modem reports a change when it happens, between fixes) and a loss leaves at once
/// with the last position. So a cell change is placed where it is in both, and a loss, which
/// the gpsd replay only shows at the next fix, is placed up to one fix interval of travel
/// earlier: positions are compared within that, and predicted times within one interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trip_through_the_mock_modems_gives_what_the_gpsd_replay_gives() {
    use polycorn_net::context::follow_gpsd;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};

    const ROWS: usize = 40;
    const INTERVAL_MS: u64 = 1_000;
    let rows = trip_window(ROWS);
    assert!(rows
        .windows(2)
        .all(|w| w[1].t_ms - w[0].t_ms == INTERVAL_MS));
    let (bus, mock) = start().await;
    let modems = vec![
        mock.add_modem(0, "350000000000001", "wwan0").await.unwrap(),
        mock.add_modem(1, "350000000000002", "wwan1").await.unwrap(),
    ];
    drive(&mock, &modems, &rows[0], None).await;
    let opts = MmOptions {
        bus: Some(bus.address().to_string()),
        paths: (0..2)
            .map(|i| ModemPath {
                index: i,
                name: ["A", "B"][usize::from(i)].into(),
                device: format!("wwan{i}"),
                modem: None,
            })
            .collect(),
        rate: Duration::from_secs(1),
        gnss: false,
    };
    let seen: Arc<Mutex<[Option<u64>; 2]>> = Arc::default();
    let seen2 = seen.clone();
    let (pos_tx, pos_rx) = mpsc::channel(64);
    let (m_tx, mut m_rx) = mpsc::channel(256);
    let client = tokio::spawn(mm::run(opts, Some(pos_rx), m_tx, move |r: &Radio| {
        seen2.lock().unwrap()[usize::from(r.path)] = r.cell();
    }));
    let first: [Option<u64>; 2] = [0, 1].map(|p| rows[0].carriers[p].cell.map(u64::from));
    let ready = async {
        while *seen.lock().unwrap() != first {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), ready)
        .await
        .expect("the modems' first cells");

    // One replay server; its positions go to both sources.
    let stop = Arc::new(AtomicBool::new(false));
    let server = polycorn_emu::context::ContextServer::start(
        None,
        "127.0.0.1:0".parse().unwrap(),
        rows.clone(),
        vec!["A".into(), "B".into()],
        stop,
    )
    .unwrap();
    let t0 = tokio::time::Instant::now();
    let (g_tx, mut g_rx) = mpsc::channel(256);
    let gpsd = tokio::spawn(follow_gpsd(server.addr(), g_tx));
    let positions = tokio::spawn(follow_gpsd(server.addr(), pos_tx));
    let driver = {
        let (mock, modems, rows) = (mock.clone(), modems.clone(), rows.clone());
        tokio::spawn(async move {
            for k in 1..rows.len() {
                let at = Duration::from_millis(rows[k].t_ms - INTERVAL_MS / 2);
                tokio::time::sleep_until(t0 + at).await;
                drive(&mock, &modems, &rows[k], Some(&rows[k - 1])).await;
            }
        })
    };
    // Every fix of both streams, until each has the trip's last position (a bound on a
    // hang, not a measurement).
    let collect = async {
        let mut g = Vec::new();
        while g.len() < rows.len() {
            g.push(g_rx.recv().await.expect("the gpsd source ended"));
        }
        let last = g.last().unwrap().unix_ms;
        let mut m: Vec<ContextFix> = Vec::new();
        while m.last().is_none_or(|f| f.unix_ms != last) {
            m.push(m_rx.recv().await.expect("the modem source ended"));
        }
        (g, m)
    };
    let (g, m) = tokio::time::timeout(Duration::from_secs(ROWS as u64 + 60), collect)
        .await
        .expect("both streams reach the trip's end");
    driver.await.unwrap();
    gpsd.abort();
    positions.abort();
    drop(m_rx);
    client.await.unwrap();
    drop(server);

    // The modems' stream: every position once, with the modems' cells; a loss at once
    // in between (the last position again).
    let g_times: Vec<u64> = g.iter().map(|f| f.unix_ms).collect();
    let m_positions: Vec<&ContextFix> = m.iter().filter(|f| g_times.contains(&f.unix_ms)).collect();
    assert_eq!(m_positions.len(), g.len(), "{}", m.len());
    let losses = m.len() - m_positions.len();
    assert!(losses >= 1, "no loss sent at once:\n{m:?}");
    for p in [0u8, 1] {
        assert_eq!(
            cell_sequence(&g, p),
            cell_sequence(&m, p),
            "path {p}'s serving cells"
        );
        assert!(
            cell_sequence(&g, p).len() >= 3,
            "{:?}",
            cell_sequence(&g, p)
        );
    }
    for (a, b) in g.iter().zip(&m_positions) {
        assert_eq!((a.lat, a.lon, a.speed_mps), (b.lat, b.lon, b.speed_mps));
    }

    // LinkDB's records of both.
    let dir = tempfile::tempdir().unwrap();
    let g_trip = linkdb_records(&g, &dir.path().join("gpsd"));
    let m_trip = linkdb_records(&m, &dir.path().join("modems"));
    let travel_m = rows.iter().map(|r| r.speed_mps).fold(0.0, f64::max) * INTERVAL_MS as f64 / 1e3;
    let (gh, mh) = (&g_trip.handovers, &m_trip.handovers);
    assert_eq!(gh.len(), mh.len(), "gpsd:\n{gh:#?}\nmodems:\n{mh:#?}");
    assert!(gh.len() >= 4, "{gh:#?}");
    assert!(
        gh.iter()
            .any(|h| h.outcome == polycorn_linkdb::record::Outcome::Failure),
        "{gh:#?}"
    );
    let mut moved = 0;
    for (a, b) in gh.iter().zip(mh) {
        assert_eq!(
            (&a.carrier, &a.from_cell, &a.to_cell, a.outcome, a.direction),
            (&b.carrier, &b.from_cell, &b.to_cell, b.outcome, b.direction),
            "{a:#?}\n{b:#?}"
        );
        let (pa, pb) = (a.position_m.unwrap(), b.position_m.unwrap());
        assert!((pa - pb).abs() <= travel_m, "{a:#?}\n{b:#?}");
        if (pa - pb).abs() > 1e-6 {
            moved += 1;
        }
        match (a.rsrp_dbm, b.rsrp_dbm) {
            (Some(x), Some(y)) => assert!((x - y).abs() < 0.05, "{a:#?}\n{b:#?}"),
            (x, y) => assert_eq!(x, y, "{a:#?}\n{b:#?}"),
        }
    }
    eprintln!(
        "{} records from each source; {moved} placed apart (by at most {travel_m:.0} m); {losses} losses sent at once",
        gh.len()
    );

    // The proxy's predictions (LinkDB built from the gpsd replay's records) at every fix.
    let predictor = polycorn_net::predictor::LinkDbPredictor::new(
        polycorn_linkdb::ModelKind::Paper.build(&[&g_trip]),
        hsr_track(),
        &["A".into(), "B".into()],
    );
    let base = g[0].unix_ms;
    let pg = predictions(&predictor, &g, &g_times, base);
    let pm = predictions(&predictor, &m, &g_times, base);
    assert_eq!(pg.len(), pm.len());
    let near = |x: Option<u64>, y: Option<u64>| match (x, y) {
        (Some(x), Some(y)) => x.abs_diff(y) <= INTERVAL_MS,
        (x, y) => x == y,
    };
    for (k, (a, b)) in pg.iter().zip(&pm).enumerate() {
        for p in 0..2 {
            let ((fa, za, la), (fb, zb, lb)) = (a[p], b[p]);
            assert!(
                near(fa, fb) && za == zb && near(la, lb),
                "fix {k}, path {p}: gpsd {:?}, modems {:?}",
                a[p],
                b[p]
            );
        }
    }
    assert!(
        pg.iter()
            .flatten()
            .any(|(f, _, l)| f.is_some() && l.is_none()),
        "the predictor foresaw no failure: the comparison says nothing"
    );
}
