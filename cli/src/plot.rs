//! `dataplane plot RESULT.json... -o FILE.png|svg`: throughput over time of each run (RX
//! Gb/s from the per-second series) and, for several runs, a comparison of their medians
//! (Gb/s and Mpps, one point per run, labelled by payload size when the runs differ in it,
//! else by file name), so a sweep can be looked at.

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
        Ok(Self {
            label: stem,
            payload: v["setup"]["payload_bytes"].as_u64(),
            points,
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

/// Draws `runs` into `out` (PNG or SVG by its extension).
pub fn plot(runs: &[Run], out: &Path) -> Result<(), String> {
    register_font()?;
    let size = if runs.len() > 1 {
        (1200, 900)
    } else {
        (1200, 500)
    };
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

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, runs: &[Run]) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let (top, bottom) = if runs.len() > 1 {
        let (t, b) = root.split_vertically(450);
        (t, Some(b))
    } else {
        (root.clone(), None)
    };
    let t_max = runs
        .iter()
        .flat_map(|r| r.points.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let g_max = runs
        .iter()
        .flat_map(|r| r.points.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1e-3)
        * 1.15;
    let mut chart = ChartBuilder::on(&top)
        .caption("RX throughput over time", ("sans-serif", 24))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..t_max * 1.02, 0.0..g_max)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("RX Gb/s")
        .draw()
        .map_err(e)?;
    let by_payload = distinct_payloads(runs);
    for (i, r) in runs.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let label = legend(r, by_payload);
        chart
            .draw_series(LineSeries::new(
                r.points.iter().map(|p| (p.0, p.1)),
                color.stroke_width(2),
            ))
            .map_err(e)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(e)?;

    let Some(bottom) = bottom else {
        return Ok(());
    };
    let medians: Vec<(f64, f64)> = runs.iter().map(Run::medians).collect();
    let n = runs.len();
    let gbps_max = medians.iter().map(|m| m.0).fold(1e-3, f64::max) * 1.15;
    let mpps_max = medians.iter().map(|m| m.1).fold(1e-3, f64::max) * 1.15;
    let labels: Vec<String> = runs.iter().map(|r| legend(r, by_payload)).collect();
    let mut cmp = ChartBuilder::on(&bottom)
        .caption("Median per run", ("sans-serif", 24))
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(60)
        .right_y_label_area_size(60)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..gbps_max)
        .map_err(e)?
        .set_secondary_coord(-0.5..(n as f64 - 0.5), 0.0..mpps_max);
    cmp.configure_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_desc("RX Gb/s")
        .draw()
        .map_err(e)?;
    cmp.configure_secondary_axes()
        .y_desc("RX Mpps")
        .draw()
        .map_err(e)?;
    let gb = Palette99::pick(0).to_rgba();
    let mp = Palette99::pick(1).to_rgba();
    cmp.draw_series(LineSeries::new(
        medians.iter().enumerate().map(|(i, m)| (i as f64, m.0)),
        gb.stroke_width(2),
    ))
    .map_err(e)?
    .label("Gb/s (left)")
    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], gb));
    cmp.draw_series(
        medians
            .iter()
            .enumerate()
            .map(|(i, m)| Circle::new((i as f64, m.0), 5, gb.filled())),
    )
    .map_err(e)?;
    cmp.draw_secondary_series(LineSeries::new(
        medians.iter().enumerate().map(|(i, m)| (i as f64, m.1)),
        mp.stroke_width(2),
    ))
    .map_err(e)?
    .label("Mpps (right)")
    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], mp));
    cmp.draw_secondary_series(
        medians
            .iter()
            .enumerate()
            .map(|(i, m)| Circle::new((i as f64, m.1), 5, mp.filled())),
    )
    .map_err(e)?;
    cmp.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
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
