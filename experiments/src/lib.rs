//! What the experiments share: the rows they write.

use flate2::Compression;
use flate2::write::GzEncoder;
use rayon::prelude::*;

/// `count` generated objects gzipped at level 1 (as a writer would store them), each with
/// its raw length: rows already compressed, reused under many keys.
pub fn gzipped_pool(count: u64) -> Vec<(i64, Vec<u8>)> {
    (0..count)
        .into_par_iter()
        .map(|i| {
            let raw = speckle_gen::object(1, i);
            let mut gz = GzEncoder::new(Vec::new(), Compression::new(1));
            std::io::Write::write_all(&mut gz, &raw).expect("in memory");
            (raw.len() as i64, gz.finish().expect("in memory"))
        })
        .collect()
}
