//! What producers send the writer: a save's row, or an operation that carries its own
//! answer.
//!
//! Saves are the hot path (hundreds of thousands a second) and travel as plain rows; every
//! other write is an [`Op`], one type per operation (`writer/ops.rs`) that says how it is
//! counted in a batch, what it does inside the batch's transaction, and how it answers once
//! the transaction committed, or could not be. Adding an operation is writing one such
//! type and the handle method that sends it (`notes/design.md`, "The writer").

use std::collections::VecDeque;

use crossbeam_channel::{Receiver, Sender, bounded};

use super::Shared;
use super::tx::Tx;
use super::upkeep::Job;
use crate::error::{Error, Result};
use crate::writer::pending::Row;

/// What producers send to the writer.
pub(crate) enum Message {
    /// Store a row (already in [`Pending`](crate::writer::pending::Pending)).
    Save(Row),
    /// Any other write.
    Op(Box<dyn Op>),
}

/// One write operation other than a save, in the batch of the transaction that applies it.
pub(crate) trait Op: Send {
    /// Rows it writes, toward the batch's limit (names count as rows).
    fn rows(&self) -> usize {
        0
    }

    /// Bytes it holds until its transaction commits, toward the batch's limit.
    fn bytes(&self) -> usize {
        0
    }

    /// Whether a caller waits for it, so that the batch commits without lingering for more.
    fn urgent(&self) -> bool {
        true
    }

    /// Whether it writes anything: a batch of operations that do not (a flush) opens no
    /// transaction, and so never waits for the write lock.
    fn writes(&self) -> bool {
        true
    }

    /// Does its work inside the batch's transaction, after every save sent before it.
    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), super::Stop>;

    /// The transaction that applied it committed: answers the caller, or hands work on.
    fn committed(self: Box<Self>, after: &mut After<'_>);

    /// The batch will not be committed, for `error`. An operation that nobody waits for
    /// returns itself when the batch is kept to be tried again (`retried`, after a busy
    /// timeout); one with a caller answers it.
    fn abandoned(self: Box<Self>, error: Error, retried: bool) -> Option<Box<dyn Op>>;
}

/// What an operation may reach once its transaction committed.
pub(crate) struct After<'a> {
    pub shared: &'a Shared,
    /// One-off evictions, run between batches (`writer/upkeep.rs`).
    pub jobs: &'a mut VecDeque<Job>,
}

/// Where an operation's answer goes: the caller waits on the other end.
pub(crate) struct Answer<T>(Sender<Result<T>>);

impl<T> Answer<T> {
    /// An answer and the receiver its caller waits on.
    pub(crate) fn new() -> (Answer<T>, Receiver<Result<T>>) {
        let (tx, rx) = bounded(1);
        (Answer(tx), rx)
    }

    /// Answers; a caller that stopped waiting is no error.
    pub(crate) fn send(self, answer: Result<T>) {
        let _ = self.0.send(answer);
    }
}
