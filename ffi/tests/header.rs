//! The committed header, include/objstash.h, is what cbindgen makes of the crate now:
//! CI fails when a change to the ABI leaves it stale. `OBJSTASH_BLESS=1 cargo test -p
//! objstash-ffi --test header` writes it.

#[test]
fn the_committed_header_is_current() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config =
        cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen reads the crate");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let path = format!("{dir}/include/objstash.h");
    if std::env::var_os("OBJSTASH_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("writing the header");
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "{path} is stale: regenerate it with OBJSTASH_BLESS=1 cargo test -p objstash-ffi --test header"
    );
}
