//! A model read as a stream (`Stash::model_reader`): the objects `read_model` returns, in
//! the same order, a chunk at a time, from one snapshot: another handle that removes the
//! model once the stream began takes nothing from it.

use crate::common::{TestResult, objects};
use objstash::{Key, Stash, Values};

#[test]
fn a_model_streams_whole_in_storage_order_while_another_handle_removes_it() -> TestResult {
    for values in [Values::InRows, Values::InFile] {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("stream.db");
        let stash = Stash::builder().values(values).open(&path)?;
        let other = Stash::open(&path)?;
        // More than one chunk of the stream, and a second model whose rows come between.
        let members = objects(95, 9_000);
        let root = b"{\"root\":\"streamed\"}".to_vec();
        let assembly = stash.assemble()?;
        let mut keys = assembly.save_all(&members[..5_000])?;
        stash.save_model(b"{\"root\":\"between\"}", &objects(96, 300))?;
        keys.extend(assembly.save_all(&members[5_000..])?);
        let root_key = assembly.save(&root)?;
        assert!(assembly.finish(&root_key, &keys)?.complete());
        let whole = stash.read_model(&root_key)?.expect("complete");
        let mut stream = stash.model_reader(&root_key)?.expect("complete");
        let first = stream.next().expect("an object")?;
        assert!(other.remove_model(&root_key)?);
        assert_eq!(other.get(&root_key)?, None, "{values}: removed");
        let mut streamed = vec![first];
        for object in stream {
            streamed.push(object?);
        }
        assert_eq!(streamed, whole, "{values}: the objects read_model returned, in its order");
        assert_eq!(streamed.len(), 9_001);
        assert!(stash.model_reader(&root_key)?.is_none(), "{values}: no model now");
        assert!(stash.model_reader(&Key::of(b"no model"))?.is_none());
        stash.close()?;
        other.close()?;
    }
    Ok(())
}
