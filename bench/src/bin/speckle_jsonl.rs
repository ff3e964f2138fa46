//! Writes generated Speckle objects (`gen/`) as lines of `id<TAB>json`, for benchmarks in
//! other languages (the .NET side-by-side, `dotnet/bench/run.sh`).
//!
//! `cargo run --release -p objstash-bench --bin speckle_jsonl -- --count 100000 > objects.tsv`

use std::io::{BufWriter, Write};

use anyhow::Result;
use clap::Parser;

#[derive(Parser, Debug)]
struct Args {
    /// Objects to write.
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// Seed of the generated model.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut out = BufWriter::new(std::io::stdout().lock());
    for i in 0..args.count {
        out.write_all(speckle_gen::id(args.seed, i).as_bytes())?;
        out.write_all(b"\t")?;
        out.write_all(&speckle_gen::object(args.seed, i))?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}
