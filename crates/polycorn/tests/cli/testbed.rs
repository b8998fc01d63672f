//! Trips, the emulator and the testbed: generated trips, emulators killed and taken down, the
//! demo, paths from recorded traces, and `testbed calibrate`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

#[test]
fn trip_generate_writes_files_the_strict_parsers_accept() {
    use polycorn_link::trace::{DelaySeries, DeliveryTrace, Outages};
    let dir = std::env::temp_dir().join(format!("polycorn-tripgen-{}", std::process::id()));
    let out = polycorn(&[
        "trip",
        "generate",
        "--preset",
        "ktx",
        "--route-seed",
        "3",
        "--trip-seed",
        "4",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for carrier in ["KT", "SKT"] {
        for dir_name in ["down", "up"] {
            let name = dir.join(format!("{carrier}.{dir_name}"));
            let text = std::fs::read_to_string(&name).unwrap();
            let t = DeliveryTrace::parse(name.to_str().unwrap(), &text).unwrap();
            assert!(t.opportunity_count() > 1000, "{name:?}");
        }
        let name = dir.join(format!("{carrier}.delay.csv"));
        DelaySeries::parse(
            name.to_str().unwrap(),
            &std::fs::read_to_string(&name).unwrap(),
        )
        .unwrap();
        let name = dir.join(format!("{carrier}.outages.csv"));
        Outages::parse(
            name.to_str().unwrap(),
            &std::fs::read_to_string(&name).unwrap(),
        )
        .unwrap();
    }
    let ctx = std::fs::read_to_string(dir.join("context.csv")).unwrap();
    assert!(ctx.starts_with(
        "t_ms,lat,lon,speed_mps,heading_deg,cell_KT,rsrp_dbm_KT,cell_SKT,rsrp_dbm_SKT\n"
    ));
    assert!(ctx.lines().count() > 60, "1 Hz over a 70 s run");
    let ho = std::fs::read_to_string(dir.join("handovers.csv")).unwrap();
    assert!(ho.lines().count() > 4, "{ho}");
    // Same seeds, same files.
    let again = dir.with_extension("again");
    assert!(polycorn(&[
        "trip",
        "generate",
        "--preset",
        "ktx",
        "--route-seed",
        "3",
        "--trip-seed",
        "4",
        "--out",
        again.to_str().unwrap()
    ])
    .status
    .success());
    assert_eq!(
        std::fs::read(dir.join("KT.down")).unwrap(),
        std::fs::read(again.join("KT.down")).unwrap()
    );
    assert_eq!(
        std::fs::read(dir.join("handovers.csv")).unwrap(),
        std::fs::read(again.join("handovers.csv")).unwrap()
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&again);
}

#[test]
fn a_killed_emulator_and_down_leave_nothing_behind() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let name = "pct-cli";
    let _ = polycorn(&["testbed", "down", "--name", name]);
    let up = polycorn(&[
        "testbed",
        "up",
        "--name",
        name,
        "--constant-mbit",
        "10",
        "--paths",
        "2",
    ]);
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let state = std::fs::read_to_string(format!("/run/polycorn/testbed-{name}.json")).unwrap();
    let pid: u32 = state
        .split("\"emulator_pid\":")
        .nth(1)
        .and_then(|r| {
            r.trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|d| d.parse().ok())
        })
        .expect("emulator PID recorded");
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "emulator running"
    );
    // The emulator carries traffic: ping proxy from relay over path 1.
    let ping = Command::new("ip")
        .args([
            "netns",
            "exec",
            &format!("{name}-relay"),
            "ping",
            "-c",
            "3",
            "-i",
            "0.2",
            "-I",
            "10.100.1.1",
            "10.100.1.2",
        ])
        .output()
        .unwrap();
    assert!(
        ping.status.success(),
        "{}",
        String::from_utf8_lossy(&ping.stdout)
    );
    // A crash: SIGKILL, no cleanup of its own.
    assert!(Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    std::thread::sleep(std::time::Duration::from_millis(200));
    let down = polycorn(&["testbed", "down", "--name", name]);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    let ns = namespaces();
    assert!(!ns.contains(name), "namespaces left: {ns}");
    assert!(!std::path::Path::new(&format!("/run/polycorn/testbed-{name}.json")).exists());
    assert!(
        !std::path::Path::new(&format!("/run/polycorn/emu-{name}.log")).exists(),
        "emulator log left behind"
    );
    // The killed process is reaped by init, not left running (a zombie would still be 'Z').
    let alive =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "));
    assert!(!alive, "emulator process {pid} still running");
    // No veth or TUN of the testbed left in the root namespace.
    let links = String::from_utf8_lossy(
        &Command::new("ip")
            .args(["-o", "link"])
            .output()
            .unwrap()
            .stdout,
    )
    .to_string();
    assert!(!links.contains("tmp-pc-"), "{links}");
}

#[test]
fn demo_runs_every_scenario() {
    let out = polycorn(&["demo"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for s in ["== tail", "== handover", "== blackout", "== idle"] {
        assert!(text.contains(s), "missing {s}");
    }
}

#[test]
fn testbed_paths_from_recorded_traces() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let _quiet = machine_to_myself();
    let dir = std::env::temp_dir().join(format!("polycorn-traces-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // 12 Mbit/s: one 1500-byte opportunity per millisecond, 1 s looping.
    let mm = dir.join("flat.down");
    std::fs::write(
        &mm,
        (1..=1000).map(|m| format!("{m}\n")).collect::<String>(),
    )
    .unwrap();
    let csv = dir.join("log.csv");
    // A G-NetTrack log whose pings' smallest RTT is 60 ms (the first second has none).
    let rows: String = (0..5)
        .map(|s| {
            format!(
                "2020.02.13_13.03.{:02},-8.3,51.9,0,B,12,5G,-100,-13,1,13,-103,20000,100,D,{p},{p}\n",
                10 + s,
                p = if s == 0 { "-" } else { "60" }
            )
        })
        .collect();
    std::fs::write(&csv, format!("Timestamp,Longitude,Latitude,Speed,Operatorname,CellID,NetworkMode,RSRP,RSRQ,SNR,CQI,RSSI,DL_bitrate,UL_bitrate,State,PINGAVG,PINGMIN\n{rows}")).unwrap();
    let name = "pct-trace";
    let _ = polycorn(&["testbed", "down", "--name", name]);
    // `count` pings relay -> proxy over path `i`, `interval` s apart, each waited for 1 s.
    let ping = |i: usize, count: &str, interval: &str| {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &format!("{name}-relay"),
                "ping",
                "-q",
                "-c",
                count,
                "-i",
                interval,
                "-W",
                "1",
                "-I",
                &format!("10.100.{i}.1"),
                &format!("10.100.{i}.2"),
            ])
            .output()
            .unwrap()
    };
    // Idle ping RTT of each path (ms, the smallest of 5: the path's delay, not the
    // scheduling jitter of a busy 2-core machine).
    let rtts = || -> Vec<f64> {
        (0..2)
            .map(|i| {
                let out = ping(i, "5", "0.2");
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                assert!(out.status.success(), "path {i}: {text}");
                // rtt min/avg/max/mdev = a/b/c/d ms
                let stats = text.rsplit(" = ").next().unwrap();
                stats.split('/').next().unwrap().parse().unwrap()
            })
            .collect()
    };
    // Without --delay-ms: the mahimahi path 20 ms each way, the log's path half its PINGMIN.
    // Then one value per path. Each RTT within 4 ms of twice the delay (opportunities are
    // 1 ms apart here; the log's 20 Mbit/s ones closer).
    for (delay, want) in [(None, [40.0, 60.0]), (Some("10,40"), [20.0, 80.0])] {
        let mut args = vec![
            "testbed",
            "up",
            "--name",
            name,
            "--trace",
            mm.to_str().unwrap(),
            "--trace",
            csv.to_str().unwrap(),
        ];
        if let Some(d) = delay {
            args.extend(["--delay-ms", d]);
        }
        let up = polycorn(&args);
        assert!(
            up.status.success(),
            "{}",
            String::from_utf8_lossy(&up.stderr)
        );
        let got = rtts();
        assert!(polycorn(&["testbed", "down", "--name", name])
            .status
            .success());
        for (g, w) in got.iter().zip(want) {
            assert!(
                *g >= w - 0.5 && *g <= w + 4.0,
                "--delay-ms {delay:?}: RTT {got:?}, want {want:?}"
            );
        }
    }
    // Outages beside a trace loop with it: dark half of every 2 s, so about half the pings
    // (sent 10 per second) get no answer — and the testbed says what it read.
    let dark = dir.join("dark.down");
    std::fs::write(
        &dark,
        (1..=2000).map(|m| format!("{m}\n")).collect::<String>(),
    )
    .unwrap();
    std::fs::write(dir.join("dark.outages.csv"), "start_ms,end_ms\n500,1500\n").unwrap();
    let up = polycorn(&[
        "testbed",
        "up",
        "--name",
        name,
        "--trace",
        dark.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&up.stderr).into_owned();
    assert!(up.status.success(), "{stderr}");
    assert!(
        stderr.contains("dark.outages.csv (1 outages, 1.0 s dark per 2.0 s loop)"),
        "{stderr}"
    );
    let dark_ping = ping(0, "40", "0.1");
    assert!(polycorn(&["testbed", "down", "--name", name])
        .status
        .success());
    let text = String::from_utf8_lossy(&dark_ping.stdout).into_owned();
    let received: u32 = text
        .split(" received")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no ping summary: {text}"));
    assert!(
        (10..=30).contains(&received),
        "{received} of 40 answered: {text}"
    );
    // A delay count that fits neither one nor every path is refused before anything is made.
    let out = polycorn(&[
        "testbed",
        "up",
        "--name",
        name,
        "--trace",
        mm.to_str().unwrap(),
        "--delay-ms",
        "10,20,30",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("3 values for 1 paths"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!namespaces().contains(name));
    // A malformed trace is refused with file:line, and nothing is left behind.
    let bad = dir.join("bad.down");
    std::fs::write(&bad, "1\n2\nx\n").unwrap();
    let out = polycorn(&[
        "testbed",
        "up",
        "--name",
        name,
        "--trace",
        bad.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bad.down:3: not a non-negative integer"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ns = namespaces();
    assert!(!ns.contains(name), "{ns}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `testbed calibrate` (cubic only, 15 s per run, route 1) in real namespaces under the
/// testbed name `name` with `extra` arguments, asserts it succeeded and left no namespace
/// behind, and returns its stdout and output directory.
fn calibrate_in_namespaces(name: &str, port: &str, extra: &[&str]) -> (String, PathBuf) {
    let dir = std::env::temp_dir().join(format!("polycorn-{name}-{}", std::process::id()));
    let _ = polycorn(&["testbed", "down", "--name", name]);
    let mut args = vec![
        "testbed",
        "calibrate",
        "--preset",
        "hsr",
        "--minutes",
        "0.25",
        "--cc",
        "cubic",
        "--model-trips",
        "2",
        "--name",
        name,
        "--port",
        port,
        "--out",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = polycorn(&args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ns = namespaces();
    assert!(!ns.contains(name), "{ns}");
    (stdout, dir)
}

/// The 1 s windows behind carrier A's throughput quartiles under cubic in a calibration table.
fn throughput_windows(t: &serde_json::Value) -> u64 {
    column_windows(t, "cubic")
}

/// The 1 s windows behind carrier A's throughput quartiles in `column` of a calibration table.
fn column_windows(t: &serde_json::Value, column: &str) -> u64 {
    measured(t, "downlink throughput p50 (Mbit/s)", "A", column)["n"]
        .as_u64()
        .unwrap()
}

/// The cell of `metric` for `carrier` in `column` of a calibration table.
fn measured<'a>(
    t: &'a serde_json::Value,
    metric: &str,
    carrier: &str,
    column: &str,
) -> &'a serde_json::Value {
    &t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == metric && r["carrier"] == carrier)
        .unwrap_or_else(|| panic!("no row {metric} of {carrier}: {t}"))["measured"][column]
}

/// Each run in `dir/<sub>` has its raw samples and its own table with windows measured, and
/// the pooled table counts exactly the runs' windows together.
fn assert_pooled_over_runs(dir: &Path, pooled: &serde_json::Value, subs: &[&str]) {
    let per_run: Vec<u64> = subs
        .iter()
        .map(|sub| {
            let d = dir.join(sub);
            for f in ["goodput-cubic.csv", "ss-cubic.csv", "table.txt"] {
                assert!(d.join(f).exists(), "{} missing", d.join(f).display());
            }
            throughput_windows(&read_json(&d.join("table.json")))
        })
        .collect();
    assert!(per_run.iter().all(|n| *n >= 5), "{per_run:?}");
    assert_eq!(throughput_windows(pooled), per_run.iter().sum::<u64>());
}

/// `testbed calibrate --trips 2` measures two trips in real namespaces, pools their samples
/// (the pooled table counts every trip's windows), writes each trip's own table, and removes
/// its testbed.
#[test]
fn calibrate_over_two_trips_pools_their_samples_and_leaves_nothing_behind() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let (stdout, dir) = calibrate_in_namespaces(
        "pct-cal",
        "5900",
        &["--trip-seed", "3", "--trips", "2", "--sim", "also"],
    );
    assert!(stdout.contains("trips 3-4, samples pooled"), "{stdout}");
    let pooled = read_json(&dir.join("table.json"));
    assert_eq!(pooled["trips"].as_array().unwrap().len(), 2, "{pooled}");
    assert_eq!(pooled["complete"], true);
    // `--sim also`: the simulator's column beside the emulated one, over the same windows.
    assert_eq!(pooled["ccs"], serde_json::json!(["cubic", "sim-cubic"]));
    let sim_windows = column_windows(&pooled, "sim-cubic");
    assert!(
        sim_windows.abs_diff(throughput_windows(&pooled)) <= 2,
        "{sim_windows} simulated windows: {pooled}"
    );
    assert!(
        dir.join("trip-3").join("ss-sim-cubic.csv").exists(),
        "the simulated run's raw samples"
    );
    assert!(
        pooled["polycorn_version"]
            .as_str()
            .is_some_and(|v| v.starts_with(env!("CARGO_PKG_VERSION"))),
        "{pooled}"
    );
    assert_pooled_over_runs(&dir, &pooled, &["trip-3", "trip-4"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--all-stretches` measures both of route 1's stretches above 250 km/h as runs of their own,
/// the second from well after the first (the slow-down between them is not emulated), and
/// pools their samples.
#[test]
fn calibrate_all_stretches_measures_each_stretch_at_speed_and_pools_them() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let (stdout, dir) =
        calibrate_in_namespaces("pct-cas", "6000", &["--trip-seed", "2", "--all-stretches"]);
    assert!(
        stdout.contains("2 stretches at speed, samples pooled"),
        "{stdout}"
    );
    let pooled = read_json(&dir.join("table.json"));
    assert_eq!(pooled["all_stretches"], true);
    let runs = pooled["trips"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{pooled}");
    let at = |k: usize, f: &str| runs[k][f].as_u64().unwrap();
    assert_eq!((at(0, "stretch"), at(1, "stretch")), (1, 2));
    assert!(
        at(1, "offset_ms") > at(0, "offset_ms") + 250_000,
        "the second stretch starts after the first one's 250+ s at speed: {pooled}"
    );
    assert_pooled_over_runs(&dir, &pooled, &["trip-2-stretch-1", "trip-2-stretch-2"]);
    // `--model-only` plans the same windows: its trip-model column is the measured run's.
    let model = calibrate_model_only(&["--trip-seed", "2", "--all-stretches", "--minutes", "0.25"]);
    assert_eq!(
        model_column(&model),
        model_column(&pooled),
        "{model}\n{pooled}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `testbed calibrate --model-only` (route 1, 2 model trips) with `extra` arguments and
/// returns its table.json.
fn calibrate_model_only(extra: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "testbed",
        "calibrate",
        "--preset",
        "hsr",
        "--model-only",
        "--model-trips",
        "2",
        "--out",
        dir.path().to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = polycorn(&args);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for f in ["table.txt", "table.csv"] {
        assert!(dir.path().join(f).exists(), "{f} missing");
    }
    read_json(&dir.path().join("table.json"))
}

/// `(metric, carrier, trip model value)` of every row with a trip-model value.
fn model_column(t: &serde_json::Value) -> Vec<(String, String, f64)> {
    t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| {
            Some((
                r["metric"].as_str()?.to_string(),
                r["carrier"].as_str()?.to_string(),
                r["trip_model"].as_f64()?,
            ))
        })
        .collect()
}

/// `--model-only` builds no testbed: the trip model's column over the planned stretches of
/// two trips, with nothing measured.
#[test]
fn calibrate_model_only_reports_the_trip_model_without_a_testbed() {
    // (Other tests build testbeds at the same time, so the namespace list is not compared.)
    let t = calibrate_model_only(&["--trip-seed", "3", "--trips", "2", "--all-stretches"]);
    assert_eq!(t["model_only"], true);
    let runs = t["trips"].as_array().unwrap();
    assert_eq!(runs.len(), 4, "two stretches of two trips: {t}");
    assert!(
        runs.iter()
            .all(|r| r["measured_s"].as_f64().unwrap() > 200.0),
        "{t}"
    );
    let column = model_column(&t);
    let capacity = |q: &str, c: &str| {
        column
            .iter()
            .find(|(m, k, _)| m == &format!("downlink throughput {q} (Mbit/s)") && k == c)
            .unwrap_or_else(|| panic!("no {q} of {c}: {t}"))
            .2
    };
    for c in ["A", "B"] {
        assert!(
            0.0 < capacity("p25", c) && capacity("p25", c) < capacity("p50", c),
            "{t}"
        );
        assert!(capacity("p50", c) < capacity("p75", c), "{t}");
    }
    let rows = t["rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .all(|r| r["measured"].as_object().is_none_or(|m| m.is_empty())),
        "nothing is measured: {t}"
    );
    // Handover statistics are judged from the model as in a measured run.
    assert!(rows.iter().any(|r| r["metric"]
        .as_str()
        .unwrap()
        .starts_with("handover interval")
        && r["trip_model_within_tolerance"].is_boolean()));
}

/// `--sim only` runs the simulator's TCP model alone over the planned windows, without a
/// testbed or root: a `sim-<cc>` column per congestion control, with throughput below the
/// trip model's capacity and RTTs above its idle RTT, and the same table from the same seeds.
#[test]
fn calibrate_sim_only_measures_the_simulated_tcp_without_a_testbed() {
    let run = || {
        let dir = tempfile::tempdir().unwrap();
        let out = polycorn(&[
            "testbed",
            "calibrate",
            "--preset",
            "hsr",
            "--minutes",
            "0.5",
            "--model-trips",
            "2",
            "--trip-seed",
            "3",
            "--sim",
            "only",
            "--out",
            dir.path().to_str().unwrap(),
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("s simulated from trip time"), "{stdout}");
        assert!(dir.path().join("ss-sim-bbr.csv").exists());
        read_json(&dir.path().join("table.json"))
    };
    let t = run();
    assert_eq!(t["ccs"], serde_json::json!(["sim-bbr", "sim-cubic"]));
    for column in ["sim-bbr", "sim-cubic"] {
        for c in ["A", "B"] {
            let tput = measured(&t, "downlink throughput p50 (Mbit/s)", c, column)["value"]
                .as_f64()
                .unwrap();
            let rtt = measured(&t, "RTT p50 (ms)", c, column)["value"]
                .as_f64()
                .unwrap();
            assert!(
                tput > 0.5 && rtt > 20.0,
                "{column} {c}: {tput} Mbit/s, {rtt} ms: {t}"
            );
        }
        assert!(column_windows(&t, column) >= 20, "{t}");
    }
    let rows = |t: &serde_json::Value| t["rows"].clone();
    assert_eq!(rows(&t), rows(&run()), "the same seeds give the same table");
    // A congestion control the simulator lacks is named.
    let out = polycorn(&[
        "testbed",
        "calibrate",
        "--preset",
        "hsr",
        "--cc",
        "reno",
        "--sim",
        "only",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`reno` is not simulated"), "{err}");
}
