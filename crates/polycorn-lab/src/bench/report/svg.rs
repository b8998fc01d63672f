//! SVG plots for report.html: frames, line and bar charts, CDFs, the trip plot.

use std::fmt::Write as _;

use super::results::*;

/// A named line: (x, y) points.
pub(super) type LineSeries = (String, Vec<(f64, f64)>);
/// A named bar series: (value, CI low, CI high) per group.
pub(super) type BarSeries = (String, Vec<(f64, f64, f64)>);

pub(super) const COLORS: [&str; 12] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#637939",
];

pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Plot geometry.
pub(super) struct Frame {
    pub(super) w: f64,
    pub(super) h: f64,
    pub(super) l: f64,
    pub(super) r: f64,
    pub(super) t: f64,
    pub(super) b: f64,
    pub(super) x0: f64,
    pub(super) x1: f64,
    pub(super) y0: f64,
    pub(super) y1: f64,
    /// Numeric ticks under the x axis (off for bar charts, whose groups are named instead).
    pub(super) x_ticks: bool,
}

impl Frame {
    pub(super) fn new(x0: f64, x1: f64, y0: f64, y1: f64) -> Frame {
        let (x1, y1) = (
            if x1 > x0 { x1 } else { x0 + 1.0 },
            if y1 > y0 { y1 } else { y0 + 1.0 },
        );
        Frame {
            w: 560.0,
            h: 300.0,
            l: 56.0,
            r: 130.0,
            t: 28.0,
            b: 42.0,
            x_ticks: true,
            x0,
            x1,
            y0,
            y1,
        }
    }
    pub(super) fn x(&self, v: f64) -> f64 {
        self.l + (v - self.x0) / (self.x1 - self.x0) * (self.w - self.l - self.r)
    }
    pub(super) fn y(&self, v: f64) -> f64 {
        self.h - self.b - (v - self.y0) / (self.y1 - self.y0) * (self.h - self.t - self.b)
    }
    pub(super) fn open(&self, id: &str, title: &str, xl: &str, yl: &str) -> String {
        let mut s = format!(
            "<svg class=\"plot\" id=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\">",
            self.w, self.h, self.w, self.h
        );
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{}</text>",
            self.l,
            esc(title)
        );
        let (pl, pr, pt, pb) = (self.l, self.w - self.r, self.t, self.h - self.b);
        let _ = write!(
            s,
            "<rect x=\"{pl}\" y=\"{pt}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>",
            pr - pl,
            pb - pt
        );
        for k in 0..=4 {
            let xv = self.x0 + (self.x1 - self.x0) * k as f64 / 4.0;
            let yv = self.y0 + (self.y1 - self.y0) * k as f64 / 4.0;
            if self.x_ticks {
                let _ = write!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
                    self.x(xv),
                    pb + 14.0,
                    tick(xv)
                );
            }
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{}</text><line x1=\"{pl}\" x2=\"{pr}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#eee\"/>",
                pl - 4.0,
                self.y(yv) + 3.0,
                tick(yv),
                self.y(yv),
                self.y(yv)
            );
        }
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
            (pl + pr) / 2.0,
            self.h - 8.0,
            esc(xl)
        );
        let _ = write!(
            s,
            "<text x=\"12\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\" transform=\"rotate(-90 12 {:.1})\">{}</text>",
            (pt + pb) / 2.0,
            (pt + pb) / 2.0,
            esc(yl)
        );
        s
    }
    pub(super) fn legend(&self, s: &mut String, items: &[(String, &str)]) {
        for (k, (name, color)) in items.iter().enumerate() {
            let y = self.t + 8.0 + k as f64 * 15.0;
            let x = self.w - self.r + 10.0;
            let _ = write!(
                s,
                "<g class=\"legend\"><rect x=\"{x}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{}</text></g>",
                y - 8.0,
                x + 14.0,
                y + 1.0,
                esc(name)
            );
        }
    }
}

pub(super) fn tick(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Line chart: one polyline (class `series`) per series.
pub(super) fn lines(
    id: &str,
    title: &str,
    xl: &str,
    yl: &str,
    series: &[LineSeries],
    step: bool,
) -> String {
    let pts = series.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
    for &(x, y) in pts {
        if x.is_finite() && y.is_finite() {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    let fr = Frame::new(x0.min(0.0), x1, 0.0, y1 * 1.05);
    let mut s = fr.open(id, title, xl, yl);
    let mut legend = Vec::new();
    for (k, (name, p)) in series.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        legend.push((name.clone(), c));
        let mut d = String::new();
        let mut prev: Option<(f64, f64)> = None;
        for &(x, y) in p.iter().filter(|(x, y)| x.is_finite() && y.is_finite()) {
            if d.is_empty() {
                let _ = write!(d, "M{:.1},{:.1}", fr.x(x), fr.y(y));
            } else {
                if step {
                    if let Some((_, py)) = prev {
                        let _ = write!(d, " L{:.1},{:.1}", fr.x(x), fr.y(py));
                    }
                }
                let _ = write!(d, " L{:.1},{:.1}", fr.x(x), fr.y(y));
            }
            prev = Some((x, y));
        }
        if !d.is_empty() {
            let _ = write!(
                s,
                "<path class=\"series\" d=\"{d}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"1.6\"><title>{}</title></path>",
                esc(name)
            );
        }
    }
    fr.legend(&mut s, &legend);
    s.push_str("</svg>");
    s
}

/// Grouped bar chart: groups on x, one bar (class `bar`) per series, optional whiskers.
pub(super) fn bars(
    id: &str,
    title: &str,
    yl: &str,
    groups: &[String],
    series: &[BarSeries],
    reference_line: Option<f64>,
) -> String {
    let mut y1 = reference_line.unwrap_or(0.0);
    for (_, v) in series {
        for &(m, _, hi) in v {
            for x in [m, hi] {
                if x.is_finite() {
                    y1 = y1.max(x);
                }
            }
        }
    }
    let mut fr = Frame::new(0.0, groups.len() as f64, 0.0, y1 * 1.1);
    fr.x_ticks = false;
    let mut s = fr.open(id, title, "", yl);
    let gw = (fr.w - fr.l - fr.r) / groups.len().max(1) as f64;
    let bw = gw * 0.8 / series.len().max(1) as f64;
    for (g, name) in groups.iter().enumerate() {
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
            fr.l + gw * (g as f64 + 0.5),
            fr.h - fr.b + 16.0,
            esc(name)
        );
    }
    let mut legend = Vec::new();
    for (k, (name, vals)) in series.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        legend.push((name.clone(), c));
        for (g, &(m, lo, hi)) in vals.iter().enumerate() {
            if !m.is_finite() {
                continue;
            }
            let x = fr.l + gw * g as f64 + gw * 0.1 + bw * k as f64;
            let _ = write!(
                s,
                "<rect class=\"bar\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{c}\"><title>{} {}: {m:.3}</title></rect>",
                fr.y(m),
                bw * 0.9,
                (fr.y(0.0) - fr.y(m)).max(0.0),
                esc(name),
                esc(&groups[g])
            );
            if lo.is_finite() && hi.is_finite() {
                let cx = x + bw * 0.45;
                let _ = write!(
                    s,
                    "<line x1=\"{cx:.1}\" x2=\"{cx:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#000\"/>",
                    fr.y(lo.max(0.0)),
                    fr.y(hi)
                );
            }
        }
    }
    if let Some(v) = reference_line {
        let _ = write!(
            s,
            "<line x1=\"{}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#000\" stroke-dasharray=\"4 3\"/>",
            fr.l,
            fr.w - fr.r,
            fr.y(v),
            fr.y(v)
        );
    }
    fr.legend(&mut s, &legend);
    s.push_str("</svg>");
    s
}

pub(super) fn cdf(v: &[f64]) -> Vec<(f64, f64)> {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len() as f64;
    let mut out = vec![];
    for (i, x) in s.iter().enumerate() {
        out.push((*x, i as f64 / n));
        out.push((*x, (i + 1) as f64 / n));
    }
    out
}

/// The trip time series: capacity per path, failed (red) and successful (grey) handovers,
/// bulk flow starts, IM segments.
pub(super) fn trip_plot(r: &Results) -> String {
    let series: Vec<LineSeries> = r
        .capacity
        .iter()
        .enumerate()
        .map(|(i, c)| {
            (
                format!(
                    "{} capacity",
                    r.meta
                        .carriers
                        .get(i)
                        .cloned()
                        .unwrap_or(format!("path{i}"))
                ),
                c.iter()
                    .enumerate()
                    .map(|(s, v)| (s as f64 + 0.5, *v))
                    .collect(),
            )
        })
        .collect();
    let y1 = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.05;
    let fr = Frame::new(0.0, r.plan.end_s, 0.0, y1);
    let mut s = fr.open(
        "trip-series",
        "The emulated trip (identical for every system)",
        "seconds after emulator start",
        "downlink capacity, Mbit/s",
    );
    for seg in &r.plan.im {
        let _ = write!(
            s,
            "<rect class=\"im-segment\" x=\"{:.1}\" y=\"{}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#f3e8ff\"><title>IM {} users</title></rect>",
            fr.x(seg.start_s),
            fr.t,
            fr.x(seg.start_s + seg.deadline_s) - fr.x(seg.start_s),
            fr.h - fr.t - fr.b,
            seg.users
        );
    }
    for (k, (name, p)) in series.iter().enumerate() {
        let d: Vec<String> = p
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", fr.x(*x), fr.y(*y)))
            .collect();
        let _ = write!(
            s,
            "<polyline class=\"series\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.2\"><title>{}</title></polyline>",
            d.join(" "),
            COLORS[k % COLORS.len()],
            esc(name)
        );
    }
    for &(t, c, failed) in &r.handovers {
        let (color, h) = if failed {
            ("#d00", 0.0)
        } else {
            ("#999", 0.85)
        };
        let y_top = fr.t + (fr.h - fr.t - fr.b) * h;
        let _ = write!(
            s,
            "<line class=\"handover{}\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{y_top:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-width=\"{}\"><title>{} handover, carrier {c}, t={t:.1} s</title></line>",
            if failed { " failed" } else { "" },
            fr.h - fr.b,
            if failed { 1.5 } else { 0.8 },
            if failed { "failed" } else { "successful" },
            x = fr.x(t),
        );
    }
    for b in &r.plan.bulk {
        let x = fr.x(b.start_s);
        let y = fr.h - fr.b;
        let _ = write!(
            s,
            "<path class=\"flow-start\" d=\"M{x:.1},{y:.1} l-4,8 l8,0 z\" fill=\"#333\"><title>bulk flow {} ({}) at {:.1} s</title></path>",
            b.idx,
            size_label(b.size),
            b.start_s
        );
    }
    let mut legend: Vec<(String, &str)> = series
        .iter()
        .enumerate()
        .map(|(k, x)| (x.0.clone(), COLORS[k % COLORS.len()]))
        .collect();
    legend.push(("failed handover".into(), "#d00"));
    legend.push(("successful handover".into(), "#999"));
    legend.push(("IM segment".into(), "#e9d5ff"));
    fr.legend(&mut s, &legend);
    s.push_str("</svg>");
    s
}

/// Stacked bar chart: one bar per group, one segment (class `bar`) per part, positive parts
/// stacked up from zero and negative ones down from it, and a tick (class `total`) at each
/// group's `totals` value.
pub(super) fn stacked(
    id: &str,
    title: &str,
    yl: &str,
    groups: &[String],
    parts: &[&str],
    values: &[Vec<f64>],
    totals: &[f64],
) -> String {
    let (mut y0, mut y1) = (0.0f64, 0.0f64);
    for (v, t) in values.iter().zip(totals) {
        let up: f64 = v.iter().filter(|x| **x > 0.0).sum();
        let down: f64 = v.iter().filter(|x| **x < 0.0).sum();
        y1 = y1.max(up).max(*t);
        y0 = y0.min(down).min(*t);
    }
    let mut fr = Frame::new(0.0, groups.len() as f64, y0 * 1.1, y1 * 1.1);
    fr.x_ticks = false;
    fr.w = (160.0 + 34.0 * groups.len() as f64).max(560.0);
    fr.b = 70.0;
    let mut s = fr.open(id, title, "", yl);
    let gw = (fr.w - fr.l - fr.r) / groups.len().max(1) as f64;
    for (g, name) in groups.iter().enumerate() {
        let x = fr.l + gw * (g as f64 + 0.5);
        let y = fr.h - fr.b + 12.0;
        let _ = write!(
            s,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"10\" text-anchor=\"end\" transform=\"rotate(-45 {x:.1} {y:.1})\">{}</text>",
            esc(name)
        );
    }
    for (g, v) in values.iter().enumerate() {
        let x = fr.l + gw * g as f64 + gw * 0.15;
        let (mut up, mut down) = (0.0, 0.0);
        for (k, &p) in v.iter().enumerate() {
            if !p.is_finite() || p == 0.0 {
                continue;
            }
            let (a, b) = if p > 0.0 {
                up += p;
                (up, up - p)
            } else {
                down += p;
                (down - p, down)
            };
            let _ = write!(
                s,
                "<rect class=\"bar\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{} {}: {p:.1}</title></rect>",
                fr.y(a),
                gw * 0.7,
                (fr.y(b) - fr.y(a)).max(0.0),
                COLORS[k % COLORS.len()],
                esc(&groups[g]),
                esc(parts.get(k).copied().unwrap_or("?"))
            );
        }
        if let Some(t) = totals.get(g).filter(|t| t.is_finite()) {
            let _ = write!(
                s,
                "<line class=\"total\" x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#000\" stroke-width=\"2\"><title>{}: {t:.1}</title></line>",
                x - gw * 0.05,
                x + gw * 0.75,
                fr.y(*t),
                fr.y(*t),
                esc(&groups[g])
            );
        }
    }
    let _ = write!(
        s,
        "<line x1=\"{}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#888\"/>",
        fr.l,
        fr.w - fr.r,
        fr.y(0.0),
        fr.y(0.0)
    );
    let legend: Vec<(String, &str)> = parts
        .iter()
        .enumerate()
        .map(|(k, p)| (p.to_string(), COLORS[k % COLORS.len()]))
        .collect();
    fr.legend(&mut s, &legend);
    s.push_str("</svg>");
    s
}
