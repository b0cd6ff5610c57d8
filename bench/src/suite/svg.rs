//! Hand-written SVG line charts: axes with ticks, optional log scales,
//! one colour per server, a dash pattern per group, and a legend.

use std::fmt::Write as _;

pub struct Series {
    pub name: String,
    /// Index into the palette: one colour per server.
    pub colour: usize,
    /// Index into the dash patterns: one per group of the same server.
    pub dash: usize,
    pub points: Vec<(f64, f64)>,
}

pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_log: bool,
    pub y_log: bool,
    /// Categorical x axis: these labels at x = 0, 1, 2...
    pub x_names: Option<Vec<String>>,
    pub series: Vec<Series>,
}

pub const CORE_KV: usize = 0;
pub const REDIS: usize = 1;
const PALETTE: [&str; 4] = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd"];
const DASHES: [&str; 4] = ["", "6,3", "2,3", "8,3,2,3"];
const PLOT_W: f64 = 440.0;
const H: f64 = 420.0;
const LEFT: f64 = 80.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;

struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Axis {
    fn new(values: impl Iterator<Item = f64>, log: bool, from_zero: bool) -> Axis {
        let vals: Vec<f64> = values.filter(|v| v.is_finite() && (!log || *v > 0.0)).collect();
        let (mut lo, mut hi) = vals.iter().fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        if vals.is_empty() {
            (lo, hi) = (1.0, 10.0);
        }
        if log {
            lo = 10f64.powf(lo.log10().floor());
            hi = 10f64.powf(hi.log10().ceil().max(lo.log10() + 1.0));
        } else {
            if from_zero {
                lo = lo.min(0.0);
            }
            if hi <= lo {
                (lo, hi) = (lo - 1.0, hi + 1.0);
            }
            let step = nice_step((hi - lo) / 5.0);
            lo = (lo / step).floor() * step;
            hi = (hi / step).ceil() * step;
        }
        Axis { lo, hi, log }
    }

    /// 0..1 position of `v` along the axis.
    fn frac(&self, v: f64) -> f64 {
        if self.log {
            (v.max(self.lo).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (self.lo.log10().round() as i32, self.hi.log10().round() as i32);
            (a..=b).map(|e| 10f64.powi(e)).collect()
        } else {
            let step = nice_step((self.hi - self.lo) / 5.0);
            let n = ((self.hi - self.lo) / step).round() as usize;
            (0..=n).map(|i| self.lo + step * i as f64).collect()
        }
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.max(1e-12).log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|&s| s >= raw).unwrap_or(10.0 * p)
}

/// Tick label: 1200000 -> "1.2M", 0.05 -> "0.05".
pub fn short_number(v: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    let a = v.abs();
    if a >= 1e9 {
        trim(format!("{:.2}", v / 1e9)) + "G"
    } else if a >= 1e6 {
        trim(format!("{:.2}", v / 1e6)) + "M"
    } else if a >= 1e3 {
        trim(format!("{:.2}", v / 1e3)) + "k"
    } else {
        trim(format!("{v:.3}"))
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

pub fn render(c: &Chart) -> String {
    let points = || c.series.iter().flat_map(|s| s.points.iter());
    let xa = match &c.x_names {
        Some(n) => Axis { lo: -0.3, hi: n.len().max(1) as f64 - 0.7, log: false },
        None => Axis::new(points().map(|p| p.0), c.x_log, false),
    };
    let ya = Axis::new(points().map(|p| p.1), c.y_log, true);
    // The legend sits right of the plot, as wide as its longest name.
    let longest = c.series.iter().map(|s| s.name.chars().count()).max().unwrap_or(0) as f64;
    let right = (longest * 7.0 + 60.0).max(120.0);
    let w = LEFT + PLOT_W + right;
    let (pw, ph) = (PLOT_W, H - TOP - BOTTOM);
    let px = |x: f64| LEFT + xa.frac(x) * pw;
    let py = |y: f64| TOP + (1.0 - ya.frac(y)) * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{H}" viewBox="0 0 {w} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        LEFT + pw / 2.0,
        escape(&c.title)
    );
    // Grid and ticks.
    for t in ya.ticks() {
        let y = py(t);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            y + 4.0,
            short_number(t)
        );
    }
    let xticks: Vec<(f64, String)> = match &c.x_names {
        Some(n) => n.iter().enumerate().map(|(i, l)| (i as f64, l.clone())).collect(),
        None => xa.ticks().into_iter().map(|t| (t, short_number(t))).collect(),
    };
    for (t, label) in xticks {
        let x = px(t);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + ph,
            TOP + ph + 18.0,
            escape(&label)
        );
    }
    let _ = writeln!(s, r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        H - 16.0,
        escape(&(c.x_label.clone() + if c.x_log { " (log)" } else { "" }))
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        TOP + ph / 2.0,
        escape(&(c.y_label.clone() + if c.y_log { " (log)" } else { "" }))
    );
    // Series and legend.
    for (i, ser) in c.series.iter().enumerate() {
        let colour = PALETTE[ser.colour % PALETTE.len()];
        let dash = DASHES[ser.dash % DASHES.len()];
        let dash_attr = if dash.is_empty() { String::new() } else { format!(r#" stroke-dasharray="{dash}""#) };
        let pts: Vec<String> = ser
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite() && (!c.y_log || p.1 > 0.0))
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline class="series" data-name="{}" points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}/>"#,
            escape(&ser.name),
            pts.join(" ")
        );
        for p in &pts {
            let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(s, r#"<circle cx="{x}" cy="{y}" r="3" fill="{colour}"/>"#);
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = LEFT + PLOT_W + 14.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash_attr}/><text x="{}" y="{}">{}</text>"#,
            lx + 26.0,
            lx + 32.0,
            ly + 4.0,
            escape(&ser.name)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(y_log: bool) -> Chart {
        Chart {
            title: "GET <small> & co".into(),
            x_label: "connections".into(),
            y_label: "ops/s".into(),
            x_log: false,
            y_log,
            x_names: None,
            series: vec![
                Series { name: "corekv".into(), colour: CORE_KV, dash: 0, points: vec![(1.0, 10.0), (50.0, 900.0)] },
                Series { name: "redis".into(), colour: REDIS, dash: 1, points: vec![(1.0, 8.0), (50.0, 700.0)] },
            ],
        }
    }

    /// Every `<` opens a tag that is closed (by `/>` or a matching end tag).
    fn well_formed(svg: &str) {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = svg;
        while let Some(i) = rest.find('<') {
            let end = rest[i..].find('>').expect("unterminated tag") + i;
            let tag = &rest[i + 1..end];
            assert!(!tag.contains('<'), "stray < in {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name), "mismatched </{name}>");
            } else if !tag.ends_with('/') {
                stack.push(tag.split_whitespace().next().unwrap().to_string());
            }
            rest = &rest[end + 1..];
        }
        assert!(stack.is_empty(), "unclosed {stack:?}");
    }

    #[test]
    fn charts_are_well_formed_with_every_series() {
        for log in [false, true] {
            let svg = render(&chart(log));
            well_formed(&svg);
            assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
            assert_eq!(svg.matches(r#"class="series""#).count(), 2);
            assert!(svg.contains(r#"data-name="corekv""#) && svg.contains(r#"data-name="redis""#));
            assert!(svg.contains("GET &lt;small&gt; &amp; co"), "title escaped");
            assert!(svg.contains(PALETTE[CORE_KV]) && svg.contains(PALETTE[REDIS]));
            assert!(!svg.contains("NaN") && !svg.contains("inf"));
        }
        assert!(render(&chart(true)).contains(">1k<"), "log ticks at powers of ten");
    }

    #[test]
    fn categorical_axis_and_empty_chart() {
        let mut c = chart(true);
        c.x_names = Some(vec!["p50".into(), "p99".into()]);
        c.series[0].points = vec![(0.0, 100.0), (1.0, 900.0)];
        let svg = render(&c);
        well_formed(&svg);
        assert!(svg.contains(">p50<") && svg.contains(">p99<"));
        c.series.clear();
        well_formed(&render(&c));
    }

    #[test]
    fn tick_labels() {
        assert_eq!(short_number(1_200_000.0), "1.2M");
        assert_eq!(short_number(50_000.0), "50k");
        assert_eq!(short_number(0.05), "0.05");
        assert_eq!(short_number(0.0), "0");
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(130.0), 200.0);
    }
}
