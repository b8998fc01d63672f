use anyhow::Result;
use polycorn_link::trip::Trip;
use serde_json::{json, Value};

use crate::bench::analysis::{self as an, SystemRun};
use crate::bench::plan::{Plan, IM_USERS};
use crate::bench::Meta;

use super::results::*;
use super::*;
use crate::bench::analysis::{FlowResult, ImResult};
use crate::bench::plan::PlanParams;
use polycorn_link::trip::TripConfig;

/// A made-up quick run of four systems (also used by `pool`'s tests).
pub(crate) fn synthetic() -> Results {
    synthetic_with(PlanParams::quick())
}

/// Completed flows for `plan`, each `bps` fast after a 0.5 s start.
fn made_up_flows(plan: &[crate::bench::plan::BulkFlow], bps: f64) -> Vec<FlowResult> {
    plan.iter()
        .map(|b| FlowResult {
            idx: b.idx,
            size: b.size,
            start_s: b.start_s,
            ok: true,
            error: None,
            first_byte_s: 0.2,
            fct_s: 0.5 + b.size as f64 / bps,
            tail_s: 0.1,
            bins: vec![10_000; 20],
            budget: None,
        })
        .collect()
}

pub(crate) fn synthetic_with(params: PlanParams) -> Results {
    let plan = Plan::new(&params, 3);
    let trip = Trip::generate(&TripConfig::preset("hsr", 1, 1).unwrap()).unwrap();
    let trip = trip.window(150_000, 120_000);
    let runs = ["mptcp", "single", "vanilla", "hrsch"]
        .iter()
        .enumerate()
        .map(|(k, name)| SystemRun {
            system: name.to_string(),
            // As `bench::system` records them: the baselines' own mode, no spec.
            mode: match *name {
                "mptcp" | "single" => name.to_string(),
                _ => "polycorn".into(),
            },
            spec: match *name {
                "mptcp" | "single" => "-".into(),
                _ => name.to_string(),
            },
            pipeline: None,
            congestion: None,
            ready_s: 1.0,
            late_paths: vec![],
            error: None,
            flows: made_up_flows(&plan.bulk, 1e6 * (1.0 + k as f64)),
            uploads: made_up_flows(&plan.uploads, 3e5 * (1.0 + k as f64)),
            im: plan
                .im
                .iter()
                .flat_map(|s| {
                    (0..s.users).flat_map(move |u| {
                        (0..s.sends_s[u].len()).map(move |m| ImResult {
                            users: s.users,
                            user: u,
                            msg: m,
                            send_s: s.start_s,
                            delivery_s: Some(0.1 + 0.01 * (u + k) as f64),
                        })
                    })
                })
                .collect(),
            path_down_bytes: vec![1000, 3000],
            path_up_bytes: vec![300, 900],
            counters: [(
                "proxy:polycorn_stage_decisions_total{stage=\"minrtt\"}".to_string(),
                1.0,
            )]
            .into_iter()
            .collect(),
        })
        .collect();
    let meta = Meta {
        version: "test".into(),
        build: Some("v0-1-gabc1234".into()),
        command: Some("polycorn bench --quick".into()),
        kernel: "k".into(),
        preset: "hsr".into(),
        trip_model: Some("hsr-test".into()),
        route_seed: 1,
        trip_seed: 1,
        seed: 3,
        mode: "quick".into(),
        from_s: 150.0,
        window_s: 120.0,
        queue_bytes: Some(1),
        carriers: vec!["A".into(), "B".into()],
        interruptions: "builtin".into(),
        handover_interruption: "hold".into(),
        prediction: "none".into(),
        started: "now".into(),
        trace_files: vec![],
        path_delays: vec![],
        path_outages: vec![],
    };
    let mut r = Results::new(meta, plan, &trip, runs);
    // Downloads' budgets: FCT − oracle in fixed shares, a little of it negative rest.
    for run in &mut r.runs {
        for f in &mut run.flows {
            let Some(oracle) = r.oracle[&f.idx] else {
                continue;
            };
            let x = (f.fct_s - oracle) * 1e3;
            f.budget = Some(polycorn_sim::budget::Budget {
                excess_ms: x,
                setup_ms: 0.1 * x,
                window_ms: 0.3 * x,
                queueing_ms: 0.25 * x,
                reorder_ms: 0.2 * x,
                stalls_ms: 0.2 * x,
                rest_ms: -0.05 * x,
            });
        }
    }
    r
}

#[test]
fn rides_pool_pairwise() {
    let a = synthetic();
    let mut b = synthetic();
    b.meta.trip_seed = 2;
    let (text, j) = pooled(&[a.clone(), b]);
    let per_ride = a.plan.bulk.iter().filter(|f| f.size == 262_144).count();
    let r = &j["systems"]["hrsch"]["bulk"]["262144"]["goodput_ratio_vs_vanilla"];
    assert_eq!(r["n"], json!(2 * per_ride), "{j}");
    // hrsch's synthetic flows are faster than vanilla's, and its IM answers slower than
    // single path's.
    assert!(r["mean"].as_f64().unwrap() > 1.0, "{r}");
    // The geometric mean sits beside it, with its interval around it.
    let g = r["geomean"].as_f64().unwrap();
    let ci = &r["geomean_ci95"];
    assert!(g > 1.0 && g <= r["mean"].as_f64().unwrap(), "{r}");
    assert!(
        ci[0].as_f64().unwrap() <= g && g <= ci[1].as_f64().unwrap(),
        "{r}"
    );
    assert!(text.contains("geometric mean"), "{text}");
    // Two rides: the interval over rides exists, and the rides are counted.
    assert_eq!(r["rides"], json!(2), "{r}");
    assert!(r["geomean_ride_ci95"][0].is_number(), "{r}");
    let one = a.to_json();
    let hr = one["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["system"] == "hrsch")
        .unwrap();
    assert!(hr["bulk"]["262144"]["goodput_ratio_vs_vanilla"]["geomean"].is_number());
    let im = &j["systems"]["hrsch"]["im"]["10"];
    assert!(
        im["mean_change_vs_single_pct"].as_f64().unwrap() > 0.0,
        "{im}"
    );
    assert_eq!(j["rides"], json!([1, 2]));
    assert!(text.contains("pooled over 2 rides"), "{text}");
    // Against the paper's targets: HRSCH only (the baselines are what it is judged
    // against). Its synthetic flows beat vanilla's, but far short of 1.45 at 256 KB; they
    // beat kernel MPTCP's; its IM answers are slower than single path's.
    let t = j["targets"].as_object().unwrap();
    assert_eq!(t.keys().collect::<Vec<_>>(), ["hrsch"], "{j}");
    let check = |what: &str, size: Option<u64>| {
        t["hrsch"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["what"] == what && size.is_none_or(|s| c["size"] == json!(s)))
            .unwrap_or_else(|| panic!("no {what} in {j}"))
            .clone()
    };
    let v = check("bulk_vs_vanilla", Some(262_144));
    assert_eq!(
        (v["met"].clone(), v["target"].clone()),
        (json!(false), json!(1.45))
    );
    assert_eq!(v["value"], r["mean"], "{v}");
    assert_eq!(check("bulk_vs_mptcp", Some(4_194_304))["met"], json!(true));
    let im = check("im_vs_single", None);
    assert_eq!(im["met"], json!(false), "{im}");
    let avg = IM_USERS
        .iter()
        .map(|u| val_of(&j["systems"]["hrsch"]["im"][u.to_string()]["mean_change_vs_single_pct"]))
        .sum::<f64>()
        / 3.0;
    assert!((val_of(&im["value"]) - avg).abs() < 1e-9, "{im}");
    // The IM lower bound, pooled over both rides' planned messages (the same here), and
    // the change it allows beside each IM target, in the same statistic.
    let lb = &j["im_lower_bound"]["10"];
    let bounds: Vec<f64> = a
        .im_bounds
        .iter()
        .filter(|((u, ..), _)| *u == 10)
        .filter_map(|(_, b)| b.any_s)
        .collect();
    assert!(!bounds.is_empty());
    assert!(
        (val_of(&lb["mean_s"]) - an::mean(&bounds)).abs() < 1e-12,
        "{lb}"
    );
    assert_eq!(lb["messages"], json!(2 * bounds.len()));
    let allows = IM_USERS
        .iter()
        .map(|u| val_of(&j["im_lower_bound"][u.to_string()]["mean_change_vs_single_pct"]))
        .sum::<f64>()
        / 3.0;
    assert!((val_of(&im["lower_bound"]) - allows).abs() < 1e-9, "{im}");
    assert!(text.contains("lower bound"), "{text}");
    assert!(
        j["systems"]["hrsch"]["im"]["10"]["over_oracle_median"].is_number(),
        "{j}"
    );
    assert!(text.contains("against the paper's targets"), "{text}");
    assert!(
        text.contains("256 KB 1.0") && text.contains("missed by 0.4"),
        "{text}"
    );
}

fn val_of(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn im_changes_per_ride_have_an_interval_over_rides() {
    let a = synthetic();
    let mut b = synthetic();
    b.meta.trip_seed = 2;
    // In ride 2 every HRSCH answer takes twice as long: the rides disagree.
    for run in b.runs.iter_mut().filter(|r| r.system == "hrsch") {
        for m in &mut run.im {
            m.delivery_s = m.delivery_s.map(|d| 2.0 * d);
        }
    }
    let ratio = |r: &Results, u: usize| {
        an::im_stats(r.run("hrsch").unwrap(), u).mean_s
            / an::im_stats(r.run("single").unwrap(), u).mean_s
    };
    let (text, j) = pooled(&[a.clone(), b.clone()]);
    let val = |v: &Value| v.as_f64().unwrap();
    for u in IM_USERS {
        let c = &j["systems"]["hrsch"]["im_ride_change_pct"]["single"][u.to_string()];
        let expect = ((ratio(&a, u) * ratio(&b, u)).sqrt() - 1.0) * 100.0;
        assert!((val(&c["gmean"]) - expect).abs() < 1e-9, "{u}: {c}");
        assert!(
            val(&c["ci_lo"]) < val(&c["gmean"]) && val(&c["gmean"]) < val(&c["ci_hi"]),
            "{c}"
        );
        assert_eq!(c["rides"], json!(2));
    }
    // Over the three counts: the geometric mean of each ride's three ratios.
    let all = &j["systems"]["hrsch"]["im_ride_change_pct"]["single"]["all"];
    let g = |r: &Results| IM_USERS.iter().map(|&u| ratio(r, u).ln()).sum::<f64>() / 3.0;
    let expect = (((g(&a) + g(&b)) / 2.0).exp() - 1.0) * 100.0;
    assert!((val(&all["gmean"]) - expect).abs() < 1e-9, "{all}");
    assert!(j["systems"]["hrsch"]["im_ride_change_pct"]["mptcp"]["all"]["gmean"].is_number());
    assert!(text.contains("hrsch vs single"), "{text}");
    // One ride has no interval over rides: the block is left out.
    let (one, _) = pooled(&[a]);
    assert!(!one.contains("each ride's mean delivery time"), "{one}");
}

#[test]
fn the_lower_bound_has_its_own_change_per_ride() {
    let a = synthetic();
    let mut b = synthetic();
    b.meta.trip_seed = 2;
    // Ride 2's single-path answers take three times as long: the bound gains more there.
    for run in b.runs.iter_mut().filter(|r| r.system == "single") {
        for m in &mut run.im {
            m.delivery_s = m.delivery_s.map(|d| 3.0 * d);
        }
    }
    assert!(!a.im_bounds.is_empty());
    let ratio = |r: &Results, u: usize| {
        r.im_bound_stats(u).any_mean_s / an::im_stats(r.run("single").unwrap(), u).mean_s
    };
    let (text, j) = pooled(&[a.clone(), b.clone()]);
    for u in IM_USERS {
        let c = &j["im_lower_bound"]["ride_change_pct"]["single"][u.to_string()];
        let expect = ((ratio(&a, u) * ratio(&b, u)).sqrt() - 1.0) * 100.0;
        assert!((val_of(&c["gmean"]) - expect).abs() < 1e-9, "{u}: {c}");
        assert_eq!(c["rides"], json!(2));
    }
    assert!(j["im_lower_bound"]["ride_change_pct"]["mptcp"]["all"]["gmean"].is_number());
    assert!(text.contains("lower bound vs single"), "{text}");
    // The per-count entries the targets read are still there.
    assert!(j["im_lower_bound"]["10"]["mean_s"].is_number(), "{j}");
    // A ride without bounds: no bound row (it would cover other rides than the systems').
    let mut c = b.clone();
    c.im_bounds.clear();
    let (text, j) = pooled(&[a, c]);
    assert!(!text.contains("lower bound vs single"), "{text}");
    assert!(j["im_lower_bound"].get("ride_change_pct").is_none(), "{j}");
}

/// A run with only one of the two workloads writes, verifies and pools like a full one.
#[test]
fn one_workload_runs_report_and_verify() {
    for params in [
        PlanParams {
            bulk_flows: 0,
            ..PlanParams::quick()
        },
        PlanParams {
            im: false,
            ..PlanParams::quick()
        },
        PlanParams {
            im: false,
            bulk_flows: 0,
            uploads: 3,
            ..PlanParams::quick()
        },
    ] {
        let r = synthetic_with(params);
        let dir = tempfile::tempdir().unwrap();
        r.write_all(dir.path()).unwrap();
        write_html(dir.path(), &r).unwrap();
        verify(dir.path(), &r).unwrap();
        let t = table(&r);
        let (text, _) = pooled(&[r.clone(), r.clone()]);
        // The pooled text has no empty tables for the workload that did not run.
        if params.uploads > 0 {
            assert!(r.plan.bulk.is_empty() && r.plan.im.is_empty());
            assert!(dir.path().join("uploads.csv").exists());
            assert!(t.contains("bulk uploads"), "{t}");
            assert!(t.contains("per-stage views of uploads"), "{t}");
            assert!(!t.contains("per-stage views (Fig. 11)"), "{t}");
            let j = r.to_json();
            assert!(j["runs"][3]["upload_stage_views"]["tail_delay_s"]["mean"].is_number());
            assert!(
                t.contains("per-flow goodput ratio of uploads vs vanilla"),
                "{t}"
            );
            assert!(
                !t.contains("bulk downloads") && !t.contains("instant messaging"),
                "{t}"
            );
            assert!(
                text.contains("per-flow goodput ratio of uploads vs vanilla"),
                "{text}"
            );
            assert!(!text.contains("per-flow goodput ratio vs"), "{text}");
            assert!(!text.contains("instant messaging"), "{text}");
        } else if params.im {
            assert!(r.plan.bulk.is_empty());
            assert!(t.contains("instant messaging"), "{t}");
            assert!(text.contains("instant messaging"), "{text}");
            assert!(!text.contains("goodput ratio"), "{text}");
            assert!(!text.contains("FCT / oracle"), "{text}");
        } else {
            assert!(r.plan.im.is_empty());
            assert!(!dir.path().join("uploads.csv").exists());
            assert!(!t.contains("uploads"), "{t}");
            assert!(t.contains("per-flow goodput ratio vs vanilla"), "{t}");
            assert!(text.contains("per-flow goodput ratio vs vanilla"), "{text}");
            assert!(text.contains("FCT / oracle"), "{text}");
            assert!(!text.contains("instant messaging"), "{text}");
        }
    }
}

#[test]
fn html_is_self_contained_and_has_every_plot() {
    let h = html(&synthetic());
    for id in PLOT_IDS {
        assert!(h.contains(&format!("id=\"{id}\"")), "missing plot {id}");
    }
    // Upload plots only with uploads.
    assert!(!h.contains("Bulk uploads"));
    let with = html(&synthetic_with(PlanParams {
        uploads: 3,
        ..PlanParams::quick()
    }));
    for id in PLOT_IDS.iter().chain(UPLOAD_PLOT_IDS) {
        assert!(with.contains(&format!("id=\"{id}\"")), "missing plot {id}");
    }
    assert!(!h.contains("<script"), "no scripts");
    assert!(
        !h.contains("http://") || !h.contains("src=\"http"),
        "no remote resources"
    );
    assert!(h.contains("class=\"handover failed\"") || h.contains("class=\"handover\""));
    let t = table(&synthetic());
    assert!(t.contains("per-flow goodput ratio vs vanilla"));
}

#[test]
fn json_and_csv_are_complete() {
    let r = synthetic();
    let dir = tempfile::tempdir().unwrap();
    r.write_all(dir.path()).unwrap();
    let flows = std::fs::read_to_string(dir.path().join("flows.csv")).unwrap();
    assert_eq!(flows.lines().count(), 1 + 4 * r.plan.bulk.len());
    assert_eq!(
        csv_records(&flows, "flows.csv", &FLOWS_CSV_HEADER).unwrap(),
        4 * r.plan.bulk.len()
    );
}

#[test]
fn csv_quotes_systems_named_by_specs_and_errors_with_quotes() {
    let mut r = synthetic();
    let spec = "hpr,minrtt,tpr,ori(displace=0)+er(k=3,cell_loss=1)";
    r.runs[1].system = format!("polycorn:{spec}");
    r.runs[1].spec = spec.to_string();
    r.runs[1].flows[0].ok = false;
    r.runs[1].flows[0].error = Some("read: \"connection reset\",\nthen nothing".into());
    let dir = tempfile::tempdir().unwrap();
    r.write_all(dir.path()).unwrap();
    for (file, header, rows) in [
        ("flows.csv", &FLOWS_CSV_HEADER[..], 4 * r.plan.bulk.len()),
        (
            "im.csv",
            &IM_CSV_HEADER[..],
            r.runs.iter().map(|x| x.im.len()).sum(),
        ),
    ] {
        let text = std::fs::read_to_string(dir.path().join(file)).unwrap();
        assert_eq!(csv_records(&text, file, header).unwrap(), rows, "{file}");
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        let systems: Vec<String> = rd.records().map(|x| x.unwrap()[0].to_string()).collect();
        assert!(systems.contains(&format!("polycorn:{spec}")), "{file}");
    }
    let text = std::fs::read_to_string(dir.path().join("flows.csv")).unwrap();
    let mut rd = csv::Reader::from_reader(text.as_bytes());
    let bad = rd
        .records()
        .map(Result::unwrap)
        .find(|x| x[6] == *"false")
        .unwrap();
    assert_eq!(&bad[2], spec);
    assert_eq!(&bad[12], "read: \"connection reset\",\nthen nothing");
    // A written file that lost a column is refused with its line.
    let cut = text.replacen(",true,", ",", 1);
    let err = csv_records(&cut, "flows.csv", &FLOWS_CSV_HEADER).unwrap_err();
    assert!(
        err.to_string().starts_with("flows.csv:2: 12 fields"),
        "{err}"
    );
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("results.json")).unwrap())
            .unwrap();
    assert_eq!(j["runs"].as_array().unwrap().len(), 4);
    assert_eq!(j["meta"]["preset"], "hsr");
}

/// Renders the report in headless Chromium (Debian's `chromium`) and checks that every
/// plot is in the rendered DOM with drawn elements. Fails under CI=true when chromium is
/// missing; skips with a message elsewhere.
#[test]
fn report_renders_in_headless_chromium() {
    let bin = ["chromium", "chromium-browser"]
        .iter()
        .find(|b| {
            std::process::Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .copied();
    let Some(bin) = bin else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("chromium is not installed and CI=true forbids skipping the report render test (scripts/lib.sh installs it)");
        }
        eprintln!("skipped: chromium not installed (apt-get install chromium)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Every workload, uploads too.
    let r = synthetic_with(PlanParams {
        uploads: 3,
        ..PlanParams::quick()
    });
    let path = write_html(dir.path(), &r).unwrap();
    let profile = dir.path().join("profile");
    let out = std::process::Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--virtual-time-budget=2000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", path.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for id in PLOT_IDS.iter().chain(UPLOAD_PLOT_IDS) {
        let at = dom
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("plot {id} not in the rendered DOM"));
        let end = dom[at..].find("</svg>").unwrap() + at;
        let body = &dom[at..end];
        assert!(
            body.contains("class=\"series\"") || body.contains("class=\"bar\""),
            "plot {id} has nothing drawn"
        );
    }
    assert!(dom.contains("class=\"handover"), "no handovers marked");
}
