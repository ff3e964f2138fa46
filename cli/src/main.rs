//! `objstash`: the command line over the objstash library.
//!
//! A thin layer: argument parsing, progress and printing; each group of commands has its
//! module. Data goes to stdout, messages and progress to stderr. `--quiet` silences
//! messages and progress, never errors and never news of lost data. Exit codes: 0 success,
//! 1 a key not found, corruption found or an operation failed, 2 a usage error (bad
//! arguments, bad key, no database path, a flag the command does not take).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use objstash::{Codec, Durability, Key, Layout, Stash, Values};

mod bound;
mod check;
mod fetch;
mod help_files;
mod manage;
mod models;
mod output;
mod own_files;
#[cfg(feature = "remote")]
mod remote;
mod store;
mod traces;

use output::{Failure, Out};

const EXAMPLES: &str = "\
Examples:
  objstash --db cache.db put model/*.json      store files, print their keys
  echo hello | objstash --db cache.db put      store stdin
  objstash --db cache.db get <KEY> -o obj.json write an object to a file
  objstash --db cache.db import ./objects      store a whole directory in parallel
  OBJSTASH_DB=cache.db objstash stats --json   the size report and the hit rate as JSON
  OBJSTASH_LOG=objstash=debug objstash --db cache.db import ./objects   print each batch, commit
                                               and checkpoint with its sizes and time (RUST_LOG's syntax)
  objstash --db cache.db --remote s3://team/cache push   upload what the remote lacks";

#[derive(Parser, Debug)]
#[command(name = "objstash", version, about = "A content-addressed object cache in SQLite", after_help = EXAMPLES)]
struct Cli {
    /// The stash file (default: $OBJSTASH_DB).
    #[arg(long, global = true, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Table layout of a new stash (put, import): single or bucketed. An existing stash
    /// keeps its own; naming another is an error.
    #[arg(long, global = true)]
    layout: Option<Layout>,
    /// Where a new stash (put, import) keeps its objects' stored bytes: rows (default) or
    /// file (a file beside the database; faster reads). An existing stash keeps its own.
    #[arg(long, global = true)]
    values: Option<Values>,
    /// Durability of a new stash: fast, safe or owned (one process at a time, no
    /// write-ahead log; see the README). An existing stash keeps the one it
    /// records; naming another is an error (change it with `objstash config`).
    #[arg(long, global = true)]
    durability: Option<Durability>,
    /// Codec of a new stash: gzip (default) or zstd-dict (a dictionary trained on the
    /// stash's first objects; smaller and faster for small objects). Recorded like the
    /// durability.
    #[arg(long, global = true)]
    codec: Option<Codec>,
    /// The largest object put and import store, in bytes (default: no limit); a larger
    /// file is reported and skipped.
    #[arg(long, global = true, value_name = "BYTES")]
    max_object_size: Option<u64>,
    /// Machine-readable output (every command but get).
    #[arg(long, global = true)]
    json: bool,
    /// Print no messages or progress; errors and lost data are still reported.
    #[arg(long, short, global = true)]
    quiet: bool,
    /// A shared remote on an S3-compatible store, s3://bucket/prefix (default:
    /// $OBJSTASH_REMOTE). With one, get of an object the stash lacks reads it from the
    /// remote. Credentials come from the AWS variables (AWS_ACCESS_KEY_ID, ...).
    #[cfg(feature = "remote")]
    #[arg(long, global = true, value_name = "URL")]
    remote: Option<String>,
    /// The remote store's address, e.g. http://127.0.0.1:8333 (default:
    /// $AWS_ENDPOINT_URL, else AWS).
    #[cfg(feature = "remote")]
    #[arg(long, global = true, value_name = "URL")]
    endpoint: Option<String>,
    /// Target size of the packs a push uploads, e.g. 8MiB (the default).
    #[cfg(feature = "remote")]
    #[arg(long, global = true, value_name = "SIZE")]
    pack_size: Option<String>,
    /// How long a request to the remote may take, its retries included (default 30s): a
    /// server that stops answering fails a command after it, with a message.
    #[cfg(feature = "remote")]
    #[arg(long, global = true, value_name = "AGE", value_parser = parse_age_arg)]
    remote_timeout: Option<std::time::Duration>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Store files (or stdin when none or `-`) and print each key.
    #[command(
        after_help = "Example:\n  objstash --db cache.db put a.json b.json\n  cat a.json | objstash --db cache.db put -"
    )]
    Put {
        /// Files to store; `-` or nothing reads stdin.
        files: Vec<PathBuf>,
        /// Also save the object under this name (your own id for it; one input only).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Pin what is stored: never evicted (see `pin`).
        #[arg(long)]
        pin: bool,
    },
    /// Write an object to stdout or a file.
    #[command(
        after_help = "Example:\n  objstash --db cache.db get 5566db…131d -o wall.json\n  objstash --db cache.db get --name wall-17 -o wall.json"
    )]
    Get {
        /// The object's key: 64 hex digits.
        #[arg(required_unless_present = "name", conflicts_with = "name")]
        key: Option<String>,
        /// Find the object by a name it was saved under instead.
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Write to this file instead of stdout.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Print whether each key is stored; exit 1 if any is not.
    #[command(
        after_help = "Example:\n  objstash --db cache.db has <KEY> <KEY>\n  objstash --db cache.db has - < keys.txt"
    )]
    Has {
        /// Keys to look up; `-` alone reads them from stdin.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Read keys from stdin (one per line) and print those not stored.
    #[command(
        after_help = "Example:\n  objstash --db cache.db missing < wanted.txt > to_fetch.txt"
    )]
    Missing,
    /// Store every regular file under a directory, in parallel. Symbolic links and special
    /// files are not followed: each is named on stderr as skipped. A file that cannot be
    /// read is reported and the others are still stored; the exit code is then 1.
    #[command(
        after_help = "Example:\n  objstash --db cache.db import ./objects\n  objstash --db cache.db import --names --keys ./objects > keys.txt"
    )]
    Import {
        /// The directory to walk.
        dir: PathBuf,
        /// Print `KEY PATH` for every file stored (with --json: an `objects` list).
        #[arg(long)]
        keys: bool,
        /// Save each object under its path relative to DIR as a name (`get --name PATH`).
        #[arg(long)]
        names: bool,
    },
    /// Write every object to DIR/<first two hex digits>/<other 62>.
    #[command(after_help = "Example:\n  objstash --db cache.db export ./dump")]
    Export {
        /// The directory to write into (created if needed).
        dir: PathBuf,
    },
    /// List keys with raw and stored sizes.
    #[command(after_help = "Example:\n  objstash --db cache.db ls | head")]
    Ls,
    /// Print the size report and the hit rate: what every process's reads, lookups and
    /// saves found since counting began.
    #[command(
        after_help = "Example:\n  objstash --db cache.db stats --json\n  objstash --db cache.db stats --zero   print, then count from now"
    )]
    Stats {
        /// After printing, set the counters to 0 (hits, misses, saves); counting begins
        /// again.
        #[arg(long)]
        zero: bool,
    },
    /// Check every object; exit 1 if anything is damaged or the open had to salvage.
    #[command(after_help = "Example:\n  objstash --db cache.db verify")]
    Verify,
    /// Check the stash and rebuild it from every object that verifies if anything is
    /// wrong; the old file is kept aside when objects were lost.
    #[command(after_help = "Example:\n  objstash --db cache.db repair")]
    Repair,
    /// Remove objects (one transaction); exit 1 if any was not stored.
    #[command(after_help = "Example:\n  objstash --db cache.db rm <KEY>")]
    Rm {
        /// Keys to remove.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Print the key each name maps to (`KEY NAME`, or `- NAME` when not saved); exit 1 if
    /// any is not saved.
    #[command(after_help = "Example:\n  objstash --db cache.db resolve wall-17 beam-3")]
    Resolve {
        /// Names to look up; `-` alone reads them from stdin, one per line.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Remove names (their objects stay); exit 1 if any was not saved. `rm` of an object
    /// removes its names.
    #[command(after_help = "Example:\n  objstash --db cache.db unname wall-17")]
    Unname {
        /// Names to remove.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Show the stash's recorded settings, or change one: durability (fast, safe, owned), codec
    /// (gzip, zstd-dict) or max-size (a size cap such as 2GiB, or none). A new cap evicts
    /// least recently used objects down to it before the command returns.
    #[command(
        after_help = "Example:\n  objstash --db cache.db config\n  objstash --db cache.db config durability safe\n  objstash --db cache.db config max-size 2GiB"
    )]
    Config {
        /// The setting to change; none shows them all.
        #[command(subcommand)]
        change: Option<Setting>,
    },
    /// Evict now: objects not saved or read for an age, or least recently used ones down to
    /// a size (the recorded cap is not changed). Pinned objects and objects used in the
    /// last seconds stay.
    #[command(
        after_help = "Example:\n  objstash --db cache.db trim --unused-for 30d\n  objstash --db cache.db trim --max-size 1GiB"
    )]
    Trim {
        /// Evict objects unused for this long: 90s, 45m, 12h, 30d, 2w.
        #[arg(long, value_name = "AGE")]
        unused_for: Option<String>,
        /// Evict least recently used objects until the files fit this size: 500M, 1GiB
        /// (0 evicts every unpinned object).
        #[arg(long, value_name = "SIZE")]
        max_size: Option<String>,
    },
    /// Pin objects: never evicted by the cap or a trim (`rm` still removes them); exit 1
    /// if any is not stored.
    #[command(
        after_help = "Example:\n  objstash --db cache.db pin <KEY>\n  objstash --db cache.db pin - < local.txt"
    )]
    Pin {
        /// Keys to pin; `-` alone reads them from stdin.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Unpin objects (they count as used now); exit 1 if any was not pinned.
    #[command(after_help = "Example:\n  objstash --db cache.db unpin <KEY>")]
    Unpin {
        /// Keys to unpin; `-` alone reads them from stdin.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// List models, least recently used first: root, name, objects, stored bytes, whether
    /// complete (a model's root reads as absent while one of its objects is not stored).
    #[command(after_help = "Example:\n  objstash --db cache.db models --json")]
    Models,
    /// See to one model: show, put, declare, pin, unpin, rm, export.
    #[command(
        after_help = "Example:\n  objstash --db cache.db model put root.json parts/*.json --name v1\n  objstash --db cache.db model show <ROOT>\n  objstash --db cache.db model export <ROOT> ./v1"
    )]
    Model {
        #[command(subcommand)]
        action: models::ModelAction,
    },
    /// Upload every stored object the remote lacks, in packs; an interrupted push is
    /// resumed by the next one.
    #[cfg(feature = "remote")]
    #[command(after_help = "Example:\n  objstash --db cache.db --remote s3://team/cache push")]
    Push,
    /// Fetch every object the remote holds and the stash lacks, checking each; exit 1 if a
    /// pack was damaged or could not be read.
    #[cfg(feature = "remote")]
    #[command(after_help = "Example:\n  objstash --db cache.db --remote s3://team/cache pull")]
    Pull,
    /// What the remote holds, or which keys it lacks, from the local copy of its pack
    /// indexes.
    #[cfg(feature = "remote")]
    #[command(
        after_help = "Example:\n  objstash --db cache.db --remote s3://team/cache remote status\n  objstash --db cache.db --remote s3://team/cache remote missing - < keys.txt"
    )]
    Remote {
        #[command(subcommand)]
        action: RemoteAction,
    },
    /// Print the completion script of a shell (bash, zsh, fish, powershell, elvish), made
    /// from this build's commands and flags; needs no stash.
    #[command(
        after_help = "Install (bash):\n  objstash completions bash > ~/.local/share/bash-completion/completions/objstash\nzsh: objstash completions zsh > \"${fpath[1]}/_objstash\"\nfish: objstash completions fish > ~/.config/fish/completions/objstash.fish\nPowerShell: objstash completions powershell >> $PROFILE"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages (objstash.1 and one for each command) into a directory, made
    /// from this build's commands and flags; prints each path; needs no stash.
    #[command(after_help = "Install:\n  objstash man ~/.local/share/man/man1")]
    Man {
        /// The directory (made if missing).
        dir: PathBuf,
    },
}

/// A setting `config` changes.
#[derive(Subcommand, Debug)]
enum Setting {
    /// What acknowledged writes survive: fast, safe or owned.
    Durability { value: Durability },
    /// How new objects are compressed: gzip or zstd-dict (stored objects stay readable).
    Codec { value: Codec },
    /// A size cap such as 2GiB, or none.
    MaxSize { value: String },
    /// The layout is fixed when a stash is created.
    #[command(hide = true)]
    Layout { value: String },
}

/// What `remote` asks.
#[cfg(feature = "remote")]
#[derive(Subcommand, Debug)]
enum RemoteAction {
    /// What the remote holds: objects, packs, the local copy of its indexes.
    Status,
    /// Collects the remote's garbage: duplicate packs of concurrent pushes, packs out of the
    /// listing for longer than the grace period plus the clock margin (10 minutes, for
    /// machines whose clocks disagree), bodies of killed pushes. One machine at a time (a
    /// lease on the remote: see break-lease); safe beside other machines' pushes and reads.
    Gc {
        /// How long a pack taken out of the listing stays readable before its body is
        /// deleted (longer than any read or push in flight), the clock margin (10 minutes)
        /// added: e.g. 1h.
        #[arg(long, default_value = "1h", value_parser = parse_age_arg)]
        grace: std::time::Duration,
        /// How old a body no push announced must be to be taken for a killed push's.
        #[arg(long, default_value = "1d", value_parser = parse_age_arg)]
        orphan_grace: std::time::Duration,
    },
    /// Keeps the remote within a size and an age: packs whose objects no machine used for
    /// `--unused-for` go (objects still in use in mostly unused packs are repacked first),
    /// then the least recently used packs beyond `--max-size`.
    Trim {
        /// The most bytes the bucket keeps under the remote's prefix (pack bodies and
        /// indexes, compacted shards, the log, use reports), once the bodies of packs
        /// taken out go after the grace: e.g. 100GiB.
        #[arg(long, value_parser = parse_size_arg)]
        max_size: Option<u64>,
        /// Objects no machine pushed, pulled or read through for this long go: e.g. 90d.
        #[arg(long, value_parser = parse_age_arg)]
        unused_for: Option<std::time::Duration>,
        /// How long a pack taken out stays readable before its body is deleted.
        #[arg(long, default_value = "1h", value_parser = parse_age_arg)]
        grace: std::time::Duration,
    },
    /// Compacts the remote's pack indexes into key-sharded files: a new machine then reads
    /// the parts it needs (a few requests) instead of every index.
    Compact,
    /// Clears the collectors' lease of a machine that is gone: a gc or trim killed there
    /// keeps every other collector out for its lease (10 minutes) plus the clock margin
    /// (10 minutes). A holder that is alive stops at its next renewal.
    BreakLease,
    /// The keys the remote lacks; `-` alone reads them from stdin.
    Missing {
        #[arg(required = true)]
        keys: Vec<String>,
    },
}

impl Command {
    /// Checks the keys a command was given before any stash is opened: a bad key is a
    /// usage error whatever the state of the stash.
    fn check_keys(&self) -> Result<(), Failure> {
        let keys: &[String] = match self {
            Command::Get { key: Some(key), .. } => std::slice::from_ref(key),
            Command::Has { keys } if keys != &["-"] => keys,
            Command::Rm { keys } => keys,
            Command::Pin { keys } | Command::Unpin { keys } if keys != &["-"] => keys,
            Command::Model { action } => {
                return action.keys().into_iter().try_for_each(|key| parse_key(key).map(drop));
            }
            #[cfg(feature = "remote")]
            Command::Remote { action: RemoteAction::Missing { keys } } if keys != &["-"] => keys,
            _ => &[],
        };
        keys.iter().try_for_each(|key| parse_key(key).map(drop))
    }

    /// Whether the command may create a stash: only those that store objects.
    fn creates(&self) -> bool {
        #[cfg(feature = "remote")]
        if matches!(self, Command::Pull) {
            return true;
        }
        matches!(
            self,
            Command::Put { .. }
                | Command::Import { .. }
                | Command::Model { action: models::ModelAction::Put { .. } }
        )
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(Failure::BrokenPipe) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("objstash: {failure}");
            failure.exit_code()
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Failure> {
    traces::init()?;
    match &cli.command {
        Command::Completions { shell } => {
            return help_files::completions(*shell).map(|()| ExitCode::SUCCESS);
        }
        Command::Man { dir } => return help_files::man(dir).map(|()| ExitCode::SUCCESS),
        _ => {}
    }
    let db = cli
        .db
        .clone()
        .or_else(|| std::env::var_os("OBJSTASH_DB").filter(|v| !v.is_empty()).map(PathBuf::from))
        .ok_or_else(|| {
            Failure::Usage("no stash given: pass --db PATH or set OBJSTASH_DB".into())
        })?;
    cli.command.check_keys()?;
    if cli.json && matches!(cli.command, Command::Get { .. }) {
        return Err(Failure::Usage("get writes the object itself; it takes no --json".into()));
    }
    check_stdio(&cli.command)?;
    let mut out = Out::stdout(cli.json, cli.quiet);
    match &cli.command {
        Command::Repair => return check::repair(&db, &mut out),
        Command::Config { change: Some(Setting::MaxSize { value }) } => {
            return bound::set_max_size(&db, value, &mut out);
        }
        Command::Config { change: Some(Setting::Layout { .. }) } => {
            return Err(Failure::Usage(
                "the layout is fixed when a stash is created; export and import into a new \
                 stash to change it"
                    .into(),
            ));
        }
        Command::Config { change: Some(setting) } => {
            let setting = match setting {
                Setting::Durability { value } => manage::Change::Durability(*value),
                Setting::Codec { value } => manage::Change::Codec(*value),
                Setting::MaxSize { .. } | Setting::Layout { .. } => unreachable!("handled above"),
            };
            return manage::config_set(&db, setting, &mut out);
        }
        _ => {}
    }
    if !cli.command.creates() && cli.layout.is_some() {
        return Err(Failure::Usage("--layout applies when creating a stash (put, import)".into()));
    }
    if !cli.command.creates() && cli.values.is_some() {
        return Err(Failure::Usage("--values applies when creating a stash (put, import)".into()));
    }
    if !cli.command.creates() && cli.max_object_size.is_some() {
        return Err(Failure::Usage("--max-object-size applies to put and import".into()));
    }
    let mut builder = Stash::builder().create(cli.command.creates());
    if let Some(layout) = cli.layout {
        builder = builder.layout(layout);
    }
    if let Some(values) = cli.values {
        builder = builder.values(values);
    }
    if let Some(codec) = cli.codec {
        builder = builder.codec(codec);
    }
    if let Some(durability) = cli.durability {
        builder = builder.durability(durability);
    }
    if let Some(bytes) = cli.max_object_size {
        builder = builder.max_object_size(bytes);
    }
    #[cfg(feature = "remote")]
    {
        let pack_size = cli.pack_size.as_deref().map(bound::parse_size).transpose()?;
        let remote = remote::config(
            cli.remote.as_deref(),
            cli.endpoint.as_deref(),
            pack_size,
            cli.remote_timeout,
        )?;
        let needs_remote =
            matches!(cli.command, Command::Push | Command::Pull | Command::Remote { .. });
        if needs_remote && remote.is_none() {
            return Err(Failure::Usage(
                "this command needs a remote: --remote s3://bucket/prefix or OBJSTASH_REMOTE"
                    .into(),
            ));
        }
        if let Some(remote) = remote {
            // A read through the remote keeps what it read: a new machine's first `get`
            // makes its stash.
            if matches!(cli.command, Command::Get { .. }) {
                builder = builder.create(true);
            }
            builder = builder.remote(remote);
        }
    }
    let stash = builder.open(&db)?;
    if let Some(values) = cli.values.filter(|&v| v != stash.values()) {
        return Err(Failure::Usage(format!(
            "this stash keeps its values in {}, chosen when it was made: --values {values} \
             applies to a new stash",
            stash.values()
        )));
    }
    if let Some(report) = stash.recovery() {
        if report.lost_anything() {
            out.warn(&report.to_string());
        } else {
            out.say(&report.to_string());
        }
    }
    let code = match &cli.command {
        Command::Put { files, name, pin } => {
            store::put(&stash, files, name.as_deref(), *pin, &mut out)?
        }
        Command::Import { dir, keys, names } => {
            let options = store::ImportOptions { keys: *keys, names: *names };
            let done = store::import(&stash, dir, options, &mut out)?;
            // Closed first: a capped stash evicts what it owes as it closes, and the
            // summary's figures are the ones `stats` gives after.
            stash.close()?;
            let after = Stash::builder().create(false).read_only(true).open(&db)?.stats()?;
            let code = done.report(&after, &mut out)?;
            out.flush()?;
            return Ok(code);
        }
        Command::Get { key, name, output } => {
            let object = match (key, name) {
                (Some(key), _) => fetch::Object::Key(key),
                (None, Some(name)) => fetch::Object::Name(name),
                (None, None) => unreachable!("clap requires a key or a name"),
            };
            fetch::get(&stash, object, output.as_deref(), &mut out)?
        }
        Command::Resolve { names } => fetch::resolve(&stash, names, &mut out)?,
        Command::Unname { names } => manage::unname(&stash, names, &mut out)?,
        Command::Has { keys } => fetch::has(&stash, keys, &mut out)?,
        Command::Missing => fetch::missing(&stash, &mut out)?,
        Command::Export { dir } => fetch::export(&stash, &db, dir, &mut out)?,
        Command::Ls => fetch::ls(&stash, &mut out)?,
        Command::Stats { zero } => check::stats(&stash, *zero, &mut out)?,
        Command::Verify => check::verify(&stash, &db, &mut out)?,
        Command::Rm { keys } => manage::rm(&stash, keys, &mut out)?,
        Command::Config { .. } => manage::config_show(&stash, &mut out)?,
        Command::Trim { unused_for, max_size } => {
            bound::trim(&stash, unused_for.as_deref(), max_size.as_deref(), &mut out)?
        }
        Command::Pin { keys } => bound::pin(&stash, keys, true, &mut out)?,
        Command::Unpin { keys } => bound::pin(&stash, keys, false, &mut out)?,
        Command::Models => models::list(&stash, &mut out)?,
        Command::Model { action } => models::run(&stash, action, &mut out)?,
        #[cfg(feature = "remote")]
        Command::Push => remote::push(&stash, &mut out)?,
        #[cfg(feature = "remote")]
        Command::Pull => remote::pull(&stash, &mut out)?,
        #[cfg(feature = "remote")]
        Command::Remote { action: RemoteAction::Status } => remote::status(&stash, &mut out)?,
        #[cfg(feature = "remote")]
        Command::Remote { action: RemoteAction::Gc { grace, orphan_grace } } => {
            remote::collect(&stash, *grace, *orphan_grace, &mut out)?
        }
        #[cfg(feature = "remote")]
        Command::Remote { action: RemoteAction::Trim { max_size, unused_for, grace } } => {
            remote::trim(&stash, *max_size, *unused_for, *grace, &mut out)?
        }
        #[cfg(feature = "remote")]
        Command::Remote { action: RemoteAction::Compact } => remote::compact(&stash, &mut out)?,
        #[cfg(feature = "remote")]
        Command::Remote { action: RemoteAction::BreakLease } => {
            remote::break_lease(&stash, &mut out)?
        }
        #[cfg(feature = "remote")]
        Command::Remote { action: RemoteAction::Missing { keys } } => {
            remote::missing(&stash, keys, &mut out)?
        }
        Command::Repair => unreachable!("handled before opening"),
        Command::Completions { .. } | Command::Man { .. } => {
            unreachable!("handled before the stash")
        }
    };
    out.flush()?;
    stash.close()?;
    Ok(code)
}

/// An age as a command-line argument (`1h`, `30d`).
#[cfg(feature = "remote")]
fn parse_age_arg(text: &str) -> Result<std::time::Duration, String> {
    bound::parse_age(text).map_err(|e| e.to_string())
}

/// A size as a command-line argument (`100GiB`).
#[cfg(feature = "remote")]
fn parse_size_arg(text: &str) -> Result<u64, String> {
    bound::parse_size(text).map_err(|e| e.to_string())
}

/// Parses a key given on the command line or stdin.
fn parse_key(text: &str) -> Result<Key, Failure> {
    text.trim().parse().map_err(|e: objstash::ParseKeyError| Failure::Usage(e.to_string()))
}

/// Refuses a command whose input or result would go through a standard stream the shell
/// closed (`put <&-`, `get KEY >&-`): Rust puts `/dev/null` on a closed one, so the
/// command would store an empty object, or print a key or an object nobody gets, and exit 0.
fn check_stdio(command: &Command) -> Result<(), Failure> {
    let reads_stdin = match command {
        Command::Put { files, .. } => {
            files.is_empty() || files.iter().any(|f| f.as_os_str() == "-")
        }
        Command::Missing => true,
        _ => false,
    };
    let result_on_stdout = matches!(
        command,
        Command::Put { .. }
            | Command::Get { output: None, .. }
            | Command::Ls
            | Command::Resolve { .. }
            | Command::Missing
    );
    if reads_stdin && was_closed(0) {
        return Err(Failure::Usage(
            "stdin is closed: give the files to store, or pipe the object in".into(),
        ));
    }
    if result_on_stdout && was_closed(1) {
        return Err(Failure::Usage(
            "stdout is closed: what this command prints would be lost (get takes -o FILE)".into(),
        ));
    }
    Ok(())
}

/// Whether standard stream `fd` was closed when the process started: Rust's runtime then
/// opened `/dev/null` on it read-write, which a shell's own redirection to `/dev/null`
/// never does (it opens it read-only or write-only).
#[cfg(target_os = "linux")]
fn was_closed(fd: u8) -> bool {
    let null = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .is_ok_and(|target| target == std::path::Path::new("/dev/null"));
    let read_write = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).is_ok_and(|info| {
        info.lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|flags| u32::from_str_radix(flags.trim(), 8).ok())
            .is_some_and(|flags| flags & 0o3 == 0o2)
    });
    null && read_write
}

#[cfg(not(target_os = "linux"))]
fn was_closed(_fd: u8) -> bool {
    false
}

/// A spinner with the time so far on stderr while a long call without steps of its own
/// runs (verify, repair, push, pull), when stderr is a terminal and messages are wanted;
/// cleared when it returns.
fn working<T>(quiet: bool, what: &str, call: impl FnOnce() -> T) -> T {
    use indicatif::{ProgressBar, ProgressStyle};
    if quiet || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return call();
    }
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}, {elapsed}") {
        bar.set_style(style);
    }
    bar.set_message(what.to_string());
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let result = call();
    bar.finish_and_clear();
    result
}

/// Progress on stderr when it is a terminal and messages are wanted.
fn progress(len: u64, quiet: bool, what: &str) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressStyle};
    if quiet || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(&format!(
        "{{bar:40}} {{pos}}/{{len}} {what}, {{rate}}, eta {{eta}}"
    )) {
        // A whole number a second: indicatif's own rate prints "5726.8695/s".
        let style = style.with_key(
            "rate",
            |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", state.per_sec());
            },
        );
        bar.set_style(style);
    }
    bar
}
