//! What a push, a pull or a refresh did, for callers and the command line.

use std::fmt;

/// What [`Stash::push`](crate::Stash::push) did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PushReport {
    /// Objects uploaded.
    pub objects: u64,
    /// Bytes of pack bodies uploaded.
    pub bytes: u64,
    /// Packs uploaded.
    pub packs: u64,
    /// Stored objects the remote already held.
    pub already_remote: u64,
    /// Local objects that failed their hash check and were not uploaded (run verify).
    pub corrupt: u64,
    /// Names uploaded (with the objects they name).
    pub names: u64,
    /// Models uploaded: complete models whose objects are all on the remote, so that a
    /// trim there keeps or takes out each whole.
    pub models: u64,
    /// Requests sent to the remote, the listing included.
    pub requests: u64,
}

/// A pack whose bytes failed their check while pulling or reading through: nothing of it
/// that failed was returned or stored.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DamagedPack {
    /// The pack's name on the remote.
    pub pack: String,
    /// Objects of it that failed.
    pub objects: u64,
    /// The first failure.
    pub reason: String,
}

/// What [`Stash::pull`](crate::Stash::pull) did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PullReport {
    /// Objects fetched, checked and stored.
    pub objects: u64,
    /// Bytes fetched.
    pub bytes: u64,
    /// Remote objects the stash already held.
    pub already_local: u64,
    /// Packs with objects that failed their check; those objects were not stored.
    pub damaged: Vec<DamagedPack>,
    /// Packs that could not be read (their index or body: the remote failed for them);
    /// pull again to get their objects.
    pub unreachable: u64,
    /// Names of the remote now saved here too (those whose objects are here).
    pub names: u64,
    /// Requests sent to the remote, the listing included.
    pub requests: u64,
}

/// What the remote holds, as the local copy of its indexes knows after a refresh.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemoteStatus {
    /// The remote's URL.
    pub url: String,
    /// Packs on the remote.
    pub packs: u64,
    /// Objects in them (with a compacted index, those of packs taken out since the
    /// compaction are estimated from their bytes).
    pub objects: u64,
    /// Bytes of the packs' bodies: the remote's size.
    pub bytes: u64,
    /// Bytes of this machine's copy of the remote's indexes (`<stash>-remote`).
    pub local_index_bytes: u64,
    /// Shards of the remote's compacted index this machine reads in parts (0: it holds a
    /// copy of every index).
    pub index_shards: u64,
    /// Packs whose index was read by this refresh.
    pub new_packs: u64,
    /// Packs this refresh found taken out of the listing (trimmed, collected or damaged)
    /// and forgot.
    pub gone_packs: u64,
    /// Indexes that failed their check (left out; the error names each).
    pub damaged_indexes: Vec<String>,
    /// Indexes that could not be read (the remote failed for them): read at the next
    /// refresh.
    pub unreadable_indexes: u64,
    /// Whether this refresh listed the whole pack log (a catalog's first) rather than
    /// what it recorded since the last refresh.
    pub full_listing: bool,
    /// Entries of the pack log listed (the listing takes a request per 1,000).
    pub listed: u64,
    /// Requests sent.
    pub requests: u64,
}

impl fmt::Display for PushReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pushed {} objects ({} bytes) in {} packs; {} already on the remote; {} requests",
            self.objects, self.bytes, self.packs, self.already_remote, self.requests
        )?;
        if self.names > 0 {
            write!(f, "; {} names", self.names)?;
        }
        if self.models > 0 {
            write!(f, "; {} models", self.models)?;
        }
        if self.corrupt > 0 {
            write!(f, "; {} corrupt local objects NOT pushed (run verify)", self.corrupt)?;
        }
        Ok(())
    }
}

impl PullReport {
    /// Whether the pull got every object the remote lists.
    pub fn is_complete(&self) -> bool {
        self.damaged.is_empty() && self.unreachable == 0
    }
}

impl fmt::Display for PullReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pulled {} objects ({} bytes); {} already here; {} requests",
            self.objects, self.bytes, self.already_local, self.requests
        )?;
        if self.names > 0 {
            write!(f, "; {} names", self.names)?;
        }
        if self.unreachable > 0 {
            write!(f, "\n{} packs could not be read: pull again", self.unreachable)?;
        }
        for d in &self.damaged {
            write!(
                f,
                "\npack {} is damaged: {} objects NOT stored ({})",
                d.pack, d.objects, d.reason
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for RemoteStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} objects in {} packs, {} bytes; {} bytes of its indexes here ({} log \
             entries listed, {} indexes read, {} requests)",
            self.url,
            self.objects,
            self.packs,
            self.bytes,
            self.local_index_bytes,
            self.listed,
            self.new_packs,
            self.requests
        )?;
        if self.index_shards > 0 {
            write!(f, "\nreading a compacted index of {} shards in parts", self.index_shards)?;
        }
        if self.unreadable_indexes > 0 {
            write!(f, "\n{} indexes could not be read: refresh again", self.unreadable_indexes)?;
        }
        for name in &self.damaged_indexes {
            write!(f, "\nindex {name} is damaged: its objects are left out")?;
        }
        Ok(())
    }
}
