//! `polycorn sim sweep`: the parameter sweeps the emulator cannot afford — each of HRSCH's
//! constants (ER's k; ORI's α, β, τ; HPR's E_GPS; TPR's η), the number of carriers, the number
//! of IM users and the handover predictor — each variant over the same simulated rides beside
//! vanilla, summarised per variant as the bench pools rides: per-flow goodput ÷ vanilla
//! (geometric mean with a 95% interval over rides), median FCT ÷ oracle, the pooled IM mean
//! against its lower bound, and one counter of the stage the sweep varies.
//!
//! Writes `sweeps.summary.json` (compact; committed under `results/` it feeds `polycorn bench
//! summarize`, which renders `docs/src/results/sweeps.md`) and `sweeps.md` into the output
//! directory, and prints the tables.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use serde_json::{json, Value};

use super::super::analysis::{self as an, Dir, RideCi};
use super::super::plan::{BULK_SIZES, IM_USERS};
use super::super::report::Results;
use super::super::{systems_named, RideArgs, Workload};
use super::{simulate_rides, threads_or_cores, SimPrediction, SimPredictor};
use crate::common::utc_now;
use crate::tripgen::TripArgs;

/// The compact file a sweep run writes (as `results/<name>.summary.json` it feeds `polycorn
/// bench summarize`).
pub const SUMMARY_NAME: &str = "sweeps.summary.json";

/// The sweeps `polycorn sim sweep` knows.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepName {
    /// ER's k: the RTO count at which a path's unacknowledged data is reinjected.
    ErK,
    /// ORI's α: how long a path must carry nothing to count as idle.
    OriAlpha,
    /// ORI's β: bytes sent elsewhere that make a path count as idle.
    OriBeta,
    /// ORI's τ: chunks copied onto a path that became idle.
    OriTau,
    /// HPR's E_GPS: the GPS error added to a path's lead time.
    EGps,
    /// TPR's η: how far the tail bound is relaxed.
    TprEta,
    /// 2, 3, 4 and 8 carriers.
    Carriers,
    /// 10 to 300 IM users.
    ImUsers,
    /// The handover predictor, from the trip's ground truth to none.
    Predictor,
}

impl SweepName {
    const ALL: [SweepName; 9] = [
        SweepName::ErK,
        SweepName::OriAlpha,
        SweepName::OriBeta,
        SweepName::OriTau,
        SweepName::EGps,
        SweepName::TprEta,
        SweepName::Carriers,
        SweepName::ImUsers,
        SweepName::Predictor,
    ];

    /// Its name on the command line and in the summary.
    pub fn name(self) -> &'static str {
        match self {
            SweepName::ErK => "er-k",
            SweepName::OriAlpha => "ori-alpha",
            SweepName::OriBeta => "ori-beta",
            SweepName::OriTau => "ori-tau",
            SweepName::EGps => "e-gps",
            SweepName::TprEta => "tpr-eta",
            SweepName::Carriers => "carriers",
            SweepName::ImUsers => "im-users",
            SweepName::Predictor => "predictor",
        }
    }
}

/// Options of `polycorn sim sweep`.
#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    /// Sweeps to run, comma-separated (default: every one).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub sweep: Vec<SweepName>,
    /// Rides per variant: trip seeds TRIP_SEED .. TRIP_SEED+N-1, the same for every variant.
    #[arg(long, default_value_t = 100)]
    pub rides: u64,
    /// Quick rides (the bench's `--quick` window and workload) instead of full ones.
    #[arg(long)]
    pub quick: bool,
    /// The trip (preset and seeds).
    #[command(flatten)]
    pub trip: TripArgs,
    /// Rides simulated at once (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Output directory (default `results/sweeps-<preset>-r<route>-t<trip>-n<rides>-<quick|full>/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One row of a sweep: a system on rides changed (or not) by the sweep.
#[derive(Debug, Clone)]
struct Variant {
    /// The swept value as the table shows it.
    value: String,
    /// A system `systems_named` knows (a preset or `polycorn:SPEC`).
    system: String,
    /// The handover predictor of polycorn systems.
    predictor: SimPredictor,
    /// Carriers of the trip (None: the preset's).
    carriers: Option<usize>,
    /// Users of the IM segments (None: the bench's 10, 20, 30).
    im_users: Option<&'static [usize]>,
    /// The paper's (or the preset's) value.
    default: bool,
}

/// A sweep: its variants and what its extra column counts.
struct Sweep {
    name: SweepName,
    title: &'static str,
    /// What the sweep varies, as the first column's heading.
    param: &'static str,
    /// What the rows run on, one sentence.
    about: &'static str,
    variants: Vec<Variant>,
    /// Bulk downloads run (else IM only).
    bulk: bool,
    /// The extra column: heading and how a ride's run gives it.
    extra: Extra,
}

#[derive(Clone, Copy)]
enum Extra {
    /// Decisions of one stage per ride, relay and proxy together.
    StageMoves(&'static str),
    /// Reinjected MB per ride, relay and proxy together.
    ReinjectedMb,
    /// Nothing.
    None,
}

impl Extra {
    fn heading(self) -> String {
        match self {
            Extra::StageMoves(s) => format!("{s} decisions / ride"),
            Extra::ReinjectedMb => "reinjected MB / ride".into(),
            Extra::None => String::new(),
        }
    }

    fn of(self, run: &an::SystemRun) -> Option<f64> {
        let sum = |pred: &dyn Fn(&str) -> bool| -> f64 {
            run.counters
                .iter()
                .filter(|(k, _)| pred(k))
                .map(|(_, v)| *v)
                .sum()
        };
        match self {
            Extra::StageMoves(stage) => {
                let tail = format!("polycorn_stage_decisions_total{{stage=\"{stage}\"}}");
                Some(sum(&|k: &str| k.ends_with(&tail)))
            }
            Extra::ReinjectedMb => {
                Some(sum(&|k: &str| k.contains(":polycorn_path_reinjected_bytes_total{")) / 1e6)
            }
            Extra::None => None,
        }
    }
}

/// HRSCH with its stages given: the paper's pipeline with one constant changed.
fn hrsch(hpr: &str, tpr: &str, ori: &str, er: &str) -> String {
    let parts: Vec<&str> = [hpr, "minrtt", tpr, ori]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    format!("polycorn:{}+{er}", parts.join(","))
}

fn variant(value: impl Into<String>, system: impl Into<String>, default: bool) -> Variant {
    Variant {
        value: value.into(),
        system: system.into(),
        predictor: SimPredictor::Paper,
        carriers: None,
        im_users: None,
        default,
    }
}

/// One row per value of a constant: `system(v)` is the system, `default` the paper's value.
fn values(vals: &[u64], default: u64, system: impl Fn(u64) -> String) -> Vec<Variant> {
    vals.iter()
        .map(|&v| variant(v.to_string(), system(v), v == default))
        .collect()
}

const USERS: [usize; 6] = [10, 30, 60, 100, 200, 300];
const CARRIERS: [usize; 4] = [2, 3, 4, 8];

fn sweep(name: SweepName) -> Sweep {
    match name {
        SweepName::ErK => Sweep {
            name,
            title: "ER's k",
            param: "k",
            about: "HRSCH (`hpr,minrtt,tpr,ori+er(k=K)`); `off` is HRSCH with RTO retransmission only",
            variants: values(&[1, 2, 3, 5, 8], 3, |k| {
                hrsch("hpr", "tpr", "ori", &format!("er(k={k})"))
            })
            .into_iter()
            .chain([variant("off", hrsch("hpr", "tpr", "ori", "rto"), false)])
            .collect(),
            bulk: true,
            extra: Extra::ReinjectedMb,
        },
        SweepName::OriAlpha => Sweep {
            name,
            title: "ORI's α",
            param: "α (ms)",
            about: "HRSCH with `ori(alpha_ms=A)`; `off` is HRSCH without ORI",
            variants: values(&[250, 500, 1000, 2000, 4000], 1000, |a| {
                hrsch("hpr", "tpr", &format!("ori(alpha_ms={a})"), "er")
            })
            .into_iter()
            .chain([variant("off", hrsch("hpr", "tpr", "", "er"), false)])
            .collect(),
            bulk: true,
            extra: Extra::StageMoves("ori"),
        },
        SweepName::OriBeta => Sweep {
            name,
            title: "ORI's β",
            param: "β (bytes)",
            about: "HRSCH with `ori(beta_bytes=B)`",
            variants: values(&[2048, 4096, 8192, 16384, 65536], 8192, |b| {
                hrsch("hpr", "tpr", &format!("ori(beta_bytes={b})"), "er")
            }),
            bulk: true,
            extra: Extra::StageMoves("ori"),
        },
        SweepName::OriTau => Sweep {
            name,
            title: "ORI's τ",
            param: "τ (chunks)",
            about: "HRSCH with `ori(tau=T)`",
            variants: values(&[4, 8, 16, 32, 64], 16, |t| {
                hrsch("hpr", "tpr", &format!("ori(tau={t})"), "er")
            }),
            bulk: true,
            extra: Extra::StageMoves("ori"),
        },
        SweepName::EGps => Sweep {
            name,
            title: "HPR's E_GPS",
            param: "E_GPS (m)",
            about: "HRSCH with `hpr(e_gps_m=E)`, LinkDB's paper model as predictor; `off` is HRSCH without HPR",
            variants: values(&[0, 10, 20, 50, 100, 200], 20, |e| {
                hrsch(&format!("hpr(e_gps_m={e})"), "tpr", "ori", "er")
            })
            .into_iter()
            .chain([variant("off", hrsch("", "tpr", "ori", "er"), false)])
            .collect(),
            bulk: true,
            extra: Extra::StageMoves("hpr"),
        },
        SweepName::TprEta => Sweep {
            name,
            title: "TPR's η",
            param: "η",
            about: "HRSCH with `tpr(eta=X)`: a fixed η for every path instead of its rttvar / srtt (`rttvar/srtt`, the paper's); `off` is HRSCH without TPR",
            variants: [
                variant("rttvar/srtt", hrsch("hpr", "tpr", "ori", "er"), true),
                variant("0", hrsch("hpr", "tpr(eta=0)", "ori", "er"), false),
                variant("0.25", hrsch("hpr", "tpr(eta=0.25)", "ori", "er"), false),
                variant("0.5", hrsch("hpr", "tpr(eta=0.5)", "ori", "er"), false),
                variant("1", hrsch("hpr", "tpr(eta=1)", "ori", "er"), false),
                variant("2", hrsch("hpr", "tpr(eta=2)", "ori", "er"), false),
                variant("off", hrsch("hpr", "", "ori", "er"), false),
            ]
            .into(),
            bulk: true,
            extra: Extra::StageMoves("tpr"),
        },
        SweepName::Carriers => Sweep {
            name,
            title: "Carriers",
            param: "carriers · system",
            about: "The preset's carriers, then independent copies of their models (A, B, A2, B2, …); LinkDB trained on rides with the same carriers",
            variants: CARRIERS
                .iter()
                .flat_map(|&n| {
                    ["single", "vanilla", "hrsch", "polycorn"].map(|s| Variant {
                        carriers: Some(n),
                        ..variant(format!("{n} · {s}"), s, n == 2)
                    })
                })
                .collect(),
            bulk: true,
            extra: Extra::None,
        },
        SweepName::ImUsers => Sweep {
            name,
            title: "IM users",
            param: "users · system",
            about: "One IM segment of that many users (IM only, no downloads)",
            variants: (0..USERS.len())
                .flat_map(|i| {
                    let users: &'static [usize] = std::slice::from_ref(&USERS[i]);
                    ["single", "vanilla", "hrsch", "polycorn"].map(|s| Variant {
                        im_users: Some(users),
                        ..variant(format!("{} · {s}", USERS[i]), s, false)
                    })
                })
                .collect(),
            bulk: false,
            extra: Extra::None,
        },
        SweepName::Predictor => Sweep {
            name,
            title: "The predictor",
            param: "predictor · system",
            about: "HRSCH and the `polycorn` preset with each handover predictor at both ends: the trip's ground truth (`perfect`), LinkDB's models trained on 20 simulated rides of the route, or none (HPR never throttles)",
            variants: [
                SimPredictor::Perfect,
                SimPredictor::Paper,
                SimPredictor::Risk,
                SimPredictor::LocationTable,
                SimPredictor::None,
            ]
            .iter()
            .flat_map(|&p| {
                ["hrsch", "polycorn"].map(|s| Variant {
                    predictor: p,
                    ..variant(
                        format!("{} · {s}", p.name()),
                        s,
                        p == SimPredictor::Paper,
                    )
                })
            })
            .collect(),
            bulk: true,
            extra: Extra::StageMoves("hpr"),
        },
    }
}

/// The rides of one group of variants (same trip, plan and predictor): `systems` beside
/// vanilla, the reference.
fn ride_args(args: &SweepArgs, v: &Variant, bulk: bool, systems: Vec<String>) -> RideArgs {
    let mut trip = args.trip.clone();
    trip.carriers = v.carriers;
    RideArgs {
        quick: args.quick,
        trip,
        rides: Some(args.rides),
        seed: None,
        systems,
        bulk_flows: None,
        bulk_gap_s: None,
        workloads: if bulk {
            vec![Workload::Bulk, Workload::Im]
        } else {
            vec![Workload::Im]
        },
        from_s: None,
        queue_bytes: None,
        traces: vec![],
        delay_ms: vec![],
        out: None,
    }
}

/// What a variant's rides give, as the summary stores it.
fn row(sweep: &Sweep, v: &Variant, name: &str, rides: &[Results]) -> Value {
    let mut goodput = serde_json::Map::new();
    let mut fct = serde_json::Map::new();
    if sweep.bulk {
        for size in BULK_SIZES {
            let per_ride: Vec<Vec<f64>> = rides
                .iter()
                .filter_map(|r| {
                    Some(an::goodput_ratios(
                        Dir::Down,
                        r.run(name)?,
                        r.run("vanilla")?,
                        size,
                    ))
                })
                .collect();
            let ci = RideCi::of(&per_ride);
            if v.system != "vanilla" {
                goodput.insert(
                    size.to_string(),
                    json!({"gmean": num(ci.gmean), "ci95": [num(ci.ci_lo), num(ci.ci_hi)], "rides": ci.rides}),
                );
            }
            let f: Vec<f64> = rides
                .iter()
                .filter_map(|r| Some(r.fct_over_oracle(Dir::Down, r.run(name)?, size)))
                .flatten()
                .collect();
            let flows: usize = rides
                .iter()
                .filter_map(|r| r.run(name))
                .map(|run| run.flows.iter().filter(|x| x.size == size).count())
                .sum();
            fct.insert(
                size.to_string(),
                json!({"median": num(an::quantile(&f, 0.5)), "completed": f.len(), "flows": flows}),
            );
        }
    }
    let users = v.im_users.unwrap_or(&IM_USERS);
    let mut im = serde_json::Map::new();
    for &u in users {
        let mut d = Vec::new();
        let mut sent = 0usize;
        for run in rides.iter().filter_map(|r| r.run(name)) {
            for m in run.im.iter().filter(|m| m.users == u) {
                sent += 1;
                if let Some(t) = m.delivery_s {
                    d.push(t);
                }
            }
        }
        let bound: Vec<f64> = rides.iter().flat_map(|r| r.im_bound_values(u).0).collect();
        im.insert(
            u.to_string(),
            json!({"mean_ms": num(1e3 * an::mean(&d)), "answered": d.len(), "sent": sent,
                   "bound_ms": num(1e3 * an::mean(&bound))}),
        );
    }
    let extra: Vec<f64> = rides
        .iter()
        .filter_map(|r| sweep.extra.of(r.run(name)?))
        .collect();
    json!({
        "value": v.value,
        "system": v.system,
        "default": v.default,
        "goodput_vs_vanilla": goodput,
        "fct_over_oracle": fct,
        "im": im,
        "extra": if extra.is_empty() { Value::Null } else { num(an::mean(&extra)) },
    })
}

fn num(x: f64) -> Value {
    if x.is_finite() {
        // (+ 0.0: a negative zero prints as 0.)
        json!((x * 1e4).round() / 1e4 + 0.0)
    } else {
        Value::Null
    }
}

/// Runs one sweep: its variants in groups of the same rides, each group beside vanilla.
fn run_sweep(args: &SweepArgs, sweep: &Sweep, threads: usize) -> Result<Value> {
    // Groups of variants that share trip, plan and predictor, in order of appearance.
    type Key = (Option<usize>, Option<&'static [usize]>, SimPredictor);
    let mut groups: Vec<(Key, Vec<&Variant>)> = Vec::new();
    for v in &sweep.variants {
        let key = (v.carriers, v.im_users, v.predictor);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, vs)) => vs.push(v),
            None => groups.push((key, vec![v])),
        }
    }
    let seeds: Vec<u64> = (0..args.rides).map(|k| args.trip.trip_seed + k).collect();
    let mut rows = Vec::new();
    for (_, vs) in &groups {
        let mut names: Vec<String> = vec!["vanilla".into()];
        names.extend(
            vs.iter()
                .map(|v| v.system.clone())
                .filter(|s| s != "vanilla"),
        );
        let ride = ride_args(args, vs[0], sweep.bulk, names.clone());
        let systems = systems_named(&names)?;
        let params = {
            let mut p = ride.plan_params()?;
            if let Some(u) = vs[0].im_users {
                p.im_users = u;
            }
            p
        };
        eprintln!(
            "sim sweep {}: {} on {} rides",
            sweep.name.name(),
            vs.iter()
                .map(|v| v.value.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            seeds.len()
        );
        let prediction = SimPrediction::new(vs[0].predictor, &ride, &systems)?;
        let results = simulate_rides(
            &ride,
            None,
            &systems,
            &seeds,
            &params,
            threads,
            &prediction,
            None,
        )?;
        for v in vs {
            rows.push(row(sweep, v, &v.system, &results));
        }
    }
    Ok(json!({
        "name": sweep.name.name(),
        "title": sweep.title,
        "param": sweep.param,
        "about": sweep.about,
        "bulk": sweep.bulk,
        "extra": sweep.extra.heading(),
        "rows": rows,
    }))
}

/// `polycorn sim sweep`.
pub fn run(args: &SweepArgs) -> Result<()> {
    if args.rides < 2 {
        bail!("--rides must be at least 2: each cell is an interval over rides");
    }
    let names: Vec<SweepName> = if args.sweep.is_empty() {
        SweepName::ALL.to_vec()
    } else {
        args.sweep.clone()
    };
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("results").join(format!(
            "sweeps-{}-r{}-t{}-n{}-{}",
            args.trip.preset,
            args.trip.route_seed,
            args.trip.trip_seed,
            args.rides,
            if args.quick { "quick" } else { "full" }
        ))
    });
    let threads = threads_or_cores(args.threads).min(args.rides as usize);
    let started = utc_now();
    let t0 = std::time::Instant::now();
    let mut sweeps = Vec::new();
    for name in names {
        sweeps.push(run_sweep(args, &sweep(name), threads)?);
    }
    let summary = json!({
        "kind": "sweeps",
        "preset": args.trip.preset,
        "route_seed": args.trip.route_seed,
        "trip_seeds": [args.trip.trip_seed, args.trip.trip_seed + args.rides - 1],
        "rides": args.rides,
        "mode": if args.quick { "quick" } else { "full" },
        "congestion": crate::bench::system("vanilla")?.congestion,
        "build": crate::BUILD,
        "version": crate::VERSION,
        "command": super::super::command_line(),
        "started": started,
        "seconds": t0.elapsed().as_secs(),
        "sweeps": sweeps,
    });
    std::fs::create_dir_all(&out).map_err(|e| anyhow::anyhow!("create {}: {e}", out.display()))?;
    let json_path = out.join(SUMMARY_NAME);
    std::fs::write(&json_path, serde_json::to_string_pretty(&summary)? + "\n")
        .map_err(|e| anyhow::anyhow!("write {}: {e}", json_path.display()))?;
    let page = page(&summary)?;
    let md = out.join("sweeps.md");
    std::fs::write(&md, &page).map_err(|e| anyhow::anyhow!("write {}: {e}", md.display()))?;
    print!("{page}");
    eprintln!(
        "sim sweep: {} s; summary {}; copy it to results/ and run `polycorn bench summarize` for the manual's page",
        t0.elapsed().as_secs(),
        json_path.display()
    );
    Ok(())
}

fn cell_ratio(g: &Value) -> String {
    match (
        g["gmean"].as_f64(),
        g["ci95"][0].as_f64(),
        g["ci95"][1].as_f64(),
    ) {
        (Some(m), Some(lo), Some(hi)) => format!("{m:.2} [{lo:.2}, {hi:.2}]"),
        (Some(m), ..) => format!("{m:.2}"),
        _ => "–".into(),
    }
}

fn cell(x: &Value, prec: usize) -> String {
    match x.as_f64() {
        Some(v) => format!("{:.prec$}", v + 0.0),
        None => "–".into(),
    }
}

/// The tables of a sweeps summary, as a page of the manual.
pub fn page(s: &Value) -> Result<String> {
    let Some(sweeps) = s["sweeps"].as_array() else {
        bail!("a sweeps summary without `sweeps`");
    };
    let mut o = String::from("# Parameter sweeps in the simulator\n\n");
    let _ = writeln!(
        o,
        "Each row ran on the same {} simulated rides (trip seeds {}–{}, route {} of preset `{}`, {} mode) beside vanilla. \
         Goodput ÷ vanilla: geometric mean of the per-flow ratios [95% interval over rides]; \
         FCT ÷ oracle: median over the pooled downloads; IM: mean delivery time over every message of every ride, \
         and its lower bound (the best path at each send). **Bold**: the paper's or the preset's value. \
         Every system ran {} at relay and proxy.\n",
        s["rides"], s["trip_seeds"][0], s["trip_seeds"][1], s["route_seed"],
        s["preset"].as_str().unwrap_or("?"), s["mode"].as_str().unwrap_or("?"),
        // Summaries written before they recorded it ran every system with CUBIC.
        s["congestion"].as_str().unwrap_or("cubic")
    );
    let _ = writeln!(
        o,
        "`{}` · build `{}` · {}\n",
        s["command"].as_str().unwrap_or("command not recorded"),
        s["build"].as_str().unwrap_or("not recorded"),
        s["started"]
            .as_str()
            .map_or("date not recorded".into(), |d| d
                .chars()
                .take(10)
                .collect::<String>())
    );
    for sw in sweeps {
        let _ = writeln!(o, "## {}\n", sw["title"].as_str().unwrap_or("?"));
        let about = sw["about"].as_str().unwrap_or("");
        let mut chars = about.chars();
        let about: String = chars
            .next()
            .map(|c| c.to_uppercase().chain(chars).collect())
            .unwrap_or_default();
        let _ = writeln!(o, "{about}.\n");
        let bulk = sw["bulk"].as_bool().unwrap_or(true);
        let extra = sw["extra"].as_str().unwrap_or("");
        let rows = sw["rows"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        // Each row's user counts; one column per count when every row has the same ones.
        let users_of = |r: &Value| -> Vec<String> {
            let mut u: Vec<String> = r["im"]
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            u.sort_by_key(|x| x.parse::<u64>().unwrap_or(u64::MAX));
            u
        };
        let first = rows.first().map(users_of).unwrap_or_default();
        let shared = rows.iter().all(|r| users_of(r) == first);
        let mut head = vec![sw["param"].as_str().unwrap_or("value").to_string()];
        if bulk {
            for s in ["256 KB", "1 MB", "4 MB"] {
                head.push(format!("goodput ÷ vanilla {s}"));
            }
            for s in ["256 KB", "1 MB", "4 MB"] {
                head.push(format!("FCT ÷ oracle {s}"));
            }
        }
        if shared && first.len() > 1 {
            head.push(format!("IM mean ms ({} users)", first.join("/")));
        } else {
            head.push("IM mean ms".into());
        }
        head.push("IM bound ms".into());
        if !extra.is_empty() {
            head.push(extra.to_string());
        }
        let _ = writeln!(o, "| {} |", head.join(" | "));
        let _ = writeln!(o, "|{}", " --- |".repeat(head.len()));
        for r in rows {
            let value = r["value"].as_str().unwrap_or("?");
            let mut c = vec![if r["default"].as_bool() == Some(true) {
                format!("**{value}**")
            } else {
                value.to_string()
            }];
            if bulk {
                for size in BULK_SIZES {
                    c.push(cell_ratio(&r["goodput_vs_vanilla"][size.to_string()]));
                }
                for size in BULK_SIZES {
                    c.push(cell(&r["fct_over_oracle"][size.to_string()]["median"], 2));
                }
            }
            let users = users_of(r);
            let im = |k: &str| -> String {
                users
                    .iter()
                    .map(|u| cell(&r["im"][u][k], 0))
                    .collect::<Vec<_>>()
                    .join("/")
            };
            c.push(im("mean_ms"));
            c.push(im("bound_ms"));
            if !extra.is_empty() {
                // Megabytes reinjected are small: three decimals; decision counts one.
                c.push(cell(&r["extra"], if extra.contains("MB") { 3 } else { 1 }));
            }
            let _ = writeln!(o, "| {} |", c.join(" | "));
        }
        o.push('\n');
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(rides: u64) -> SweepArgs {
        SweepArgs {
            sweep: vec![],
            rides,
            quick: true,
            trip: TripArgs::builtin("hsr", 1, 1),
            threads: Some(1),
            out: None,
        }
    }

    #[test]
    fn every_sweep_names_systems_the_bench_knows_and_marks_one_default() {
        for name in SweepName::ALL {
            let s = sweep(name);
            let names: Vec<String> = s.variants.iter().map(|v| v.system.clone()).collect();
            systems_named(&names).unwrap_or_else(|e| panic!("{}: {e:#}", name.name()));
            assert!(
                s.variants.iter().any(|v| v.default) || name == SweepName::ImUsers,
                "{}: no default row",
                name.name()
            );
        }
    }

    #[test]
    fn a_sweep_runs_its_variants_on_the_same_rides_and_renders_a_page() {
        // Two carriers counts on two quick rides: each group beside its own vanilla.
        let s = Sweep {
            name: SweepName::Carriers,
            title: "Carriers",
            param: "carriers · system",
            about: "test",
            variants: [2usize, 3]
                .iter()
                .flat_map(|&n| {
                    ["vanilla", "hrsch"].map(|sys| Variant {
                        carriers: Some(n),
                        ..variant(format!("{n} · {sys}"), sys, n == 2)
                    })
                })
                .collect(),
            bulk: true,
            extra: Extra::StageMoves("hpr"),
        };
        let v = run_sweep(&args(2), &s, 1).unwrap();
        let rows = v["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 4);
        for r in rows {
            let fct = &r["fct_over_oracle"]["262144"];
            assert!(fct["median"].as_f64().unwrap() >= 1.0, "{r}");
            assert!(fct["completed"].as_u64().unwrap() >= 1, "{r}");
            for (u, im) in r["im"].as_object().unwrap() {
                let (mean, bound) = (
                    im["mean_ms"].as_f64().unwrap(),
                    im["bound_ms"].as_f64().unwrap(),
                );
                assert!(
                    mean >= bound * 0.999,
                    "{u} users: mean {mean} below its bound {bound}"
                );
            }
        }
        // vanilla is the reference: no ratio of its own; hrsch has one per size over both rides.
        assert!(rows[0]["goodput_vs_vanilla"]
            .as_object()
            .unwrap()
            .is_empty());
        assert_eq!(rows[1]["goodput_vs_vanilla"]["1048576"]["rides"], 2);
        // Three carriers are a different ride from two.
        assert_ne!(rows[0]["fct_over_oracle"], rows[2]["fct_over_oracle"]);

        let summary = json!({"kind": "sweeps", "preset": "hsr", "route_seed": 1, "trip_seeds": [1, 2],
            "rides": 2, "mode": "quick", "build": "b", "command": "polycorn sim sweep", "started": "2026-12-02T10:00:00Z",
            "sweeps": [v]});
        let page = page(&summary).unwrap();
        assert!(
            page.starts_with("# Parameter sweeps in the simulator"),
            "{page}"
        );
        assert!(page.contains("| **2 · hrsch** |"), "{page}");
        assert!(
            page.contains("`polycorn sim sweep` · build `b` · 2026-12-02"),
            "{page}"
        );
        assert_eq!(page.matches("\n| 3 · ").count(), 2, "{page}");
    }
}
