//! Deterministic generator of Speckle-style CAD/BIM objects serialized as JSON.
//!
//! Object `i` of seed `s` is a pure function of `(s, i)`, so a caller can generate any
//! slice of a large model in parallel and get the same bytes on every run and machine.
//! The mix (lines, polylines, meshes and built elements that reference other objects by
//! id) and the shape of each object follow Speckle's serialization: full-precision floats,
//! property and layer names that repeat across objects, 32-hex ids that never repeat.
//! Objects are 300 to 3,000 bytes long.

#![forbid(unsafe_code)]

use std::fmt::Write as _;

/// Smallest object the generator produces, in bytes.
pub const MIN_SIZE: usize = 300;
/// Largest object the generator produces, in bytes.
pub const MAX_SIZE: usize = 3_000;

const LAYERS: &[&str] = &[
    "A-WALL", "A-DOOR", "A-GLAZ", "A-FLOR", "A-ROOF", "S-BEAM", "S-COLS", "S-SLAB", "M-DUCT",
    "P-PIPE", "E-LITE", "A-FURN",
];
const UNITS: &[&str] = &["mm", "mm", "mm", "m"];
const MATERIALS: &[&str] = &["Concrete", "Steel S355", "Timber C24", "Brick", "Glass"];
const FAMILIES: &[&str] = &["Basic Wall", "W-Wide Flange", "Concrete-Rectangular-Column"];

/// A SplitMix64 stream: tiny, fast and good enough for synthetic data.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, index: u64, stream: u64) -> Self {
        let mut rng =
            Rng(seed ^ index.wrapping_mul(0xA24B_AED4_963E_E407) ^ stream.rotate_left(32));
        rng.next();
        rng
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn coord(&mut self) -> f64 {
        (self.unit() - 0.5) * 20_000.0
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// The 32-hex Speckle id of object `index` of model `seed`.
///
/// Ids of distinct indexes differ (they are 128 bits of a bijective mix of the index).
pub fn id(seed: u64, index: u64) -> String {
    let mut a = Rng::new(seed, index, 1);
    let hi = a.next() ^ index.rotate_left(17);
    let lo = index ^ seed.rotate_left(29) ^ (hi & 0xFFFF_0000_0000_0000);
    format!("{hi:016x}{lo:016x}")
}

/// Object `index` of model `seed`, as JSON bytes between [`MIN_SIZE`] and [`MAX_SIZE`].
pub fn object(seed: u64, index: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed, index, 2);
    let mut out = String::with_capacity(1024);
    match rng.below(100) {
        0..=34 => line(&mut out, &mut rng, seed, index),
        35..=54 => polyline(&mut out, &mut rng, seed, index),
        55..=69 => mesh(&mut out, &mut rng, seed, index),
        _ => element(&mut out, &mut rng, seed, index),
    }
    debug_assert!(
        (MIN_SIZE..=MAX_SIZE).contains(&out.len()),
        "object {index} is {} bytes",
        out.len()
    );
    out.into_bytes()
}

/// `count` consecutive objects starting at `start`.
pub fn objects(seed: u64, start: u64, count: usize) -> Vec<Vec<u8>> {
    (start..start + count as u64).map(|i| object(seed, i)).collect()
}

fn point(out: &mut String, rng: &mut Rng, units: &str, id: &str) {
    let (x, y, z) = (rng.coord(), rng.coord(), (rng.below(4) as f64) * 1_000.0);
    write!(
        out,
        r#"{{"speckle_type":"Objects.Geometry.Point","x":{x:?},"y":{y:?},"z":{z:?},"units":"{units}","id":"{id}"}}"#
    )
    .expect("writing to a String cannot fail");
}

fn line_body(out: &mut String, rng: &mut Rng, seed: u64, index: u64, units: &str) {
    out.push_str(r#""start":"#);
    point(out, rng, units, &id(seed ^ 0x5A5A, index));
    out.push_str(r#","end":"#);
    point(out, rng, units, &id(seed ^ 0xA5A5, index));
    let length = rng.unit() * 12_000.0;
    write!(
        out,
        r#","domain":{{"speckle_type":"Objects.Primitive.Interval","start":0.0,"end":1.0}},"length":{length:?}"#
    )
    .expect("writing to a String cannot fail");
}

fn header(out: &mut String, rng: &mut Rng, seed: u64, index: u64, kind: &str) -> &'static str {
    let units = rng.pick(UNITS);
    write!(
        out,
        r#"{{"id":"{}","speckle_type":"{kind}","applicationId":null,"units":"{units}","#,
        id(seed, index)
    )
    .expect("writing to a String cannot fail");
    units
}

fn footer(out: &mut String, rng: &mut Rng, children: usize) {
    let layer = rng.pick(LAYERS);
    let element = 100_000 + rng.below(900_000);
    write!(out, r#","layer":"{layer}","elementId":"{element}","totalChildrenCount":{children}}}"#)
        .expect("writing to a String cannot fail");
}

fn floats(out: &mut String, rng: &mut Rng, count: usize) {
    out.push('[');
    for i in 0..count {
        if i > 0 {
            out.push(',');
        }
        write!(out, "{:?}", rng.coord()).expect("writing to a String cannot fail");
    }
    out.push(']');
}

fn line(out: &mut String, rng: &mut Rng, seed: u64, index: u64) {
    let units = header(out, rng, seed, index, "Objects.Geometry.Line");
    line_body(out, rng, seed, index, units);
    footer(out, rng, 0);
}

fn polyline(out: &mut String, rng: &mut Rng, seed: u64, index: u64) {
    header(out, rng, seed, index, "Objects.Geometry.Polyline");
    let points = 3 + rng.below(38) as usize;
    write!(out, r#""closed":{},"value":"#, rng.below(2) == 0).expect("String write");
    floats(out, rng, points * 3);
    out.push_str(
        r#","domain":{"speckle_type":"Objects.Primitive.Interval","start":0.0,"end":1.0}"#,
    );
    footer(out, rng, 0);
}

fn mesh(out: &mut String, rng: &mut Rng, seed: u64, index: u64) {
    header(out, rng, seed, index, "Objects.Geometry.Mesh");
    let vertices = 4 + rng.below(28) as usize;
    out.push_str(r#""vertices":"#);
    floats(out, rng, vertices * 3);
    out.push_str(r#","faces":["#);
    let faces = vertices.saturating_sub(2).min(24);
    for f in 0..faces {
        if f > 0 {
            out.push(',');
        }
        let a = rng.below(vertices as u64);
        let b = rng.below(vertices as u64);
        let c = rng.below(vertices as u64);
        write!(out, "3,{a},{b},{c}").expect("writing to a String cannot fail");
    }
    write!(
        out,
        r#"],"colors":[],"textureCoordinates":[],"renderMaterial":{{"speckle_type":"Objects.Other.RenderMaterial","name":"{}","opacity":1.0,"diffuse":-7829368}}"#,
        rng.pick(MATERIALS)
    )
    .expect("writing to a String cannot fail");
    footer(out, rng, 0);
}

fn element(out: &mut String, rng: &mut Rng, seed: u64, index: u64) {
    let kind = match rng.below(3) {
        0 => "Objects.BuiltElements.Wall",
        1 => "Objects.BuiltElements.Beam",
        _ => "Objects.BuiltElements.Column",
    };
    let units = header(out, rng, seed, index, kind);
    write!(
        out,
        r#""family":"{}","type":"{}","height":{:?},"baseOffset":0.0,"topOffset":0.0,"flipped":false,"baseLine":{{"speckle_type":"Objects.Geometry.Line","units":"{units}","#,
        rng.pick(FAMILIES),
        rng.pick(MATERIALS),
        2_400.0 + rng.unit() * 3_000.0
    )
    .expect("writing to a String cannot fail");
    line_body(out, rng, seed, index, units);
    out.push_str(r#"},"parameters":{"#);
    let params = 2 + rng.below(8);
    for p in 0..params {
        if p > 0 {
            out.push(',');
        }
        write!(
            out,
            r#""P{p}":{{"speckle_type":"Objects.BuiltElements.Revit.Parameter","name":"Param {p}","value":{:?},"units":"{units}","isReadOnly":false}}"#,
            rng.unit() * 100.0
        )
        .expect("writing to a String cannot fail");
    }
    out.push_str(r#"},"elements":["#);
    let children = rng.below(6) as usize;
    for c in 0..children {
        if c > 0 {
            out.push(',');
        }
        let child = index.saturating_sub(1 + c as u64 * 7);
        write!(out, r#"{{"referencedId":"{}","speckle_type":"reference"}}"#, id(seed, child))
            .expect("writing to a String cannot fail");
    }
    out.push(']');
    footer(out, rng, children);
}

/// `len` deterministic pseudo-random bytes of `seed` (xorshift): incompressible, so that
/// stored sizes are what they look like.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn deterministic_and_sized() {
        let mut total = 0;
        for i in 0..5_000 {
            let a = object(7, i);
            assert_eq!(a, object(7, i));
            assert!((MIN_SIZE..=MAX_SIZE).contains(&a.len()), "object {i}: {} bytes", a.len());
            assert!(a.starts_with(b"{\"id\":\"") && a.ends_with(b"}"));
            total += a.len();
        }
        let mean = total / 5_000;
        assert!((500..1_500).contains(&mean), "mean size {mean}");
        assert_ne!(object(7, 1), object(8, 1));
    }

    #[test]
    fn ids_do_not_repeat() {
        let ids: HashSet<String> = (0..200_000).map(|i| id(3, i)).collect();
        assert_eq!(ids.len(), 200_000);
        assert!(ids.iter().all(|s| s.len() == 32));
    }
}
