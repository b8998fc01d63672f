//! Pipelines from text specs, so configs and benches can choose a scheduler by name.
//!
//! ```text
//! spec    := preset | stages [ "+" reinj ]
//! stages  := stage { "," stage }
//! stage   := name [ "(" key "=" value { "," key "=" value } ")" ]
//! reinj   := "er" [ "(" er_param { "," er_param } ")" ] | "rto" | "none"
//! er_param := "k" "=" N | "cell_loss" "=" ("1"|"0") | "oldest" "=" ("1"|"0") | "stuck_ms" "=" N
//! ```
//!
//! Without `+reinj` the policy is `rto`, Linux MPTCP's behaviour. `er` keeps that behaviour
//! below the k-th RTO and adds the batch at k; `er(oldest=0)` is the batch alone.
//! `er(cell_loss=1)` also reinjects a path's unacknowledged data as soon as the relay reports
//! that path lost its cell, and `er(stuck_ms=N)` sends a chunk again on another path once it
//! has waited at least N ms and two of that path's RTTs on its own (both beyond the paper;
//! preset `polycorn`, which also copies thin flows onto every path with
//! `ori(thin_bytes=5600)` and lets them wait in the lowest-RTT path's socket when its window is
//! full with `minrtt(thin_bytes=5600)`). `tpr(wait=1)` keeps a tail chunk waiting even when
//! the path TPR found sooner could take it now, `tpr(eta=X)` relaxes its bound by a fixed `X`
//! instead of each path's `rttvar / srtt` (see [`crate::stages::Tpr`]). `stms(gain=G)`
//! scales the gap by which STMS places a slow path's chunks ahead ([`crate::stages::Stms`]);
//! `musher(round=N,interval_ms=N,step_pct=N,collapse_pct=N,reprobe_ms=N)` tunes MuSher's ratio
//! rounds, measurements, search step, collapse threshold and re-probe time
//! ([`crate::stages::Musher`]). Examples: `hrsch`, `hpr,minrtt,tpr,ori+er`,
//! `minrtt,ecf(beta=0.25)`, `hpr(e_gps_m=30),minrtt+er(k=2)`, `minrtt,stms(gain=0.8)`,
//! `stale,musher(step_pct=10)`.

use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::reinject::{Reinjection, DEFAULT_ER_K};
use crate::sets::StageKind;
use crate::stage::Schedulerlet;
use crate::stages::{
    Blest, Ecf, Hpr, LocationTable, MinRtt, Musher, Ori, Redundant, RoundRobin, SinglePath, Stale,
    Stms, Tpr,
};
use crate::time::Duration;

/// Stage names a spec may use, with what they are.
pub const STAGES: &[(&str, &str)] = &[
    (
        "hpr",
        "candidate filter: reject paths facing a predicted handover failure (POLYCORN §4.3)",
    ),
    (
        "loctable",
        "candidate filter: block paths inside recorded handover zones (Kim & Cho)",
    ),
    (
        "stale",
        "candidate filter: leave out paths waiting out an RTO while another path is not (MPTCP's potentially-failed subflows)",
    ),
    (
        "minrtt",
        "soft selector: lowest RTT with window room (MPTCP default)",
    ),
    (
        "rr",
        "soft selector: round robin over paths with window room",
    ),
    ("redundant", "soft selector: every path with window room"),
    (
        "single",
        "soft selector: one path per user, users round robin over paths",
    ),
    (
        "tpr",
        "selection filter: keep tail chunks off slow paths (POLYCORN §4.4)",
    ),
    (
        "blest",
        "selection filter: BLEST blocking estimation (Ferlin et al.)",
    ),
    (
        "ecf",
        "selection filter: earliest completion first (Lim et al.)",
    ),
    (
        "musher",
        "soft selector: split chunks in the ratio of the paths' throughputs, probe the ratio, drop collapsed paths (Saha et al.)",
    ),
    (
        "stms",
        "selection filter: put the slow path's chunks ahead by what the fast path delivers meanwhile (Shi et al.)",
    ),
    (
        "ori",
        "hard selector: duplicate chunks onto idle paths (POLYCORN §4.6)",
    ),
];

/// Named presets and the specs they stand for.
pub const PRESETS: &[(&str, &str)] = &[
    ("hrsch", "hpr,minrtt,tpr,ori+er"),
    (
        "polycorn",
        "hpr(keep=1),minrtt(thin_bytes=5600),tpr,ori(thin_bytes=5600)+er(k=3,cell_loss=1,stuck_ms=1000)",
    ),
    ("vanilla", "minrtt+rto"),
    ("minrtt", "minrtt+rto"),
    ("roundrobin", "rr+rto"),
    ("redundant", "redundant+rto"),
    ("blest", "minrtt,blest+rto"),
    ("ecf", "minrtt,ecf+rto"),
    ("stms", "minrtt,stms+rto"),
    ("musher", "musher+rto"),
    ("single", "single+none"),
    ("loctable", "loctable,minrtt+rto"),
];

/// Why a spec was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Nothing given.
    #[error("empty scheduler spec; presets: {presets}; stages: {stages}")]
    Empty {
        /// Valid presets.
        presets: String,
        /// Valid stages.
        stages: String,
    },
    /// A name that is neither a stage nor a preset.
    #[error("unknown stage `{name}` in `{spec}`; stages: {stages}; presets: {presets}")]
    UnknownStage {
        /// The offending name.
        name: String,
        /// The whole spec.
        spec: String,
        /// Valid stages.
        stages: String,
        /// Valid presets.
        presets: String,
    },
    /// The part after `+` is not a reinjection policy.
    #[error("unknown reinjection policy `{name}` in `{spec}`; valid: er, er(k=N,cell_loss=0|1,oldest=0|1,stuck_ms=N), rto, none")]
    UnknownReinjection {
        /// The offending name.
        name: String,
        /// The whole spec.
        spec: String,
    },
    /// A parameter the stage does not take.
    #[error("stage `{stage}` has no parameter `{key}`; valid: {valid}")]
    UnknownParam {
        /// Stage.
        stage: String,
        /// Offending key.
        key: String,
        /// Valid keys.
        valid: String,
    },
    /// A parameter value that does not parse or is out of range.
    #[error("stage `{stage}`: `{key}={value}` is not {expected}")]
    BadValue {
        /// Stage.
        stage: String,
        /// Key.
        key: String,
        /// Value as given.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// Unbalanced parentheses, empty stage names, missing `=`.
    #[error("malformed scheduler spec `{spec}`: {what}")]
    Syntax {
        /// The whole spec.
        spec: String,
        /// What is wrong.
        what: &'static str,
    },
    /// No stage ever selects a path.
    #[error("pipeline `{spec}` has no soft or hard selector, so it would never send anything")]
    NoSelector {
        /// The whole spec.
        spec: String,
    },
    /// Stages out of kind order.
    #[error("pipeline `{spec}`: `{stage}` ({kind}) cannot come after `{after}` ({after_kind}); order stages as candidate filters, soft selectors, selection filters, hard selectors")]
    StageOrder {
        /// The whole spec.
        spec: String,
        /// The misplaced stage.
        stage: &'static str,
        /// Its kind.
        kind: StageKind,
        /// The stage it follows.
        after: &'static str,
        /// That stage's kind.
        after_kind: StageKind,
    },
}

fn names(list: &[(&str, &str)]) -> String {
    list.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// A pipeline of schedulerlets plus a reinjection policy.
pub struct Pipeline {
    pub(crate) stages: Vec<Box<dyn Schedulerlet>>,
    pub(crate) reinjection: Reinjection,
    spec: String,
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("spec", &self.spec)
            .finish()
    }
}

impl Pipeline {
    /// A pipeline from explicit stages. Fails if no stage can select a path.
    pub fn new(
        stages: Vec<Box<dyn Schedulerlet>>,
        reinjection: Reinjection,
    ) -> Result<Self, SpecError> {
        let mut spec = stages
            .iter()
            .map(|s| match s.params() {
                p if p.is_empty() => s.name().to_string(),
                p => alloc::format!("{}({p})", s.name()),
            })
            .collect::<Vec<_>>()
            .join(",");
        spec.push('+');
        spec.push_str(&reinjection.spec());
        if !stages
            .iter()
            .any(|s| matches!(s.kind(), StageKind::SoftSelector | StageKind::HardSelector))
        {
            return Err(SpecError::NoSelector { spec });
        }
        // Paper §4.2: each kind works on the output of the kinds before it. In this order a path
        // that a filter rejected can only reach S again through a hard selector.
        for w in stages.windows(2) {
            if kind_rank(w[1].kind()) < kind_rank(w[0].kind()) {
                return Err(SpecError::StageOrder {
                    spec,
                    stage: w[1].name(),
                    kind: w[1].kind(),
                    after: w[0].name(),
                    after_kind: w[0].kind(),
                });
            }
        }
        Ok(Pipeline {
            stages,
            reinjection,
            spec,
        })
    }

    /// Parse a spec or preset name (see the module docs).
    pub fn from_spec(spec: &str) -> Result<Self, SpecError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(SpecError::Empty {
                presets: names(PRESETS),
                stages: names(STAGES),
            });
        }
        if let Some((_, expanded)) = PRESETS.iter().find(|(n, _)| *n == spec) {
            return Pipeline::from_spec(expanded);
        }
        let (stage_part, reinj_part) = match split_top(spec, '+')?.as_slice() {
            [s] => (*s, None),
            [s, r] => (*s, Some(*r)),
            _ => {
                return Err(SpecError::Syntax {
                    spec: spec.into(),
                    what: "more than one `+`",
                })
            }
        };
        let mut stages: Vec<Box<dyn Schedulerlet>> = Vec::new();
        for item in split_top(stage_part, ',')? {
            let (name, params) = parse_item(spec, item)?;
            stages.push(build_stage(spec, name, &params)?);
        }
        let reinjection = match reinj_part {
            None => Reinjection::OldestOnRto,
            Some(r) => {
                let (name, params) = parse_item(spec, r)?;
                match name {
                    "none" => {
                        no_params("none", &params)?;
                        Reinjection::None
                    }
                    "rto" => {
                        no_params("rto", &params)?;
                        Reinjection::OldestOnRto
                    }
                    "er" => {
                        let mut k = DEFAULT_ER_K;
                        let mut cell_loss = false;
                        let mut oldest = true;
                        let mut stuck = None;
                        for (key, v) in &params {
                            match *key {
                                "k" => k = parse_num("er", key, v, "an integer >= 1")?,
                                "cell_loss" => cell_loss = parse_flag("er", key, v)?,
                                "oldest" => oldest = parse_flag("er", key, v)?,
                                "stuck_ms" => {
                                    let ms: u64 = parse_num("er", key, v, "an integer >= 1")?;
                                    if ms == 0 {
                                        return Err(bad("er", key, v, "an integer >= 1"));
                                    }
                                    stuck = Some(Duration::from_millis(ms));
                                }
                                _ => {
                                    return Err(unknown_param(
                                        "er",
                                        key,
                                        "k, cell_loss, oldest, stuck_ms",
                                    ))
                                }
                            }
                        }
                        if k == 0 {
                            return Err(bad("er", "k", "0", "an integer >= 1"));
                        }
                        Reinjection::Extended {
                            k,
                            oldest,
                            cell_loss,
                            stuck,
                        }
                    }
                    other => {
                        return Err(SpecError::UnknownReinjection {
                            name: other.into(),
                            spec: spec.into(),
                        })
                    }
                }
            }
        };
        Pipeline::new(stages, reinjection)
    }

    /// The canonical spec of this pipeline (`stage,stage+reinjection`).
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// Stage names in order.
    pub fn stage_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.stages.iter().map(|s| s.name())
    }

    /// The reinjection policy.
    pub fn reinjection(&self) -> Reinjection {
        self.reinjection
    }
}

/// How a spec is shown with the pipeline it stands for: `spec = pipeline` when they differ (a
/// preset and its stages), else the spec alone.
pub fn label(spec: &str, pipeline: Option<&str>) -> String {
    match pipeline {
        Some(p) if p != spec => alloc::format!("{spec} = {p}"),
        _ => spec.to_string(),
    }
}

fn kind_rank(k: StageKind) -> u8 {
    match k {
        StageKind::CandidateFilter => 0,
        StageKind::SoftSelector => 1,
        StageKind::SelectionFilter => 2,
        StageKind::HardSelector => 3,
    }
}

type Params<'a> = Vec<(&'a str, &'a str)>;

/// Split on `sep` outside parentheses; every piece must be non-empty.
fn split_top(s: &str, sep: char) -> Result<Vec<&str>, SpecError> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(SpecError::Syntax {
                        spec: s.into(),
                        what: "`)` without `(`",
                    });
                }
            }
            c if c == sep && depth == 0 => {
                out.push(s[start..i].trim());
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SpecError::Syntax {
            spec: s.into(),
            what: "unclosed `(`",
        });
    }
    out.push(s[start..].trim());
    if out.iter().any(|p| p.is_empty()) {
        return Err(SpecError::Syntax {
            spec: s.into(),
            what: "empty item",
        });
    }
    Ok(out)
}

fn parse_item<'a>(spec: &str, item: &'a str) -> Result<(&'a str, Params<'a>), SpecError> {
    let Some(open) = item.find('(') else {
        return Ok((item, Vec::new()));
    };
    if !item.ends_with(')') {
        return Err(SpecError::Syntax {
            spec: spec.into(),
            what: "text after `)`",
        });
    }
    let name = item[..open].trim();
    let inner = item[open + 1..item.len() - 1].trim();
    let mut params = Vec::new();
    if !inner.is_empty() {
        for kv in split_top(inner, ',')? {
            let Some((k, v)) = kv.split_once('=') else {
                return Err(SpecError::Syntax {
                    spec: spec.into(),
                    what: "parameter without `=`",
                });
            };
            params.push((k.trim(), v.trim()));
        }
    }
    Ok((name, params))
}

fn unknown_param(stage: &str, key: &str, valid: &str) -> SpecError {
    SpecError::UnknownParam {
        stage: stage.into(),
        key: key.into(),
        valid: valid.into(),
    }
}

fn bad(stage: &str, key: &str, value: &str, expected: &'static str) -> SpecError {
    SpecError::BadValue {
        stage: stage.into(),
        key: key.into(),
        value: value.into(),
        expected,
    }
}

fn no_params(stage: &str, params: &Params<'_>) -> Result<(), SpecError> {
    match params.first() {
        None => Ok(()),
        Some((k, _)) => Err(unknown_param(stage, k, "(none)")),
    }
}

fn parse_num<T: core::str::FromStr>(
    stage: &str,
    key: &str,
    v: &str,
    expected: &'static str,
) -> Result<T, SpecError> {
    v.parse().map_err(|_| bad(stage, key, v, expected))
}

fn parse_flag(stage: &str, key: &str, v: &str) -> Result<bool, SpecError> {
    match v {
        "1" | "on" | "true" => Ok(true),
        "0" | "off" | "false" => Ok(false),
        _ => Err(bad(stage, key, v, "1 or 0")),
    }
}

fn parse_pos_f64(stage: &str, key: &str, v: &str) -> Result<f64, SpecError> {
    let x: f64 = parse_num(stage, key, v, "a finite number >= 0")?;
    if !x.is_finite() || x < 0.0 {
        return Err(bad(stage, key, v, "a finite number >= 0"));
    }
    Ok(x)
}

fn build_stage(
    spec: &str,
    name: &str,
    params: &Params<'_>,
) -> Result<Box<dyn Schedulerlet>, SpecError> {
    let stage: Box<dyn Schedulerlet> = match name {
        "hpr" => {
            let mut s = Hpr::default();
            for (k, v) in params {
                match *k {
                    "e_gps_m" => s.e_gps_m = parse_pos_f64(name, k, v)?,
                    "keep" => s.keep = parse_flag(name, k, v)?,
                    _ => return Err(unknown_param(name, k, "e_gps_m, keep")),
                }
            }
            Box::new(s)
        }
        "ori" => {
            let mut s = Ori::default();
            for (k, v) in params {
                match *k {
                    "alpha_ms" => {
                        s.alpha = Duration::from_millis(parse_num(name, k, v, "milliseconds")?)
                    }
                    "beta_bytes" => s.beta_bytes = parse_num(name, k, v, "a byte count")?,
                    "tau" => s.tau = parse_num(name, k, v, "a chunk count")?,
                    "displace" => s.displace = parse_flag(name, k, v)?,
                    "thin_bytes" => s.thin_bytes = parse_num(name, k, v, "a byte count")?,
                    _ => {
                        return Err(unknown_param(
                            name,
                            k,
                            "alpha_ms, beta_bytes, tau, displace, thin_bytes",
                        ))
                    }
                }
            }
            Box::new(s)
        }
        "ecf" => {
            let mut s = Ecf::default();
            for (k, v) in params {
                match *k {
                    "beta" => s.beta = parse_pos_f64(name, k, v)?,
                    _ => return Err(unknown_param(name, k, "beta")),
                }
            }
            Box::new(s)
        }
        "minrtt" => {
            let mut s = MinRtt::default();
            for (k, v) in params {
                match *k {
                    "thin_bytes" => s.thin_bytes = parse_num(name, k, v, "a byte count")?,
                    "age" => s.age = parse_flag(name, k, v)?,
                    _ => return Err(unknown_param(name, k, "thin_bytes, age")),
                }
            }
            Box::new(s)
        }
        "tpr" => {
            let mut s = Tpr::default();
            for (k, v) in params {
                match *k {
                    "wait" => s.wait = parse_flag(name, k, v)?,
                    "eta" => s.eta = Some(parse_pos_f64(name, k, v)?),
                    _ => return Err(unknown_param(name, k, "wait, eta")),
                }
            }
            Box::new(s)
        }
        "stms" => {
            let mut s = Stms::default();
            for (k, v) in params {
                match *k {
                    "gain" => s.gain = parse_pos_f64(name, k, v)?,
                    _ => return Err(unknown_param(name, k, "gain")),
                }
            }
            Box::new(s)
        }
        "musher" => {
            let mut s = Musher::default();
            for (k, v) in params {
                match *k {
                    "round" => {
                        s.round = parse_num(name, k, v, "an integer >= 1")?;
                        if s.round == 0 {
                            return Err(bad(name, k, v, "an integer >= 1"));
                        }
                    }
                    "interval_ms" => {
                        let ms: u64 = parse_num(name, k, v, "an integer >= 1")?;
                        if ms == 0 {
                            return Err(bad(name, k, v, "an integer >= 1"));
                        }
                        s.interval = Duration::from_millis(ms);
                    }
                    "step_pct" => {
                        s.step_pct = parse_num(name, k, v, "a percentage from 1 to 45")?;
                        if !(1..=45).contains(&s.step_pct) {
                            return Err(bad(name, k, v, "a percentage from 1 to 45"));
                        }
                    }
                    "collapse_pct" => {
                        s.collapse_pct = parse_num(name, k, v, "a percentage from 0 to 100")?;
                        if s.collapse_pct > 100 {
                            return Err(bad(name, k, v, "a percentage from 0 to 100"));
                        }
                    }
                    "reprobe_ms" => {
                        s.reprobe = Duration::from_millis(parse_num(name, k, v, "milliseconds")?)
                    }
                    _ => {
                        return Err(unknown_param(
                            name,
                            k,
                            "round, interval_ms, step_pct, collapse_pct, reprobe_ms",
                        ))
                    }
                }
            }
            Box::new(s)
        }
        "rr" | "redundant" | "single" | "loctable" | "blest" | "stale" => {
            no_params(name, params)?;
            match name {
                "rr" => Box::new(RoundRobin::default()),
                "redundant" => Box::new(Redundant),
                "single" => Box::new(SinglePath::default()),
                "loctable" => Box::new(LocationTable),
                "stale" => Box::new(Stale),
                _ => Box::new(Blest::default()),
            }
        }
        _ => {
            return Err(SpecError::UnknownStage {
                name: name.to_string(),
                spec: spec.into(),
                stages: names(STAGES),
                presets: names(PRESETS),
            })
        }
    };
    Ok(stage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_shows_the_pipeline_only_when_it_differs_from_the_spec() {
        let hrsch = Pipeline::from_spec("hrsch").unwrap();
        assert_eq!(
            label("hrsch", Some(hrsch.spec())),
            "hrsch = hpr,minrtt,tpr,ori+er(k=3)"
        );
        assert_eq!(label("minrtt+rto", Some("minrtt+rto")), "minrtt+rto");
        assert_eq!(label("-", None), "-");
    }

    #[test]
    fn presets_and_specs_parse() {
        let p = Pipeline::from_spec("hrsch").unwrap();
        assert_eq!(p.spec(), "hpr,minrtt,tpr,ori+er(k=3)");
        for (name, _) in PRESETS {
            Pipeline::from_spec(name).unwrap();
        }
        let p = Pipeline::from_spec(" hpr(e_gps_m=30), minrtt ,ori(alpha_ms=500,tau=4)+er(k=2)")
            .unwrap();
        assert_eq!(
            p.spec(),
            "hpr(e_gps_m=30),minrtt,ori(alpha_ms=500,tau=4)+er(k=2)"
        );
        // The canonical spec reads back to the same pipeline; defaults are left out.
        assert_eq!(Pipeline::from_spec(p.spec()).unwrap().spec(), p.spec());
        let k = Pipeline::from_spec("hpr(keep=1,e_gps_m=30),minrtt").unwrap();
        assert_eq!(k.spec(), "hpr(e_gps_m=30,keep=1),minrtt+rto");
        let d = Pipeline::from_spec("hpr(e_gps_m=20),minrtt,ori(displace=0,tau=16)").unwrap();
        assert_eq!(d.spec(), "hpr,minrtt,ori(displace=0)+rto");
        let w = Pipeline::from_spec("minrtt,tpr(wait=1),tpr(wait=0)").unwrap();
        assert_eq!(w.spec(), "minrtt,tpr(wait=1),tpr+rto");
        assert!(Pipeline::from_spec("minrtt,tpr(wait=2)").is_err());
        let e = Pipeline::from_spec("minrtt,tpr(wait=1,eta=0.5)").unwrap();
        assert_eq!(e.spec(), "minrtt,tpr(eta=0.5,wait=1)+rto");
        assert!(Pipeline::from_spec("minrtt,tpr(eta=-1)").is_err());
        assert!(Pipeline::from_spec("minrtt,tpr(k=1)").is_err());
        assert_eq!(
            p.reinjection(),
            Reinjection::Extended {
                k: 2,
                oldest: true,
                cell_loss: false,
                stuck: None
            }
        );
        assert_eq!(
            Pipeline::from_spec("minrtt").unwrap().reinjection(),
            Reinjection::OldestOnRto
        );
    }

    #[test]
    fn errors_name_the_problem() {
        let e = Pipeline::from_spec("hpr,fastest").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("`fastest`") && msg.contains("minrtt") && msg.contains("hrsch"),
            "{msg}"
        );
        assert!(matches!(
            Pipeline::from_spec(""),
            Err(SpecError::Empty { .. })
        ));
        assert!(matches!(
            Pipeline::from_spec("hpr,tpr"),
            Err(SpecError::NoSelector { .. })
        ));
        assert!(matches!(
            Pipeline::from_spec("minrtt+er(k=0)"),
            Err(SpecError::BadValue { .. })
        ));
        assert!(matches!(
            Pipeline::from_spec("minrtt+fast"),
            Err(SpecError::UnknownReinjection { .. })
        ));
        assert!(matches!(
            Pipeline::from_spec("ori(gamma=1),minrtt"),
            Err(SpecError::UnknownParam { .. })
        ));
        assert!(matches!(
            Pipeline::from_spec("minrtt(x=1)"),
            Err(SpecError::UnknownParam { .. })
        ));
        assert!(matches!(
            Pipeline::from_spec("hpr(e_gps_m=-1),minrtt"),
            Err(SpecError::BadValue { .. })
        ));
        assert!(matches!(
            Pipeline::from_spec("minrtt,,tpr"),
            Err(SpecError::Syntax { .. })
        ));
        assert!(matches!(
            Pipeline::from_spec("ori(tau=1,minrtt"),
            Err(SpecError::Syntax { .. })
        ));
        assert!(matches!(
            Pipeline::from_spec("minrtt+er+rto"),
            Err(SpecError::Syntax { .. })
        ));
        assert!(matches!(
            Pipeline::from_spec("ori(tau)"),
            Err(SpecError::Syntax { .. })
        ));
        let e = Pipeline::from_spec("minrtt,tpr,minrtt").unwrap_err();
        assert!(
            matches!(
                e,
                SpecError::StageOrder {
                    stage: "minrtt",
                    after: "tpr",
                    ..
                }
            ),
            "{e}"
        );
        assert!(matches!(
            Pipeline::from_spec("minrtt,hpr"),
            Err(SpecError::StageOrder { .. })
        ));
    }
}
