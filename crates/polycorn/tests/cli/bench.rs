//! The bench: pooling, real datasets, recorded traces, uploads, and `net bench`.

use crate::support::*;

/// `bench pool` parses as a subcommand beside the bench's own options and names what it
/// cannot read (pooling real rides is tested in the bench's unit tests).
#[test]
fn bench_pool_names_what_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing-here");
    let out = polycorn(&["bench", "pool", missing.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: ") && err.contains("nothing-here: no such directory"),
        "{err}"
    );
    let out = polycorn(&["bench", "pool", dir.path().to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("not a bench output directory"),
        "{err}"
    );
    // `--systems` is checked before any ride is read.
    let out = polycorn(&[
        "bench",
        "pool",
        dir.path().to_str().unwrap(),
        "--systems",
        "hrsch;",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("an empty system name"),
        "{err}"
    );
    // No directory at all is a usage error, not a run of the bench.
    let out = polycorn(&["bench", "pool"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage"));
}

#[test]
fn compare_real_names_a_missing_dataset_and_reads_the_real_one_when_present() {
    let out = polycorn(&[
        "testbed",
        "compare-real",
        "--hsr-mptcp",
        "/nonexistent/hsr-mptcp",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/hsr-mptcp"), "{err}");
    let data =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/hsr-mptcp");
    if !data.is_dir() {
        eprintln!("{} absent: the real-data half skipped", data.display());
        return;
    }
    let out = polycorn(&[
        "testbed",
        "compare-real",
        "--hsr-mptcp",
        data.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("real HSR MPTCP (hsr-mptcp, 2018)"), "{t}");
    assert!(t.contains("(12/12)"), "{t}");
}

/// A researcher runs the bench on their own recorded paths: two mahimahi traces become two
/// paths, every system replays them, and the results say where they came from. A bad trace is
/// refused before anything is built, naming the file and the line.
#[test]
fn bench_runs_on_recorded_traces_and_names_them() {
    let dir = tempfile::tempdir().unwrap();
    // 12 Mbit/s (one 1500-byte opportunity per ms) and 6 Mbit/s with a 1 s gap every 4 s.
    let fast = dir.path().join("fast.down");
    let slow = dir.path().join("slow.down");
    std::fs::write(
        &fast,
        (1..=1000).map(|m| format!("{m}\n")).collect::<String>(),
    )
    .unwrap();
    std::fs::write(
        &slow,
        (1..=4000)
            .filter(|m| m % 2 == 0 && *m <= 3000)
            .map(|m| format!("{m}\n"))
            .chain(std::iter::once("4000\n".to_string()))
            .collect::<String>(),
    )
    .unwrap();
    let bad = dir.path().join("bad.down");
    std::fs::write(&bad, "1\n2\nsoon\n").unwrap();
    let out = polycorn(&[
        "bench",
        "--trace",
        fast.to_str().unwrap(),
        "--trace",
        bad.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.down:3"), "{err}");
    // A trace and a preset's trip cannot both be the conditions.
    let out = polycorn(&[
        "bench",
        "--trace",
        fast.to_str().unwrap(),
        "--trip-seed",
        "3",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if !is_root() {
        eprintln!("skipping the run: needs root");
        return;
    }
    let res = dir.path().join("out");
    let out = polycorn(&[
        "bench",
        "--quick",
        "--trace",
        fast.to_str().unwrap(),
        "--trace",
        slow.to_str().unwrap(),
        "--delay-ms",
        "30,45",
        "--systems",
        "vanilla",
        "--workloads",
        "im",
        "--trips",
        "2",
        "--name",
        "pctrc",
        "--out",
        res.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout
            .matches("outputs complete and consistent (1 systems)")
            .count(),
        2,
        "{stdout}"
    );
    assert!(res.join("pooled.json").exists());
    // Summaries name the traces, not a route or handover settings they do not have.
    assert!(
        stdout.contains("| recorded traces (traces-") && stdout.contains(": fast, slow) ride 2 "),
        "{stdout}"
    );
    assert!(
        stdout.contains("of recorded traces (traces-") && !stdout.contains("route 0"),
        "{stdout}"
    );
    let html = std::fs::read_to_string(res.join("trip-1").join("report.html")).unwrap();
    assert!(
        html.contains("<b>recorded traces</b>")
            && html.contains("no handovers")
            && html.contains("one-way delay fast: 30 ms; slow: 45 ms"),
        "report header"
    );
    assert!(
        stdout.contains("one-way delay: fast: 30 ms; slow: 45 ms"),
        "{stdout}"
    );
    // Ride k replays the k-th window of the traces.
    let mut from = Vec::new();
    for ride in ["trip-1", "trip-2"] {
        let r = read_json(&res.join(ride).join("results.json"));
        assert_eq!(r["meta"]["preset"], "traces", "{}", r["meta"]);
        assert!(r["meta"]["trip_model"]
            .as_str()
            .is_some_and(|m| m.starts_with("traces-")));
        assert_eq!(r["meta"]["carriers"], serde_json::json!(["fast", "slow"]));
        assert!(r["meta"]["handover_prediction"]
            .as_str()
            .is_some_and(|p| p.starts_with("none: recorded traces")));
        assert_eq!(
            r["meta"]["path_delays"],
            serde_json::json!(["fast: 30 ms", "slow: 45 ms"])
        );
        assert_eq!(
            r["meta"]["trace_files"],
            serde_json::json!([fast.to_str().unwrap(), slow.to_str().unwrap()])
        );
        assert_eq!(r["runs"][0]["late_paths"], serde_json::json!([]));
        assert_eq!(r["trip"]["handovers"], serde_json::json!([]));
        from.push(r["meta"]["window_from_s"].as_f64().unwrap());
        // Every answer came back, no faster than the faster path's round trip (2 x 30 ms).
        for run in r["runs"].as_array().unwrap() {
            let im = run["im_messages"].as_array().unwrap();
            assert!(!im.is_empty(), "{run}");
            for m in im {
                // [users, user, message, sent s, delivery s]
                let d = m[4].as_f64().unwrap_or_else(|| panic!("unanswered: {m}"));
                assert!(d >= 0.060, "{m}");
            }
        }
    }
    let window = read_json(&res.join("trip-1").join("results.json"))["meta"]["window_s"]
        .as_f64()
        .unwrap();
    assert_eq!(from[0], 0.0);
    assert!((from[1] - window).abs() < 0.011, "{from:?} window {window}");
    assert!(
        !namespaces().contains("pctrc"),
        "namespaces left: {}",
        namespaces()
    );
}

/// The simulator replays recorded paths as the bench does: a bad trace is refused before any
/// ride runs, naming the file and the line, and a trace excludes a preset's trip; two rides
/// are two consecutive windows of the traces, pooled, and `sim validate` refuses traces.
#[test]
fn sim_bench_runs_on_recorded_traces_and_refuses_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let fast = dir.path().join("fast.down");
    std::fs::write(
        &fast,
        (1..=1000).map(|m| format!("{m}\n")).collect::<String>(),
    )
    .unwrap();
    let bad = dir.path().join("bad.down");
    std::fs::write(&bad, "1\n2\nsoon\n").unwrap();
    let (fast, bad) = (fast.to_str().unwrap(), bad.to_str().unwrap());
    let out = polycorn(&["sim", "bench", "--trace", fast, "--trace", bad]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("bad.down:3"), "{err}");
    let out = polycorn(&["sim", "bench", "--trace", fast, "--preset", "ktx"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("cannot be used with"),
        "{err}"
    );
    let out = polycorn(&["sim", "validate", "--trace", fast]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("sim bench --trace"),
        "{err}"
    );
    let res = dir.path().join("out");
    let out = polycorn(&[
        "sim",
        "bench",
        "--quick",
        "--trace",
        fast,
        "--delay-ms",
        "25",
        "--systems",
        "vanilla",
        "--workloads",
        "im",
        "--rides",
        "2",
        "--threads",
        "1",
        "--out",
        res.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(res.join("pooled.json").exists());
    let mut from = Vec::new();
    for ride in ["trip-1", "trip-2"] {
        let r = read_json(&res.join(ride).join("results.json"));
        assert_eq!(r["meta"]["preset"], "traces", "{}", r["meta"]);
        assert_eq!(r["meta"]["trace_files"], serde_json::json!([fast]));
        assert_eq!(r["meta"]["path_delays"], serde_json::json!(["fast: 25 ms"]));
        from.push(r["meta"]["window_from_s"].as_f64().unwrap());
    }
    let window = read_json(&res.join("trip-1").join("results.json"))["meta"]["window_s"]
        .as_f64()
        .unwrap();
    assert_eq!(from[0], 0.0);
    assert!((from[1] - window).abs() < 0.011, "{from:?} window {window}");
}

/// Every completed download of an emulated ride gets a time budget from what relay, proxy,
/// emulator and client recorded: its parts add up to FCT − the oracle (as the plan has it)
/// within 5%, none but the rest is negative, and the summary and the report show them.
#[test]
fn bench_downloads_get_a_time_budget_that_adds_up() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("out");
    let out = polycorn(&[
        "bench",
        "--quick",
        "--systems",
        "vanilla",
        "--workloads",
        "bulk",
        "--bulk-flows",
        "3",
        "--name",
        "pcbud",
        "--out",
        res.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("bulk download budget"), "{stdout}");
    assert!(
        !stderr.contains("have a time budget, not the others"),
        "{stderr}"
    );
    let r = read_json(&res.join("results.json"));
    let plan = r["plan"]["bulk"].as_array().unwrap();
    let mut checked = 0;
    for f in r["runs"][0]["flows"].as_array().unwrap() {
        if f["ok"] != true {
            continue;
        }
        let b = &f["budget"];
        assert!(b.is_object(), "a completed download without a budget: {f}");
        let oracle = plan[f["idx"].as_u64().unwrap() as usize]["oracle_fct_s"]
            .as_f64()
            .unwrap();
        let excess = (f["fct_s"].as_f64().unwrap() - oracle) * 1e3;
        let parts = ["setup", "window", "queueing", "reorder", "stalls", "rest"]
            .map(|p| b[format!("{p}_ms")].as_f64().unwrap());
        let sum: f64 = parts.iter().sum();
        assert!(
            (sum - excess).abs() <= (0.05 * excess.abs()).max(1.0),
            "parts {parts:?} sum to {sum} ms, FCT − oracle is {excess} ms"
        );
        assert!(parts[..5].iter().all(|p| *p >= -1.0), "{parts:?}");
        checked += 1;
    }
    assert!(checked >= 2, "only {checked} downloads completed");
    let html = std::fs::read_to_string(res.join("report.html")).unwrap();
    assert!(html.contains("id=\"budget\""));
    let relay_log = std::fs::read_to_string(res.join("logs/vanilla/relay.log")).unwrap();
    assert!(relay_log.contains("flow marks"), "{relay_log}");
    assert!(
        !namespaces().contains("pcbud"),
        "namespaces left: {}",
        namespaces()
    );
}

/// A researcher benches uploads (the relay schedules them) over the emulated HSR trip: every
/// byte is checked at the server, every upload is timed by its arrival there and is never
/// faster than the oracle sending at every uplink's full capacity, the relay's scheduler did
/// the work, and nothing is left behind.
#[test]
fn bench_uploads_cross_the_relay_checked_and_timed_at_the_server() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let out = polycorn(&["bench", "--workloads", "upload", "--bulk-flows", "0"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--bulk-flows must be at least 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = polycorn(&["bench", "--bulk-gap-s", "0"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--bulk-gap-s 0: seconds between bulk flow starts must be 0.5 to 600"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("out");
    let out = polycorn(&[
        "bench",
        "--quick",
        "--systems",
        "vanilla;mptcp",
        "--workloads",
        "upload",
        "--bulk-flows",
        "3",
        "--name",
        "pcupl",
        "--out",
        res.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("outputs complete and consistent (2 systems)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("bulk uploads:") && stdout.contains("goodput ratio of uploads vs mptcp"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("bulk downloads") && !stdout.contains("instant messaging"),
        "{stdout}"
    );
    let r = read_json(&res.join("results.json"));
    assert_eq!(r["plan"]["uploads"].as_array().unwrap().len(), 3);
    assert!(r["plan"]["bulk"].as_array().unwrap().is_empty());
    let mut completed = 0;
    for run in r["runs"].as_array().unwrap() {
        let sys = run["system"].as_str().unwrap();
        assert!(run["flows"].as_array().unwrap().is_empty(), "{sys}");
        let ups = run["uploads"].as_array().unwrap();
        assert_eq!(ups.len(), 3, "{sys}");
        for (u, plan) in ups.iter().zip(r["plan"]["uploads"].as_array().unwrap()) {
            if u["ok"] != true {
                eprintln!("{sys}: upload {} not complete: {}", u["idx"], u["error"]);
                continue;
            }
            completed += 1;
            let (fct, oracle) = (
                u["fct_s"].as_f64().unwrap(),
                plan["oracle_fct_s"].as_f64().unwrap(),
            );
            // The oracle has no handshake, so TCP's is margin enough; 5 ms more for the
            // client's timer waking after the planned start.
            assert!(
                fct >= oracle - 0.005,
                "{sys}: upload {u} faster than its oracle {oracle}"
            );
            // Timed at the server: its bins hold every byte.
            let bytes: u64 = u["bins_100ms"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap())
                .sum();
            assert_eq!(bytes, u["size"].as_u64().unwrap(), "{sys}: {u}");
        }
        assert!(run["path_up_bytes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b.as_u64() > Some(0)));
    }
    // The 256 KB uploads at least get through on both systems.
    assert!(completed >= 2, "{completed} uploads completed");
    // The relay's scheduler placed the uploads.
    let vanilla = &r["runs"][0];
    let relay_decisions: f64 = vanilla["counters"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("relay:polycorn_stage_decisions_total"))
        .map(|(_, v)| v.as_f64().unwrap())
        .sum();
    assert!(relay_decisions > 0.0, "{}", vanilla["counters"]);
    let csv = std::fs::read_to_string(res.join("uploads.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 2 * 3, "{csv}");
    let html = std::fs::read_to_string(res.join("report.html")).unwrap();
    assert!(html.contains("id=\"upload-ratio-vs-mptcp\""));
    assert!(
        !namespaces().contains("pcupl"),
        "namespaces left: {}",
        namespaces()
    );
}

/// `net bench`: relay + proxy (TLS subflows over two veth paths, transparent interception) and
/// kernel MPTCP each carry a bulk download and a bulk upload; every row is measured at its
/// receiver, the ratios are printed and no namespace is left. (What the numbers are is the
/// bench's business, not this test's: it checks the pipeline.)
#[test]
fn net_bench_measures_both_systems_both_ways_and_leaves_nothing_behind() {
    if !is_root() {
        eprintln!("skipping: needs root");
        return;
    }
    let _quiet = machine_to_myself();
    let name = "pcnb-cli";
    let out = polycorn(&["net", "bench", "--secs", "1", "--name", name]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for system in ["polycorn (hrsch, TLS 1.3)", "kernel MPTCP (plain)"] {
        for direction in ["down", "up"] {
            let gbit: f64 = stdout
                .lines()
                .filter_map(|l| l.strip_prefix(system))
                .map(str::split_whitespace)
                .find_map(|mut f| (f.next() == Some(direction)).then(|| f.next()?.parse().ok())?)
                .unwrap_or_else(|| panic!("no {system} {direction} row: {stdout}"));
            // The bench itself fails when a row's receiver got nothing; a row may still print
            // 0.00 when the transfer stalled for most of its one second (seen with kernel MPTCP
            // on the unshaped veth paths while both cores were busy), which is a measurement,
            // not a broken pipeline.
            assert!(
                gbit.is_finite() && gbit >= 0.0,
                "{system} {direction}: {gbit} Gbit/s\n{stdout}"
            );
        }
    }
    for direction in ["down", "up"] {
        assert!(
            stdout.contains(&format!("polycorn / kernel MPTCP, {direction}: ")),
            "{stdout}"
        );
    }
    assert!(!namespaces().contains(name), "{}", namespaces());
    // A bad duration is refused before anything is built.
    let out = polycorn(&["net", "bench", "--secs", "0", "--name", name]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--secs must be a positive number"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
