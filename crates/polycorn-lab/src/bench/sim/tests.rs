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
    let one = simulate_ride(&a, &systems, 1, &params, &perfect).unwrap();
    let two = simulate_ride(&a, &systems, 1, &params, &perfect).unwrap();
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
    let r = simulate_ride(&a, &systems, 1, &a.plan_params().unwrap(), &perfect).unwrap();
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
