//! Train context: a fake gpsd on loopback, and trip context logs.

use std::net::SocketAddr;
use std::time::Duration;

use polycorn_net::context::{
    follow_gpsd, read_replay_csv, replay, CellReport, ContextError, ContextFix, GpsdStats,
    MAX_LINE_BYTES,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::timeout;

const VERSION: &str = "{\"class\":\"VERSION\",\"release\":\"fake\",\"rev\":\"1\",\"proto_major\":3,\"proto_minor\":14}\n";
const WAIT: Duration = Duration::from_secs(10);

/// Accept one client like gpsd: greet, expect `?WATCH`, return the writing half.
async fn accept_watcher(listener: &TcpListener) -> OwnedWriteHalf {
    let (s, _) = timeout(WAIT, listener.accept())
        .await
        .expect("client did not (re)connect")
        .unwrap();
    let (r, mut w) = s.into_split();
    w.write_all(VERSION.as_bytes()).await.unwrap();
    let mut line = String::new();
    BufReader::new(r).read_line(&mut line).await.unwrap();
    assert_eq!(line, "?WATCH={\"enable\":true,\"json\":true};\n");
    w
}

fn tpv(time: &str, lat: f64, lon: f64, speed: f64, track: f64) -> String {
    format!("{{\"class\":\"TPV\",\"device\":\"polycorn-replay\",\"mode\":3,\"time\":\"{time}\",\"lat\":{lat:.7},\"lon\":{lon:.7},\"speed\":{speed:.2},\"track\":{track:.1}}}\n")
}

fn polycorn(time: &str, carriers: &str) -> String {
    format!(
        "{{\"class\":\"POLYCORN\",\"time\":\"{time}\",\"t_ms\":1000,\"carriers\":[{carriers}]}}\n"
    )
}

async fn next(rx: &mut mpsc::Receiver<ContextFix>) -> ContextFix {
    timeout(WAIT, rx.recv())
        .await
        .expect("no fix in time")
        .expect("client ended")
}

const T1: &str = "2026-11-21T06:00:01.000Z";
const T1_MS: u64 = 1_795_240_801_000;

#[tokio::test]
async fn gpsd_fixes_merge_carriers_skip_garbage_and_survive_restarts() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let client = tokio::spawn(follow_gpsd(addr, tx));

    let mut w = accept_watcher(&listener).await;
    let mut script = String::new();
    script.push_str("{\"class\":\"DEVICES\",\"devices\":[]}\n");
    script.push_str(&tpv(T1, 39.86, 116.37, 83.3, 160.0));
    script.push_str(&polycorn(
        T1,
        "{\"path\":0,\"name\":\"A\",\"cell\":1203000,\"rsrp\":-85.6},{\"path\":1,\"name\":\"B\",\"cell\":null,\"rsrp\":null}",
    ));
    script.push_str("this is not json\n");
    script.push_str(&format!("{}\n", "x".repeat(MAX_LINE_BYTES + 10)));
    script.push_str("{\"class\":\"SKY\",\"satellites\":[]}\n");
    script.push_str("{\"class\":\"TPV\",\"mode\":1}\n");
    // Carriers first, then the fix of the same second.
    script.push_str(&polycorn(
        "2026-11-21T06:00:02.000Z",
        "{\"path\":0,\"name\":\"A\",\"cell\":1203001,\"rsrp\":-101.0},{\"path\":1,\"name\":\"B\",\"cell\":2201000,\"rsrp\":-90.5}",
    ));
    script.push_str(&tpv("2026-11-21T06:00:02.000Z", 39.85, 116.38, 84.0, 161.0));
    w.write_all(script.as_bytes()).await.unwrap();

    let f1 = next(&mut rx).await;
    assert_eq!(f1.unix_ms, T1_MS);
    assert_eq!((f1.lat, f1.lon), (39.86, 116.37));
    assert_eq!((f1.speed_mps, f1.heading_deg), (83.3, 160.0));
    assert_eq!(
        f1.cells,
        vec![
            CellReport {
                path: 0,
                cell: Some(1_203_000),
                rsrp_dbm: Some(-85.6)
            },
            CellReport {
                path: 1,
                cell: None,
                rsrp_dbm: None
            },
        ]
    );
    let f2 = next(&mut rx).await;
    assert_eq!(f2.unix_ms, T1_MS + 1000);
    assert_eq!(f2.cells[0].cell, Some(1_203_001));
    assert_eq!(f2.cells[1].rsrp_dbm, Some(-90.5));

    // A fix whose carrier report never comes goes out after a short wait, with the latest
    // carriers.
    w.write_all(tpv("2026-11-21T06:00:03.000Z", 39.84, 116.39, 84.0, 161.0).as_bytes())
        .await
        .unwrap();
    let f3 = next(&mut rx).await;
    assert_eq!(f3.unix_ms, T1_MS + 2000);
    assert_eq!(f3.cells, f2.cells);

    // gpsd goes away and comes back on the same port: the client reconnects.
    drop(w);
    drop(listener);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let listener = TcpListener::bind(addr).await.unwrap();
    let mut w = accept_watcher(&listener).await;
    let t4 = "2026-11-21T06:00:04.000Z";
    let mut script = tpv(t4, 39.83, 116.40, 85.0, 162.0);
    script.push_str(&polycorn(
        t4,
        "{\"path\":0,\"name\":\"A\",\"cell\":null,\"rsrp\":null}",
    ));
    w.write_all(script.as_bytes()).await.unwrap();
    let f4 = next(&mut rx).await;
    assert_eq!(f4.unix_ms, T1_MS + 3000);
    assert_eq!(
        f4.cells,
        vec![CellReport {
            path: 0,
            cell: None,
            rsrp_dbm: None
        }]
    );

    drop(rx);
    let stats = timeout(WAIT, client).await.expect("client ended").unwrap();
    assert_eq!(
        stats,
        GpsdStats {
            connections: 2,
            fixes: 4,
            malformed_lines: 2,
            tpv_without_fix: 1,
        }
    );
}

#[tokio::test]
async fn plain_gpsd_fixes_come_without_cells() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let client = tokio::spawn(follow_gpsd(listener.local_addr().unwrap(), tx));
    let mut w = accept_watcher(&listener).await;
    // No speed or track: NaN.
    w.write_all(
        format!(
            "{{\"class\":\"TPV\",\"mode\":2,\"time\":\"{T1}\",\"lat\":-33.5,\"lon\":151.25}}\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let f = next(&mut rx).await;
    assert_eq!((f.unix_ms, f.lat, f.lon), (T1_MS, -33.5, 151.25));
    assert!(f.speed_mps.is_nan() && f.heading_deg.is_nan());
    assert!(f.cells.is_empty());
    drop(rx);
    timeout(WAIT, client).await.unwrap().unwrap();
}

#[tokio::test]
async fn gpsd_client_ends_when_the_receiver_goes_while_nobody_listens() {
    let addr: SocketAddr = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let (tx, rx) = mpsc::channel(1);
    let client = tokio::spawn(follow_gpsd(addr, tx));
    tokio::time::sleep(Duration::from_millis(400)).await;
    drop(rx);
    let stats = timeout(Duration::from_secs(2), client)
        .await
        .expect("client kept retrying")
        .unwrap();
    assert_eq!(stats.connections, 0);
}

/// The exact shape `polycorn trip generate` writes.
const CSV: &str = "t_ms,lat,lon,speed_mps,heading_deg,cell_KT,rsrp_dbm_KT,cell_SKT,rsrp_dbm_SKT
0,37.5547000,126.9707000,0.00,180.0,1203000,-85.6,2201000,-92.1
1000,37.5546000,126.9707500,8.33,180.5,,,2201000,-92.4
2000,37.5545000,126.9708000,16.67,181.0,1203001,-99.0,,
";

fn write(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
    let p = dir.path().join("context.csv");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn replay_csv_reads_the_trip_generator_format() {
    let dir = tempfile::tempdir().unwrap();
    let fixes = read_replay_csv(write(&dir, CSV)).unwrap();
    assert_eq!(fixes.len(), 3);
    assert_eq!(fixes[0].unix_ms, 0);
    assert_eq!((fixes[0].lat, fixes[0].lon), (37.5547, 126.9707));
    assert_eq!(fixes[1].speed_mps, 8.33);
    assert_eq!(fixes[2].heading_deg, 181.0);
    assert_eq!(
        fixes[1].cells,
        vec![
            CellReport {
                path: 0,
                cell: None,
                rsrp_dbm: None
            },
            CellReport {
                path: 1,
                cell: Some(2_201_000),
                rsrp_dbm: Some(-92.4)
            },
        ]
    );
    assert_eq!(fixes[2].cells[1].cell, None);
    // No carriers at all is fine too.
    let fixes = read_replay_csv(write(
        &dir,
        "t_ms,lat,lon,speed_mps,heading_deg\n5,1,2,3,4\n",
    ))
    .unwrap();
    assert!(fixes[0].cells.is_empty());
}

#[test]
fn replay_csv_errors_name_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let bad_row = CSV.replace("-92.4", "loud");
    let e = read_replay_csv(write(&dir, &bad_row)).unwrap_err();
    assert!(
        matches!(
            e,
            ContextError::Field {
                line: 3,
                column: 9,
                ..
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(msg.contains("context.csv:3:"), "{msg}");
    assert!(msg.contains("column 9 (`rsrp_dbm_SKT`)"), "{msg}");
    assert!(msg.contains("loud"), "{msg}");

    let cases = [
        (
            CSV.replace("2000,", "500,"),
            "context.csv:4: column 1 (`t_ms`)",
        ),
        (
            CSV.replace("37.5546000", "97.5"),
            "context.csv:3: column 2 (`lat`)",
        ),
        (
            CSV.replace("1203001", "cell-1"),
            "context.csv:4: column 6 (`cell_KT`)",
        ),
        (
            CSV.replace(",,\n", ",\n"),
            "context.csv:4: 8 fields, the header has 9",
        ),
        (
            CSV.replace("heading_deg", "heading"),
            "context.csv:1: bad header",
        ),
        (
            CSV.replace("rsrp_dbm_KT", "rsrp_dbm_XX"),
            "context.csv:1: bad header",
        ),
        (String::new(), "context.csv:1: bad header: empty file"),
    ];
    for (text, want) in cases {
        let msg = read_replay_csv(write(&dir, &text)).unwrap_err().to_string();
        assert!(msg.contains(want), "want {want:?} in {msg:?}");
    }
    let missing = dir.path().join("nope.csv");
    let msg = read_replay_csv(&missing).unwrap_err().to_string();
    assert!(msg.contains("nope.csv"), "{msg}");
}

#[tokio::test]
async fn replay_paces_and_restamps() {
    let dir = tempfile::tempdir().unwrap();
    let fixes = read_replay_csv(write(&dir, CSV)).unwrap();
    let (tx, mut rx) = mpsc::channel(8);
    let start = tokio::time::Instant::now();
    // 2 s of trip at 20x: about 100 ms.
    let sent = replay(fixes.clone(), tx, 20.0).await.unwrap();
    let elapsed = start.elapsed();
    assert_eq!(sent, 3);
    assert!(elapsed >= Duration::from_millis(95), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    let mut got = Vec::new();
    while let Some(f) = rx.recv().await {
        got.push(f);
    }
    assert_eq!(got.len(), 3);
    assert!(got[0].unix_ms > 1_700_000_000_000, "wall-clock stamps");
    assert_eq!(got[1].unix_ms - got[0].unix_ms, 50);
    assert_eq!(got[2].unix_ms - got[0].unix_ms, 100);
    assert_eq!(got[2].cells, fixes[2].cells);

    let (tx, _rx) = mpsc::channel(1);
    assert!(matches!(
        replay(fixes.clone(), tx, 0.0).await,
        Err(ContextError::InvalidSpeedup(_))
    ));
    // The receiver goes away: replay stops early.
    let (tx, rx) = mpsc::channel(1);
    drop(rx);
    assert_eq!(replay(fixes, tx, 1.0).await.unwrap(), 0);
}

/// The client against the emulator's own replay server (`polycorn emu run` serves this).
#[tokio::test]
async fn follows_the_emulator_context_server() {
    use polycorn_link::trip::{CarrierContext, ContextRow};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    let row = |t_ms: u64, cell: Option<u32>| ContextRow {
        t_ms,
        lat: 39.86 - t_ms as f64 * 1e-6,
        lon: 116.37,
        speed_mps: 83.3,
        heading_deg: 160.0,
        carriers: vec![
            CarrierContext {
                cell,
                rsrp_dbm: cell.map(|_| -85.6),
            },
            CarrierContext {
                cell: Some(2_201_000),
                rsrp_dbm: Some(-92.1),
            },
        ],
    };
    let rows = vec![row(0, Some(1_203_000)), row(400, None)];
    let stop = Arc::new(AtomicBool::new(false));
    let server = polycorn_emu::context::ContextServer::start(
        None,
        "127.0.0.1:0".parse().unwrap(),
        rows,
        vec!["A".into(), "B".into()],
        stop,
    )
    .unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let client = tokio::spawn(follow_gpsd(server.addr(), tx));
    let first = next(&mut rx).await;
    assert_eq!(
        (first.lat, first.speed_mps, first.heading_deg),
        (39.86, 83.3, 160.0)
    );
    assert_eq!(
        first.cells,
        vec![
            CellReport {
                path: 0,
                cell: Some(1_203_000),
                rsrp_dbm: Some(-85.6)
            },
            CellReport {
                path: 1,
                cell: Some(2_201_000),
                rsrp_dbm: Some(-92.1)
            },
        ]
    );
    let second = next(&mut rx).await;
    assert_eq!(second.unix_ms - first.unix_ms, 400);
    assert_eq!(second.cells[0].cell, None);
    assert_eq!(second.cells[0].rsrp_dbm, None);
    drop(rx);
    let stats = timeout(WAIT, client).await.unwrap().unwrap();
    assert_eq!((stats.fixes, stats.malformed_lines), (2, 0));
    drop(server);
}

/// A relay's context log as LinkDB imports it: one ride up a line heading south from the
/// logs' first fix.
fn import_south(
    log: &std::path::Path,
) -> (
    Vec<polycorn_linkdb::record::TripData>,
    polycorn_linkdb::import::ImportReport,
) {
    use polycorn_linkdb::import::relay;
    let opts = relay::Options {
        route: "test".into(),
        track: polycorn_linkdb::predict::Track {
            origin: (39.865, 116.378),
            heading_deg: 180.0,
        },
        direction: Some(polycorn_linkdb::record::Direction::Up),
        carriers: None,
        before_day: None,
        done: Default::default(),
        monitor_lag_ms: 0,
    };
    relay::import(log, &opts).unwrap()
}

/// The relay's own context log: the replay format, one file per day and per start, a repeated
/// fix skipped, unreported speed and heading left empty; replayable, and LinkDB finds the
/// handovers in it.
#[test]
fn the_relay_records_what_it_is_told_for_replay_and_for_linkdb() {
    use polycorn_net::context::Recorder;
    let dir = tempfile::tempdir().unwrap();
    let rec_dir = dir.path().join("ctx");
    let mut rec = Recorder::new(&rec_dir, vec!["A".into(), "B".into()]).unwrap();
    // 2026-11-30T23:59:50Z: ten seconds before a new day.
    let t0 = 1_796_083_190_000u64;
    let fix = |s: u64, a: Option<u64>, b: Option<u64>, speed: f64| ContextFix {
        unix_ms: t0 + s * 1000,
        lat: 39.865 - s as f64 * 0.0007,
        lon: 116.378,
        speed_mps: speed,
        heading_deg: if speed.is_nan() { f64::NAN } else { 180.0 },
        cells: vec![
            CellReport {
                path: 0,
                cell: a,
                rsrp_dbm: a.map(|_| -90.5),
            },
            CellReport {
                path: 1,
                cell: b,
                rsrp_dbm: b.map(|_| -101.0),
            },
        ],
    };
    let mut started = Vec::new();
    for (s, a, b, v) in [
        (0, Some(1), Some(7), 78.0),
        (1, Some(1), Some(7), 78.0),
        (1, Some(1), Some(7), 78.0), // the same fix again
        (2, Some(2), None, 78.0),
        (3, Some(2), None, f64::NAN),
        (4, Some(2), Some(8), 78.0),
        (11, Some(3), Some(8), 78.0), // the next UTC day
    ] {
        if let Some(p) = rec.record(&fix(s, a, b, v)).unwrap() {
            started.push(p);
        }
        // A fix without carrier reports in between (the modem monitor fell silent): not
        // written, since empty cells would read as lost ones.
        let mut silent = fix(s, None, None, v);
        silent.unix_ms += 500;
        silent.cells.clear();
        assert_eq!(rec.record(&silent).unwrap(), None);
    }
    assert_eq!(rec.rows(), 6, "rows written");
    let names: Vec<String> = started
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "context-20261130T235950Z.csv",
            "context-20261201T000001Z.csv"
        ]
    );
    let text = std::fs::read_to_string(&started[0]).unwrap();
    assert_eq!(
        text,
        "t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A,cell_B,rsrp_dbm_B\n\
         0,39.8650000,116.3780000,78.00,180.0,1,-90.5,7,-101.0\n\
         1000,39.8643000,116.3780000,78.00,180.0,1,-90.5,7,-101.0\n\
         2000,39.8636000,116.3780000,78.00,180.0,2,-90.5,,\n\
         3000,39.8629000,116.3780000,,,2,-90.5,,\n\
         4000,39.8622000,116.3780000,78.00,180.0,2,-90.5,8,-101.0\n"
    );
    // A restart in the same second gets a file of its own.
    let mut again = Recorder::new(&rec_dir, vec!["A".into(), "B".into()]).unwrap();
    let p = again.record(&fix(0, Some(1), None, 1.0)).unwrap().unwrap();
    assert!(p.ends_with("context-20261130T235950Z-2.csv"), "{p:?}");

    // Replayable: the same fixes, unreported speed as NaN.
    let back = read_replay_csv(&started[0]).unwrap();
    assert_eq!(back.len(), 5);
    assert_eq!(back[2].cells[1].cell, None);
    assert!(back[3].speed_mps.is_nan() && back[3].heading_deg.is_nan());
    assert_eq!(back[4].cells[1].cell, Some(8));

    // LinkDB: A's 1 -> 2 is a success, B's lost 7 then 8 a failure.
    use polycorn_linkdb::record::Outcome;
    let (trips, rep) = import_south(&started[0]);
    assert!(rep.bad.is_empty(), "{rep:?}");
    let hos: Vec<_> = trips[0]
        .handovers
        .iter()
        .map(|h| (h.carrier.as_str(), h.from_cell.as_str(), h.outcome))
        .collect();
    assert_eq!(
        hos,
        [("A", "1", Outcome::Success), ("B", "7", Outcome::Failure)]
    );
}

/// `[context] keep_days`: starting a log removes the directory's logs of days before that many
/// finished days, and nothing else; a GPS time far ahead of the clock removes no more.
#[test]
fn old_context_logs_are_removed_after_keep_days() {
    use polycorn_net::context::{record_day, Recorder};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let day = |k: u64| record_day(now - k * 86_400_000);
    let fix = |unix_ms: u64| ContextFix {
        unix_ms,
        lat: 39.865,
        lon: 116.378,
        speed_mps: 0.0,
        heading_deg: 0.0,
        cells: vec![CellReport {
            path: 0,
            cell: Some(1),
            rsrp_dbm: Some(-90.0),
        }],
    };
    let setup = || {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            format!("context-{}T060000Z.csv", day(1)),
            format!("context-{}T060000Z.csv", day(2)),
            format!("context-{}T060000Z-2.csv", day(2)),
            format!("context-{}T010203Z.csv", day(40)),
            "context-notaday.csv".into(),
            format!("context-{}T060000Z.txt", day(9)),
            "notes.txt".into(),
        ] {
            std::fs::write(dir.path().join(name), "t_ms\n").unwrap();
        }
        std::fs::create_dir(dir.path().join(format!("context-{}T060000Z.csv", day(30)))).unwrap();
        dir
    };
    let left = |dir: &std::path::Path| {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let untouched = |dir: &std::path::Path| {
        let mut want = vec![
            format!("context-{}T060000Z.csv", day(1)),
            format!("context-{}T060000Z.txt", day(9)),
            format!("context-{}T060000Z.csv", day(30)),
            "context-notaday.csv".to_string(),
            "notes.txt".to_string(),
        ];
        want.extend(
            left(dir)
                .into_iter()
                .filter(|n| n.starts_with(&format!("context-{}", day(0)))),
        );
        want.sort();
        want
    };

    // Keep one finished day: yesterday's log stays (tonight's import has yet to read it), the
    // older ones go; other files, a directory and a name without a day are not touched.
    let dir = setup();
    let mut rec = Recorder::new(dir.path(), vec!["A".into()])
        .unwrap()
        .keep_days(Some(1));
    let started = rec.record(&fix(now)).unwrap().unwrap();
    assert!(started.exists());
    assert_eq!(left(dir.path()), untouched(dir.path()));
    assert_eq!(left(dir.path()).len(), 6);

    // A GPS time ten years ahead counts from the clock, not from it.
    let dir = setup();
    let mut rec = Recorder::new(dir.path(), vec!["A".into()])
        .unwrap()
        .keep_days(Some(1));
    rec.record(&fix(now + 3650 * 86_400_000)).unwrap().unwrap();
    assert!(left(dir.path()).contains(&format!("context-{}T060000Z.csv", day(1))));
    assert_eq!(left(dir.path()).len(), 6);

    // Without keep_days every log stays.
    let dir = setup();
    let mut rec = Recorder::new(dir.path(), vec!["A".into()]).unwrap();
    rec.record(&fix(now)).unwrap().unwrap();
    assert_eq!(left(dir.path()).len(), 9);
}

/// A fix that reports some modems and not others: the others are written as unreported (`?`),
/// which the replay leaves out of the fix and LinkDB reads as a gap, not as a lost cell.
#[test]
fn a_modem_not_reported_is_neither_a_cell_nor_a_lost_one() {
    use polycorn_net::context::{Recorder, UNREPORTED};
    assert_eq!(UNREPORTED, "?");
    let dir = tempfile::tempdir().unwrap();
    let mut rec = Recorder::new(dir.path(), vec!["A".into(), "B".into()]).unwrap();
    let t0 = 1_796_083_100_000u64;
    let fix = |s: u64, b: Option<Option<u64>>| ContextFix {
        unix_ms: t0 + s * 1000,
        lat: 39.865 - s as f64 * 0.0007,
        lon: 116.378,
        speed_mps: 78.0,
        heading_deg: 180.0,
        cells: std::iter::once(CellReport {
            path: 0,
            cell: Some(1),
            rsrp_dbm: Some(-90.0),
        })
        .chain(b.map(|cell| CellReport {
            path: 1,
            cell,
            rsrp_dbm: cell.map(|_| -100.0),
        }))
        .collect(),
    };
    // B: on 7, not reported, 7, not reported twice, 8, none (lost), not reported, 9.
    let steps = [
        Some(Some(7)),
        None,
        Some(Some(7)),
        None,
        None,
        Some(Some(8)),
        Some(None),
        None,
        Some(Some(9)),
    ];
    let mut file = None;
    for (s, b) in steps.iter().enumerate() {
        if let Some(p) = rec.record(&fix(s as u64, *b)).unwrap() {
            file = Some(p);
        }
    }
    let file = file.unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let b_cols: Vec<String> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').skip(7).collect::<Vec<_>>().join(","))
        .collect();
    assert_eq!(
        b_cols,
        ["7,-100.0", "?,", "7,-100.0", "?,", "?,", "8,-100.0", ",", "?,", "9,-100.0"]
    );

    // Replay: an unreported modem is left out of its fix.
    let back = read_replay_csv(&file).unwrap();
    let paths: Vec<Vec<u8>> = back
        .iter()
        .map(|f| f.cells.iter().map(|c| c.path).collect())
        .collect();
    assert_eq!(paths[0], [0, 1]);
    assert_eq!(paths[1], [0]);
    assert_eq!(paths[6], [0, 1]);
    assert_eq!(back[6].cells[1].cell, None);

    // LinkDB: 7 -> 8 a success, then 8 lost and 9 its failure's target; nothing made of the
    // unreported fixes.
    use polycorn_linkdb::record::Outcome;
    let (trips, rep) = import_south(&file);
    assert!(rep.bad.is_empty(), "{rep:?}");
    let hos: Vec<_> = trips[0]
        .handovers
        .iter()
        .map(|h| {
            (
                h.carrier.as_str(),
                h.from_cell.as_str(),
                h.to_cell.as_deref(),
                h.outcome,
                h.start_ms,
            )
        })
        .collect();
    assert_eq!(
        hos,
        [
            ("B", "7", Some("8"), Outcome::Success, 3500),
            ("B", "8", Some("9"), Outcome::Failure, 5500),
        ]
    );

    // An RSRP beside `?` is refused, naming where.
    let bad = dir.path().join("bad.csv");
    std::fs::write(
        &bad,
        "t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A\n0,39.8,116.3,1,0,?,-90\n",
    )
    .unwrap();
    let e = read_replay_csv(&bad).unwrap_err().to_string();
    assert!(e.contains("bad.csv:2:") && e.contains("rsrp_dbm_A"), "{e}");
}

#[test]
fn a_recorder_refuses_carrier_names_that_cannot_be_columns() {
    use polycorn_net::context::Recorder;
    let dir = tempfile::tempdir().unwrap();
    for names in [vec![], vec!["A,B".to_string()], vec![String::new()]] {
        let e = Recorder::new(dir.path(), names.clone())
            .err()
            .map(|e| e.to_string());
        assert!(e.is_some(), "{names:?} accepted");
    }
    // A file where the directory should be.
    let f = dir.path().join("file");
    std::fs::write(&f, "x").unwrap();
    let e = Recorder::new(&f, vec!["A".into()])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("file"), "{e}");
}

/// A cell lost (a cell at one fix, none at the next) is measured against its path's silence;
/// a path never heard, a modem that never had a cell, and one still without are not.
#[test]
fn cell_losses_are_timed_against_the_paths_silence() {
    use polycorn_net::context::CellLossDelay;
    use polycorn_proto::CellInfo;
    use polycorn_sched::Duration;
    let cells = |a: Option<u64>, b: Option<u64>| {
        vec![
            CellInfo {
                path: 0,
                cell: a,
                rsrp_dbm: a.map(|_| -90.0),
            },
            CellInfo {
                path: 1,
                cell: b,
                rsrp_dbm: b.map(|_| -90.0),
            },
        ]
    };
    let silence = |p: u8| match p {
        0 => Some(Duration::from_millis(1_300)),
        _ => None, // path 1 never heard
    };
    let mut d = CellLossDelay::default();
    assert!(d.on_fix(&cells(None, None), silence).is_empty());
    assert!(d.on_fix(&cells(Some(1), Some(7)), silence).is_empty());
    assert!(d.on_fix(&cells(Some(2), Some(7)), silence).is_empty());
    assert_eq!(
        d.on_fix(&cells(None, None), silence),
        [(0, Duration::from_millis(1_300))]
    );
    // Still without a cell: the same loss, not another.
    assert!(d.on_fix(&cells(None, None), silence).is_empty());
    // A fix that leaves a path out says nothing of it.
    assert!(d.on_fix(&cells(Some(3), Some(8))[..1], silence).is_empty());
    assert_eq!(
        d.on_fix(&cells(None, None)[..1], silence),
        [(0, Duration::from_millis(1_300))]
    );
}
