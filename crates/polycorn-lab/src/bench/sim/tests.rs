use clap::Parser;

use super::*;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: RideArgs,
}

fn args(extra: &[&str]) -> RideArgs {
    let mut v = vec![
        "sim",
        "--quick",
        "--bulk-flows",
        "3",
        "--workloads",
        "bulk,im",
    ];
    v.extend_from_slice(extra);
    Cli::parse_from(v).args
}

fn json_without_start(r: &report::Results) -> String {
    let mut j = r.to_json();
    j["meta"]["started"] = serde_json::Value::Null;
    serde_json::to_string(&j).unwrap()
}

/// The same ride simulated twice gives the same results.json, byte for byte (but for the
/// wall-clock start).
#[test]
fn a_simulated_ride_is_the_same_every_time() {
    let a = args(&["--systems", "vanilla,hrsch"]);
    let systems = sim_systems(&a).unwrap();
    let params = a.plan_params().unwrap();
    let perfect = SimPrediction {
        predictor: SimPredictor::Perfect,
        linkdb: None,
    };
    let one = simulate_ride(&a, None, &systems, 1, &params, &perfect).unwrap();
    let two = simulate_ride(&a, None, &systems, 1, &params, &perfect).unwrap();
    assert_eq!(json_without_start(&one), json_without_start(&two));
    assert_eq!(one.runs.len(), 2);
    let run = &one.runs[0];
    assert_eq!(run.flows.len(), 3);
    assert!(run.flows.iter().any(|f| f.ok), "{:?}", run.flows);
    assert!(run.im.iter().any(|m| m.delivery_s.is_some()));
    assert!(run.path_down_bytes.iter().sum::<u64>() > 5 << 20);
}

#[test]
fn kernel_mptcp_is_refused_and_left_out_by_default() {
    let e = sim_systems(&args(&["--systems", "mptcp"])).unwrap_err();
    assert!(e.to_string().contains("not simulated"), "{e}");
    let names: Vec<String> = sim_systems(&args(&[]))
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["single", "vanilla", "hrsch"]);
}

/// A simulated ride's outputs pass the bench's own consistency check.
#[test]
fn simulated_outputs_are_complete() {
    let a = args(&["--systems", "vanilla", "--workloads", "bulk"]);
    let systems = sim_systems(&a).unwrap();
    let r = simulate_ride(
        &a,
        None,
        &systems,
        2,
        &a.plan_params().unwrap(),
        &SimPrediction::none(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_ride(dir.path(), &r).unwrap();
    assert!(dir.path().join("results.json").exists());
    assert!(dir.path().join("report.html").exists());
}

/// Every completed download of a quick simulated ride has a budget, and its parts add up to
/// its FCT − oracle (the oracle as the report computes it) within 5%.
#[test]
fn every_simulated_download_has_a_budget_that_adds_up() {
    let a = args(&["--systems", "vanilla,hrsch,polycorn", "--workloads", "bulk"]);
    let systems = sim_systems(&a).unwrap();
    let r = simulate_ride(
        &a,
        None,
        &systems,
        1,
        &a.plan_params().unwrap(),
        &SimPrediction::none(),
    )
    .unwrap();
    let mut checked = 0;
    for run in &r.runs {
        for f in &run.flows {
            assert_eq!(f.ok, f.budget.is_some(), "{}: {f:?}", run.system);
            r.check_budget(f)
                .unwrap_or_else(|e| panic!("{}: flow {}: {e:#}", run.system, f.idx));
            if let Some(b) = f.budget {
                let oracle = r.oracle[&f.idx].unwrap();
                let excess = (f.fct_s - oracle) * 1e3;
                assert!((b.excess_ms - excess).abs() < 1.0, "{b:?} vs {excess}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 6, "only {checked} flows completed");
    let t = report::table(&r);
    assert!(t.contains("bulk download budget"), "{t}");
    let j = r.to_json();
    assert!(j["runs"][0]["flows"][0]["budget"]["queueing_ms"].is_number());
    assert!(j["runs"][0]["bulk"]["262144"]["budget"]["mean"]["rest_ms"].is_number());
}

/// On a quick HSR ride with the trip's ground truth as the predictor, HRSCH's HPR holds data
/// back from paths about to fail (its stage moves at the proxy), the relay's context reaches
/// the proxy, and `meta.prediction` names the predictor.
#[test]
fn hpr_throttles_on_a_simulated_hsr_ride_with_the_perfect_predictor() {
    let a = args(&["--systems", "hrsch"]);
    let systems = sim_systems(&a).unwrap();
    let perfect = SimPrediction {
        predictor: SimPredictor::Perfect,
        linkdb: None,
    };
    let r = simulate_ride(&a, None, &systems, 1, &a.plan_params().unwrap(), &perfect).unwrap();
    assert!(
        r.meta.prediction.starts_with("perfect"),
        "{}",
        r.meta.prediction
    );
    let hpr = r.runs[0]
        .counters
        .get("proxy:polycorn_stage_decisions_total{stage=\"hpr\"}")
        .copied()
        .unwrap_or(0.0);
    assert!(hpr > 0.0, "{:?}", r.runs[0].counters);
}

/// `dir/name.down` (and `name.up` when `up_every_ms` is given): mahimahi traces with one
/// 1500-byte opportunity every `every_ms` ms over a `period_ms` loop.
fn mahimahi(
    dir: &std::path::Path,
    name: &str,
    down_every_ms: u64,
    up_every_ms: Option<u64>,
    period_ms: u64,
) -> std::path::PathBuf {
    let write = |ext: &str, every: u64| {
        let text: String = (1..=period_ms / every)
            .map(|k| format!("{}\n", k * every))
            .collect();
        let f = dir.join(format!("{name}.{ext}"));
        std::fs::write(&f, text).unwrap();
        f
    };
    if let Some(every) = up_every_ms {
        write("up", every);
    }
    write("down", down_every_ms)
}

/// A quick ride on two recorded paths (`--trace`), cut and described as `polycorn bench
/// --trace` cuts them: every download completes, the metadata names the files, delays and the
/// default queue and no predictor, the oracle sends at the traces' capacity, and ride k is the
/// k-th consecutive window.
#[test]
fn a_ride_on_recorded_traces_runs_on_their_capacity() {
    let d = tempfile::tempdir().unwrap();
    // 12 Mbit/s down and 6 Mbit/s up; 4 Mbit/s both ways.
    let fast = mahimahi(d.path(), "fast", 1, Some(2), 1000);
    let slow = mahimahi(d.path(), "slow", 3, None, 3000);
    let a = Cli::parse_from([
        "sim",
        "--quick",
        "--bulk-flows",
        "3",
        "--workloads",
        "bulk",
        "--systems",
        "vanilla,polycorn",
        "--trace",
        fast.to_str().unwrap(),
        "--trace",
        slow.to_str().unwrap(),
        "--delay-ms",
        "15,40",
    ])
    .args;
    let traces = a.load_traces().unwrap().expect("--trace given");
    let systems = sim_systems(&a).unwrap();
    let params = a.plan_params().unwrap();
    // The predictor asked for is not used: traces have no train.
    let perfect = SimPrediction {
        predictor: SimPredictor::Perfect,
        linkdb: None,
    };
    let r = simulate_ride(&a, Some(&traces), &systems, 1, &params, &perfect).unwrap();
    let m = &r.meta;
    assert_eq!(m.preset, report::TRACES_PRESET);
    assert_eq!(m.trip_model.as_deref(), Some(traces.id.as_str()));
    assert_eq!(
        m.trace_files,
        [fast.display().to_string(), slow.display().to_string()]
    );
    assert_eq!(m.carriers, ["fast", "slow"]);
    assert_eq!(m.path_delays, ["fast: 15 ms", "slow: 40 ms"]);
    assert!(m.path_outages.is_empty());
    assert_eq!(
        m.queue_bytes,
        Some(polycorn_emu::models::DEFAULT_QUEUE_BYTES)
    );
    assert_eq!((m.route_seed, m.trip_seed, m.from_s), (0, 1, 0.0));
    assert_eq!(m.handover_interruption, "none");
    assert!(
        m.prediction.starts_with("none: recorded traces"),
        "{}",
        m.prediction
    );
    assert!(r.handovers.is_empty());
    // The report's capacity view is the traces': 12 and 4 Mbit/s every second.
    for (p, want) in [(0, 12.0), (1, 4.0)] {
        assert!(
            r.capacity[p].iter().all(|c| (c - want).abs() < 0.02),
            "path {p}: {:?}",
            r.capacity[p]
        );
    }
    // 16 Mbit/s down in all: the oracle's request takes the faster path's 15 ms, then sends
    // at 2 MB/s; its last byte arrives a step and at most the slower path's delay later.
    for f in &r.plan.bulk {
        let oracle = r.oracle[&f.idx].expect("an oracle");
        let sending = f.size as f64 / 2e6;
        let over = oracle - (0.015 + sending);
        assert!(
            (0.0..0.1).contains(&over),
            "flow {}: oracle {oracle:.3} s for {} bytes",
            f.idx,
            f.size
        );
    }
    assert_eq!(r.runs.len(), 2);
    for run in &r.runs {
        assert_eq!(run.flows.len(), 3, "{}", run.system);
        for f in &run.flows {
            assert!(f.ok, "{}: {f:?}", run.system);
            assert!(
                f.fct_s >= r.oracle[&f.idx].unwrap(),
                "{}: {f:?}",
                run.system
            );
        }
        // The slower path carried data too.
        assert!(run.path_down_bytes.iter().all(|b| *b > 0), "{run:?}");
    }
    let out = tempfile::tempdir().unwrap();
    write_ride(out.path(), &r).unwrap();
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap())
            .unwrap();
    assert_eq!(j["meta"]["preset"], "traces");
    assert_eq!(j["meta"]["trace_files"][1], slow.display().to_string());
    // Ride k (trip seed k + 1) is the k-th window, as the emulator cuts it.
    let (_, _, m2) = ride_trip(&a, Some(&traces), SimPredictor::None, 3, &params).unwrap();
    let stride_s = (m.window_s * 100.0).ceil() / 100.0;
    assert!((m2.from_s - 2.0 * stride_s).abs() < 1e-9, "{}", m2.from_s);
    assert_eq!(m2.seed, 3);
    let e = ride_trip(&a, Some(&traces), SimPredictor::None, 0, &params).unwrap_err();
    assert!(e.to_string().contains("trip seeds 1 on"), "{e}");
}

/// `sim validate` refuses recorded traces, naming what to run instead.
#[test]
fn validate_refuses_recorded_traces() {
    let d = tempfile::tempdir().unwrap();
    let f = mahimahi(d.path(), "p", 1, None, 100);
    #[derive(Parser)]
    struct V {
        #[command(flatten)]
        args: validate::ValidateArgs,
    }
    let v = V::parse_from(["validate", "--quick", "--trace", f.to_str().unwrap()]).args;
    let e = validate::run(&v).unwrap_err();
    assert!(e.to_string().contains("sim bench --trace"), "{e}");
}
