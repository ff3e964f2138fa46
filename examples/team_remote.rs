//! A team cache: every machine points its stash at one S3-compatible bucket; `push` shares
//! what it saved, and a read of an object the stash lacks reads it through from the
//! bucket (checked, then kept). Needs the `remote` feature and a bucket:
//!
//! ```sh
//! OBJSTASH_REMOTE=s3://team-cache/objects AWS_ENDPOINT_URL=http://127.0.0.1:8333 AWS_ALLOW_HTTP=true \
//!   AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... \
//!   cargo run --features remote --example team_remote
//! ```

use anyhow::Result;
use objstash::{RemoteConfig, Stash};

fn main() -> Result<()> {
    let Some(remote) = RemoteConfig::from_env()? else {
        println!("set OBJSTASH_REMOTE=s3://bucket/prefix (and the AWS variables) to run this");
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    // Machine A saves a model and shares it.
    let a = Stash::builder().remote(remote.clone()).open(dir.path().join("a.db"))?;
    let objects: Vec<Vec<u8>> =
        (0..1_000).map(|i| format!(r#"{{"element":{i}}}"#).into_bytes()).collect();
    let keys = a.save_all(&objects)?;
    let tier = a.remote().expect("opened with a remote");
    println!("pushed: {}", tier.push()?);

    // Machine B has none of it: its reads go through to the bucket, once.
    let b = Stash::builder().remote(remote).open(dir.path().join("b.db"))?;
    let read = b.get_many(&keys)?;
    assert!(read.iter().zip(&objects).all(|(r, o)| r.as_deref() == Some(&o[..])));
    println!("machine B read {} objects through; it now holds {}", read.len(), b.len()?);
    Ok(())
}
