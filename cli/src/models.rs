//! Commands on models: `models` lists them; `model show`, `put`, `declare`, `pin`, `unpin`,
//! `rm` and `export` see to one. A model is a root object and the objects it lists, kept
//! and evicted whole; while one of its objects is not stored, its root reads as absent.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use objstash::{Key, Model, Stash};
use serde::Serialize;

use crate::fetch::{keys_arg, write_object};
use crate::output::{Failure, Out};
use crate::parse_key;

/// What `model` does.
#[derive(Subcommand, Debug)]
pub enum ModelAction {
    /// Show the model of ROOT; exit 1 unless it is complete (its root then reads).
    Show {
        /// The root's key.
        root: String,
    },
    /// Save a model from files: its root and the objects it lists. The root's key is
    /// printed once the model is committed.
    Put {
        /// The root object's file.
        root: PathBuf,
        /// The files of the objects it lists.
        members: Vec<PathBuf>,
        /// A name of your own for the model (listed with it).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Replace a model of the same root that lists other objects or has another name
        /// (without it, such a put is refused and changes nothing).
        #[arg(long)]
        replace: bool,
    },
    /// Declare the object ROOT a model of MEMBERS (keys; `-` alone reads them from stdin):
    /// from then on the root reads as absent while any of them is not stored. Exit 1 if
    /// the model is not complete.
    Declare {
        /// The root's key (the object need not be stored yet).
        root: String,
        /// The members' keys; `-` alone reads them from stdin.
        members: Vec<String>,
        /// A name of your own for the model.
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
    },
    /// Pin the model of ROOT: never evicted; exit 1 if there is none.
    Pin { root: String },
    /// Unpin the model of ROOT (a use now); exit 1 if there is none.
    Unpin { root: String },
    /// Remove the model of ROOT: its root and every object no other model lists (pinned
    /// objects stay); exit 1 if there is none.
    Rm { root: String },
    /// Write every object of the complete model of ROOT to DIR/<first two hex
    /// digits>/<other 62>, read in the order the file holds them; exit 1 if ROOT is no
    /// complete model.
    Export { root: String, dir: PathBuf },
}

impl ModelAction {
    /// The keys given as arguments, checked before a stash is opened.
    pub fn keys(&self) -> Vec<&String> {
        match self {
            ModelAction::Show { root }
            | ModelAction::Pin { root }
            | ModelAction::Unpin { root }
            | ModelAction::Rm { root }
            | ModelAction::Export { root, .. } => vec![root],
            ModelAction::Declare { root, members, .. } => {
                let members = if members == &["-"] { &[][..] } else { &members[..] };
                std::iter::once(root).chain(members).collect()
            }
            ModelAction::Put { .. } => Vec::new(),
        }
    }
}

/// A model in `--json` output.
#[derive(Serialize)]
struct ModelJson {
    root: String,
    name: Option<String>,
    objects: u64,
    missing: u64,
    complete: bool,
    stored_bytes: u64,
    last_use_unix_ms: Option<u128>,
    pinned: bool,
}

impl From<&Model> for ModelJson {
    fn from(m: &Model) -> Self {
        ModelJson {
            root: m.root.to_string(),
            name: m.name.as_ref().map(|n| String::from_utf8_lossy(n).into_owned()),
            objects: m.objects,
            missing: m.missing,
            complete: m.complete(),
            stored_bytes: m.stored_bytes,
            last_use_unix_ms: m
                .last_use
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_millis()),
            pinned: m.pinned,
        }
    }
}

/// `models`: every model, least recently used first, one per line.
pub fn list(stash: &Stash, out: &mut Out) -> Result<ExitCode, Failure> {
    for model in stash.models()? {
        if out.json {
            out.json(&ModelJson::from(&model))?;
        } else {
            out.line(&model.to_string())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(stash: &Stash, action: &ModelAction, out: &mut Out) -> Result<ExitCode, Failure> {
    match action {
        ModelAction::Show { root } => {
            let root = parse_key(root)?;
            match stash.model(&root)? {
                Some(model) => show(&model, out),
                None => none(&root, out),
            }
        }
        ModelAction::Put { root, members, name, replace } => {
            put(stash, root, members, name, *replace, out)
        }
        ModelAction::Declare { root, members, name } => {
            let root = parse_key(root)?;
            let members = keys_arg(members)?;
            let model = match name {
                Some(name) => stash.declare_named_model(name, &root, &members)?,
                None => stash.declare_model(&root, &members)?,
            };
            stash.flush()?;
            show(&model, out)
        }
        ModelAction::Pin { root } | ModelAction::Unpin { root } => {
            let key = parse_key(root)?;
            let pin = matches!(action, ModelAction::Pin { .. });
            let found = if pin { stash.pin_model(&key)? } else { stash.unpin_model(&key)? };
            done(found, &key, if pin { "pinned" } else { "unpinned" }, out)
        }
        ModelAction::Rm { root } => {
            let key = parse_key(root)?;
            let found = stash.remove_model(&key)?;
            done(found, &key, "removed", out)
        }
        ModelAction::Export { root, dir } => export(stash, &parse_key(root)?, dir, out),
    }
}

/// One model: exit 0 when complete.
fn show(model: &Model, out: &mut Out) -> Result<ExitCode, Failure> {
    if out.json {
        out.json(&ModelJson::from(model))?;
    } else {
        out.line(&model.to_string())?;
    }
    Ok(if model.complete() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn none(root: &Key, out: &mut Out) -> Result<ExitCode, Failure> {
    if out.json {
        out.json(&serde_json::Value::Null)?;
    } else {
        out.warn(&format!("no model of {root} in the stash"));
    }
    Ok(ExitCode::from(1))
}

fn done(found: bool, root: &Key, what: &str, out: &mut Out) -> Result<ExitCode, Failure> {
    if !found {
        return none(root, out);
    }
    if out.json {
        #[derive(Serialize)]
        struct Done<'a> {
            root: String,
            done: &'a str,
        }
        out.json(&Done { root: root.to_string(), done: what })?;
    } else {
        out.say(&format!("model {root} {what}"));
    }
    Ok(ExitCode::SUCCESS)
}

fn read(path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure::io(format!("reading {}", path.display()), e))
}

/// `model put`: the members, then the root, in one assembly; the root's key once the
/// model is committed. A file that cannot be read stores nothing of the model.
fn put(
    stash: &Stash,
    root: &Path,
    members: &[PathBuf],
    name: &Option<String>,
    replace: bool,
    out: &mut Out,
) -> Result<ExitCode, Failure> {
    let root_bytes = read(root)?;
    let member_bytes = members.iter().map(|p| read(p)).collect::<Result<Vec<_>, _>>()?;
    let root_key = Key::of(&root_bytes);
    let listed: HashSet<Key> =
        member_bytes.iter().map(|m| Key::of(m)).filter(|k| *k != root_key).collect();
    let replaced = stash.model(&root_key)?.filter(|old| {
        old.objects != listed.len() as u64 + 1
            || old.name.as_deref() != name.as_deref().map(str::as_bytes)
    });
    if let Some(old) = &replaced {
        let (was, now) = (
            format!("a model of {}{}", count(old.objects), named(old.name.as_deref())),
            format!(
                "one of {}{}",
                count(listed.len() as u64 + 1),
                named(name.as_deref().map(str::as_bytes))
            ),
        );
        if !replace {
            out.warn(&format!(
                "{root_key} is {was}; this put would make it {now}: nothing was changed. Pass \
                 --replace to replace it, or `objstash model rm {root_key}` first"
            ));
            return Ok(ExitCode::from(1));
        }
        out.say(&format!("replaced: {root_key} was {was}, and is now {now}"));
    }
    let assembly = stash.assemble()?;
    let keys = assembly.save_all(&member_bytes)?;
    let root_key = assembly.save(&root_bytes)?;
    let model = match name {
        Some(name) => assembly.finish_named(name, &root_key, &keys)?,
        None => assembly.finish(&root_key, &keys)?,
    };
    stash.flush()?;
    if out.json {
        out.json(&ModelJson::from(&model))?;
    } else {
        out.line(&root_key.to_string())?;
        out.say(&model.to_string());
    }
    Ok(ExitCode::SUCCESS)
}

/// `1 object`, `41 objects`.
fn count(objects: u64) -> String {
    if objects == 1 { "1 object".to_string() } else { format!("{objects} objects") }
}

/// `, named "NAME"`, or `, unnamed`.
fn named(name: Option<&[u8]>) -> String {
    match name {
        Some(name) => format!(", named \"{}\"", String::from_utf8_lossy(name)),
        None => ", unnamed".to_string(),
    }
}

/// `model export`: the model's objects, in storage order.
fn export(stash: &Stash, root: &Key, dir: &Path, out: &mut Out) -> Result<ExitCode, Failure> {
    let Some(objects) = stash.read_model(root)? else {
        out.warn(&format!("no complete model of {root} in the stash"));
        return Ok(ExitCode::from(1));
    };
    let mut made = std::collections::HashSet::new();
    for (key, bytes) in &objects {
        write_object(dir, key, bytes, &mut made)?;
    }
    if out.json {
        #[derive(Serialize)]
        struct Export {
            root: String,
            exported: usize,
        }
        out.json(&Export { root: root.to_string(), exported: objects.len() })?;
    } else {
        out.say(&format!("exported the {} objects of {root} to {}", objects.len(), dir.display()));
    }
    Ok(ExitCode::SUCCESS)
}
