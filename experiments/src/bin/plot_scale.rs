//! Draws the scale curve of `examples/scale.rs` beside the Speckle team's reported figures.
//!
//! `cargo run --release -p objstash-experiments --bin plot_scale -- [CSV] [PNG]`
//! (defaults: notes/scale.csv, notes/scale.png). Needs the DejaVu Sans font
//! (`/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf`, Debian package fonts-dejavu-core).

use anyhow::{Context, Result};
use plotters::prelude::*;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let csv = args.next().unwrap_or_else(|| "notes/scale.csv".to_string());
    let png = args.next().unwrap_or_else(|| "notes/scale.png".to_string());
    let font = std::fs::read(FONT)
        .with_context(|| format!("reading {FONT} (install fonts-dejavu-core)"))?;
    plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(font.into_boxed_slice()),
    )
    .map_err(|_| anyhow::anyhow!("{FONT} is not a usable font"))?;

    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for line in std::fs::read_to_string(&csv).with_context(|| format!("reading {csv}"))?.lines() {
        let fields: Vec<&str> = line.split(',').collect();
        let [layout, _, objects, rate, ..] = fields[..] else { continue };
        let point = (objects.parse::<f64>()? / 1e6, rate.parse::<f64>()?);
        match series.iter_mut().find(|(name, _)| name == layout) {
            Some((_, points)) => points.push(point),
            None => series.push((layout.to_string(), vec![point])),
        }
    }
    let top = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)).fold(100_000.0f64, f64::max);
    let right = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)).fold(1.0f64, f64::max);

    let root = BitMapBackend::new(&png, (1000, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Save rate per million objects (2-core VM)", ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..right + 0.5, 0f64..top * 1.1)?;
    chart
        .configure_mesh()
        .x_desc("objects stored (millions)")
        .y_desc("objects per second")
        .label_style(("sans-serif", 15))
        .draw()?;
    let colors = [BLUE, RED];
    for ((name, points), color) in series.iter().zip(colors) {
        chart
            .draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(3)))?
            .label(format!("objstash {name} (this machine, gzip + store)"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3)));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    // The Speckle team's notes: single table 100k -> 5k objects/s by one million objects,
    // 256 bucketed tables 14k -> 11k objects/s over the same range.
    for (label, points, color) in [
        ("Speckle notes: single table", [(0.0, 100_000.0), (1.0, 5_000.0)], BLACK),
        ("Speckle notes: 256 buckets", [(0.0, 14_000.0), (1.0, 11_000.0)], GREEN),
    ] {
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()?;
    root.present()?;
    println!("wrote {png}");
    Ok(())
}
