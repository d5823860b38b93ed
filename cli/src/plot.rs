//! `dataplane plot RESULT.json... -o FILE.png|svg`: one panel per question, each with its
//! title and its legend beside the data, never over it. How fast: RX Gb/s over time from
//! the per-second series. How long: one-way latency percentiles (min to max, log axis: they
//! span decades). What was lost: drops by cause. For several runs, how they compare: the
//! median Gb/s and Mpps per run (labelled by payload size when the runs differ in it, else
//! by file name), so a sweep can be looked at. An axis whose values span more than a
//! decade is logarithmic.

use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// One run read from a `bench raw --json` result.
pub struct Run {
    /// Its label in the legend.
    pub label: String,
    /// Payload bytes (`setup.payload_bytes`).
    pub payload: Option<u64>,
    /// (seconds, RX Gb/s, RX Mpps) per series point.
    pub points: Vec<(f64, f64, f64)>,
    /// One-way latency percentiles in ns (min, p50, p99, p99.9, max), when measured.
    pub latency: Option<[f64; 5]>,
    /// Drops by cause (the report's `drops`), only the causes with drops.
    pub drops: Vec<(String, u64)>,
}

impl Run {
    /// Reads the last JSON line of `path` (the report), which must have a `series`.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let line = text
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .ok_or_else(|| {
                format!(
                    "{}: no JSON object (a `bench raw --json` result)",
                    path.display()
                )
            })?;
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("{}: {e}", path.display()))?;
        // The report inside the JSON envelope (results saved before it are bare).
        let v = if v.get("schema_version").is_some() {
            v["result"].clone()
        } else {
            v
        };
        let series = v["series"].as_array().ok_or_else(|| {
            format!(
                "{}: no `series` (results of `dataplane bench raw --json` have one)",
                path.display()
            )
        })?;
        let points: Vec<(f64, f64, f64)> = series
            .iter()
            .filter_map(|p| {
                Some((
                    p["t_s"].as_f64()?,
                    p["rx_gbps"].as_f64()?,
                    p["rx_mpps"].as_f64()?,
                ))
            })
            .collect();
        if points.is_empty() {
            return Err(format!(
                "{}: the series is empty (a run of at least 1 s has points)",
                path.display()
            ));
        }
        let stem = path
            .file_stem()
            .map_or_else(|| "run".into(), |s| s.to_string_lossy().into_owned());
        let l = &v["latency"];
        let latency = ["min_ns", "p50_ns", "p99_ns", "p999_ns", "max_ns"]
            .map(|k| l[k].as_f64())
            .into_iter()
            .collect::<Option<Vec<f64>>>()
            .and_then(|p| p.try_into().ok());
        let drops = v["drops"]
            .as_object()
            .map(|d| {
                d.iter()
                    .filter_map(|(cause, n)| Some((cause.clone(), n.as_u64()?)))
                    .filter(|(_, n)| *n > 0)
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            label: stem,
            payload: v["setup"]["payload_bytes"].as_u64(),
            points,
            latency,
            drops,
        })
    }

    /// Median of the points' RX Gb/s and Mpps.
    pub fn medians(&self) -> (f64, f64) {
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        (
            median(self.points.iter().map(|p| p.1).collect()),
            median(self.points.iter().map(|p| p.2).collect()),
        )
    }
}

/// Where a TrueType font is looked for (the text of the plot needs one).
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

fn register_font() -> Result<(), String> {
    let from_env = std::env::var_os("DATAPLANE_PLOT_FONT").map(PathBuf::from);
    let candidates = from_env
        .iter()
        .cloned()
        .chain(FONTS.iter().map(PathBuf::from));
    for path in candidates {
        if let Ok(bytes) = std::fs::read(&path) {
            // Registered once per process; the plot lives as long as the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            return plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{}: not a TrueType font", path.display()));
        }
    }
    Err(format!(
        "no TrueType font found (looked at {}): apt-get install fonts-dejavu-core, or set DATAPLANE_PLOT_FONT=FILE.ttf",
        FONTS.join(", ")
    ))
}

/// Width of every plot, height of one panel and of the title above them.
const WIDTH: u32 = 1200;
const PANEL: u32 = 360;
const TITLE: u32 = 40;
/// Width of the legend column beside each panel.
const LEGEND: u32 = 260;

/// The panels drawn for `runs`, in order.
fn panels(runs: &[Run]) -> Vec<Panel> {
    let mut p = vec![Panel::Rate];
    if runs.iter().any(|r| r.latency.is_some()) {
        p.push(Panel::Latency);
    }
    p.push(Panel::Drops);
    if runs.len() > 1 {
        p.push(Panel::Medians);
    }
    p
}

/// One question a panel answers.
#[derive(Clone, Copy)]
enum Panel {
    Rate,
    Latency,
    Drops,
    Medians,
}

/// Size of the plot of `runs`: the panels stacked under one title.
pub fn size(runs: &[Run]) -> (u32, u32) {
    (WIDTH, TITLE + PANEL * panels(runs).len() as u32)
}

/// Draws `runs` into `out` (PNG or SVG by its extension).
pub fn plot(runs: &[Run], out: &Path) -> Result<(), String> {
    register_font()?;
    let size = size(runs);
    let err = |e: String| format!("{}: {e}", out.display());
    match out.extension().and_then(|e| e.to_str()) {
        Some("png") => {
            let root = BitMapBackend::new(out, size).into_drawing_area();
            draw(&root, runs).map_err(err)?;
            root.present().map_err(|e| err(e.to_string()))
        }
        Some("svg") => {
            let root = SVGBackend::new(out, size).into_drawing_area();
            draw(&root, runs).map_err(err)?;
            root.present().map_err(|e| err(e.to_string()))
        }
        _ => Err(format!(
            "{}: the output must end in .png or .svg",
            out.display()
        )),
    }
}

/// A value axis: linear, or log10 where the values span more than a decade (the
/// values are drawn as their logarithm and the labels say the value).
#[derive(Clone, Copy)]
enum Scale {
    Linear,
    Log,
}

impl Scale {
    /// The scale for positive values `v`.
    fn fitting(v: impl Iterator<Item = f64>) -> Self {
        let (lo, hi) = v
            .filter(|x| *x > 0.0)
            .fold((f64::MAX, 0.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
        if hi > 0.0 && hi / lo > 10.0 {
            Scale::Log
        } else {
            Scale::Linear
        }
    }

    fn map(self, v: f64) -> f64 {
        match self {
            Scale::Linear => v,
            Scale::Log => v.max(1e-9).log10(),
        }
    }

    /// The drawn range for values up to `hi` (from `lo` on a log axis).
    fn range(self, lo: f64, hi: f64) -> std::ops::Range<f64> {
        match self {
            Scale::Linear => 0.0..hi.max(1e-3) * 1.15,
            Scale::Log => lo.max(1e-9).log10().floor()..hi.max(1e-9).log10().ceil() + 0.05,
        }
    }

    fn label(self, drawn: f64, unit: fn(f64) -> String) -> String {
        match self {
            Scale::Linear => unit(drawn),
            // Labels on whole decades only: 10, 100, 1000, not 31.6.
            Scale::Log if (drawn - drawn.round()).abs() < 1e-6 => unit(10f64.powf(drawn.round())),
            Scale::Log => String::new(),
        }
    }
}

/// A panel's chart area and its legend column beside it.
fn split_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
    area.split_horizontally(WIDTH - LEGEND)
}

/// The legend beside the data: a line of each entry's colour and its label.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(String, RGBAColor)],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    for (i, (label, color)) in entries.iter().enumerate() {
        let y = 60 + 24 * i as i32;
        area.draw(&PathElement::new(
            vec![(8, y), (36, y)],
            color.stroke_width(3),
        ))
        .map_err(e)?;
        area.draw(&Text::new(
            label.clone(),
            (44, y - 8),
            ("sans-serif", 16).into_font(),
        ))
        .map_err(e)?;
    }
    Ok(())
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, runs: &[Run]) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let names: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
    let title = format!("dataplane bench results: {}", names.join(", "));
    let root = root.titled(&title, ("sans-serif", 26)).map_err(e)?;
    let by_payload = distinct_payloads(runs);
    let labels: Vec<String> = runs.iter().map(|r| legend(r, by_payload)).collect();
    let colors: Vec<RGBAColor> = (0..runs.len())
        .map(|i| Palette99::pick(i).to_rgba())
        .collect();
    let entries: Vec<(String, RGBAColor)> =
        labels.iter().cloned().zip(colors.iter().copied()).collect();
    let list = panels(runs);
    let areas = root.split_evenly((list.len(), 1));
    for (panel, area) in list.into_iter().zip(&areas) {
        let (chart, side) = split_panel(area);
        match panel {
            Panel::Rate => {
                draw_rate(&chart, runs, &colors)?;
                draw_legend(&side, &entries)?;
            }
            Panel::Latency => {
                draw_latency(&chart, runs, &colors)?;
                draw_legend(&side, &entries)?;
            }
            Panel::Drops => {
                draw_drops(&chart, runs, &labels)?;
            }
            Panel::Medians => {
                let (gb, mp) = (Palette99::pick(0).to_rgba(), Palette99::pick(1).to_rgba());
                draw_medians(&chart, runs, &labels, (gb, mp))?;
                draw_legend(
                    &side,
                    &[("Gb/s (left)".into(), gb), ("Mpps (right)".into(), mp)],
                )?;
            }
        }
    }
    Ok(())
}

/// A panel's chart: its title above, the same margins and label areas as every panel.
fn panel<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &str,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(area);
    b.caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(70);
    b
}

/// The label at `x` of an axis of categories (whole numbers indexing `names`): the name
/// there, nothing between them.
fn category<S: AsRef<str>>(x: f64, names: &[S]) -> String {
    let i = x.round();
    if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len() {
        names[i as usize].as_ref().to_owned()
    } else {
        String::new()
    }
}

fn number(v: f64) -> String {
    if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

fn micros(ns: f64) -> String {
    number(ns / 1e3)
}

/// How fast: RX Gb/s over time, one line per run.
fn draw_rate<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    runs: &[Run],
    colors: &[RGBAColor],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let all = || runs.iter().flat_map(|r| r.points.iter());
    let t_max = all().map(|p| p.0).fold(1.0, f64::max);
    let scale = Scale::fitting(all().map(|p| p.1));
    let lo = all()
        .map(|p| p.1)
        .filter(|g| *g > 0.0)
        .fold(f64::MAX, f64::min);
    let hi = all().map(|p| p.1).fold(0.0, f64::max);
    let mut chart = panel(area, "RX throughput over time")
        .build_cartesian_2d(0.0..t_max * 1.02, scale.range(lo, hi))
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("RX Gb/s")
        .y_label_formatter(&|v| scale.label(*v, number))
        .draw()
        .map_err(e)?;
    for (r, color) in runs.iter().zip(colors) {
        chart
            .draw_series(LineSeries::new(
                r.points.iter().map(|p| (p.0, scale.map(p.1))),
                color.stroke_width(2),
            ))
            .map_err(e)?;
    }
    Ok(())
}

/// How long: each run's latency percentiles, on a log axis in microseconds.
fn draw_latency<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    runs: &[Run],
    colors: &[RGBAColor],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    const NAMES: [&str; 5] = ["min", "p50", "p99", "p99.9", "max"];
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let values = || runs.iter().filter_map(|r| r.latency).flatten();
    let scale = Scale::fitting(values());
    let lo = values().filter(|v| *v > 0.0).fold(f64::MAX, f64::min);
    let hi = values().fold(0.0, f64::max);
    let mut chart = panel(area, "One-way latency (percentiles)")
        .build_cartesian_2d(-0.3..4.3, scale.range(lo, hi))
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_labels(5)
        .x_label_formatter(&|x: &f64| category(*x, &NAMES))
        .y_desc("microseconds")
        .y_label_formatter(&|v| scale.label(*v, micros))
        .draw()
        .map_err(e)?;
    for (r, color) in runs.iter().zip(colors) {
        let Some(l) = r.latency else { continue };
        let points = l.iter().enumerate().map(|(i, v)| (i as f64, scale.map(*v)));
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(e)?;
        chart
            .draw_series(points.map(|p| Circle::new(p, 4, color.filled())))
            .map_err(e)?;
    }
    Ok(())
}

/// What was lost: drops by cause, one bar per run and cause that dropped anything.
fn draw_drops<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    runs: &[Run],
    labels: &[String],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let bars: Vec<(String, u64)> = runs
        .iter()
        .zip(labels)
        .flat_map(|(r, label)| {
            r.drops
                .iter()
                .map(move |(cause, n)| (format!("{label}: {cause}"), *n))
        })
        .collect();
    if bars.is_empty() {
        area.titled("Drops by cause", ("sans-serif", 22))
            .map_err(e)?
            .draw(&Text::new(
                "no drops in any run",
                (40, 60),
                ("sans-serif", 20).into_font(),
            ))
            .map_err(e)?;
        return Ok(());
    }
    let scale = Scale::fitting(bars.iter().map(|b| b.1 as f64));
    let hi = bars.iter().map(|b| b.1 as f64).fold(0.0, f64::max);
    let n = bars.len();
    let names: Vec<&str> = bars.iter().map(|b| b.0.as_str()).collect();
    let mut chart = panel(area, "Drops by cause")
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), scale.range(1.0, hi))
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| category(*x, &names))
        .y_desc("packets dropped")
        .y_label_formatter(&|v| scale.label(*v, number))
        .draw()
        .map_err(e)?;
    let base = scale.range(1.0, hi).start;
    let red = RED.mix(0.7);
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            let x = i as f64;
            Rectangle::new(
                [(x - 0.3, base), (x + 0.3, scale.map(b.1 as f64))],
                red.filled(),
            )
        }))
        .map_err(e)?;
    Ok(())
}

/// How the runs compare: median Gb/s (left axis) and Mpps (right axis) per run.
fn draw_medians<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    runs: &[Run],
    labels: &[String],
    (gb, mp): (RGBAColor, RGBAColor),
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let medians: Vec<(f64, f64)> = runs.iter().map(Run::medians).collect();
    let n = runs.len();
    let gbps_max = medians.iter().map(|m| m.0).fold(1e-3, f64::max) * 1.15;
    let mpps_max = medians.iter().map(|m| m.1).fold(1e-3, f64::max) * 1.15;
    let mut cmp = panel(area, "Median per run")
        .right_y_label_area_size(60)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..gbps_max)
        .map_err(e)?
        .set_secondary_coord(-0.5..(n as f64 - 0.5), 0.0..mpps_max);
    cmp.configure_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| category(*x, labels))
        .y_desc("RX Gb/s")
        .draw()
        .map_err(e)?;
    cmp.configure_secondary_axes()
        .y_desc("RX Mpps")
        .draw()
        .map_err(e)?;
    let gbps = || medians.iter().enumerate().map(|(i, m)| (i as f64, m.0));
    let mpps = || medians.iter().enumerate().map(|(i, m)| (i as f64, m.1));
    cmp.draw_series(LineSeries::new(gbps(), gb.stroke_width(2)))
        .map_err(e)?;
    cmp.draw_series(gbps().map(|p| Circle::new(p, 5, gb.filled())))
        .map_err(e)?;
    cmp.draw_secondary_series(LineSeries::new(mpps(), mp.stroke_width(2)))
        .map_err(e)?;
    cmp.draw_secondary_series(mpps().map(|p| Circle::new(p, 5, mp.filled())))
        .map_err(e)?;
    Ok(())
}

/// True when every run has a payload size and they all differ (a payload sweep).
fn distinct_payloads(runs: &[Run]) -> bool {
    let mut p: Vec<u64> = runs.iter().filter_map(|r| r.payload).collect();
    let n = p.len();
    p.sort_unstable();
    p.dedup();
    n == runs.len() && p.len() == n && n > 1
}

fn legend(r: &Run, by_payload: bool) -> String {
    match (by_payload, r.payload) {
        (true, Some(p)) => format!("{p} B"),
        _ => r.label.clone(),
    }
}
