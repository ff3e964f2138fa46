//! What producers send the writer: a save's row, or an operation that carries its own
//! answer.
//!
//! Saves are the hot path (hundreds of thousands a second) and travel as plain rows; every
//! other write is an [`Op`], one type per operation (`writer/ops.rs`) that says how it is
//! counted in a batch, what it does inside the batch's transaction, and how it answers once
//! the transaction committed, or could not be. Most operations are one of two kinds, each
//! written once here: a [`Request`] a caller waits on (answered with what it found, or the
//! error that gave its batch up), and an [`Unasked`] write nobody waits for (kept when its
//! batch is tried again). Adding an operation is writing one such type and the handle
//! method that sends it (`notes/design.md`, "The writer").

use std::collections::VecDeque;

use crossbeam_channel::{Receiver, Sender, bounded};

use super::Shared;
use super::state::Job;
use super::tx::Tx;
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

/// An operation a caller waits on: what it found in its transaction is the answer once the
/// transaction commits; the error that gave its batch up is the answer otherwise.
pub(crate) trait Request: Send + 'static {
    /// What the caller gets.
    type Answer: Send + 'static;

    /// Whether it writes anything (see [`Op::writes`]).
    fn writes(&self) -> bool {
        true
    }

    /// Does its work inside the batch's transaction (see [`Op::apply`]).
    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), super::Stop>;

    /// The answer, once the transaction that applied it committed.
    fn answer(self) -> Self::Answer;
}

/// A [`Request`] with the answer its caller waits on.
pub(crate) fn asked<R: Request>(request: R, answer: Answer<R::Answer>) -> Box<dyn Op> {
    Box::new(Asked { request, answer })
}

struct Asked<R: Request> {
    request: R,
    answer: Answer<R::Answer>,
}

impl<R: Request> Op for Asked<R> {
    fn writes(&self) -> bool {
        self.request.writes()
    }

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), super::Stop> {
        self.request.apply(tx)
    }

    fn committed(self: Box<Self>, _: &mut After<'_>) {
        let Asked { request, answer } = *self;
        answer.send(Ok(request.answer()));
    }

    fn abandoned(self: Box<Self>, error: Error, _: bool) -> Option<Box<dyn Op>> {
        self.answer.send(Err(error));
        None
    }
}

/// A write nobody waits for: a batch tried again (after a busy timeout) keeps it, and one
/// given up drops it.
pub(crate) trait Unasked: Send + 'static {
    /// See [`Op::rows`].
    fn rows(&self) -> usize {
        0
    }

    /// See [`Op::bytes`].
    fn bytes(&self) -> usize {
        0
    }

    /// See [`Op::urgent`]: nobody waits, so by default the batch may linger for more.
    fn urgent(&self) -> bool {
        false
    }

    /// Does its work inside the batch's transaction (see [`Op::apply`]).
    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), super::Stop>;

    /// The transaction that applied it committed.
    fn committed(&self, _after: &mut After<'_>) {}
}

/// An [`Unasked`] write, to send.
pub(crate) fn unasked(write: impl Unasked) -> Box<dyn Op> {
    Box::new(Later(write))
}

struct Later<U>(U);

impl<U: Unasked> Op for Later<U> {
    fn rows(&self) -> usize {
        self.0.rows()
    }

    fn bytes(&self) -> usize {
        self.0.bytes()
    }

    fn urgent(&self) -> bool {
        self.0.urgent()
    }

    fn apply(&mut self, tx: &mut Tx<'_>) -> Result<(), super::Stop> {
        self.0.apply(tx)
    }

    fn committed(self: Box<Self>, after: &mut After<'_>) {
        self.0.committed(after);
    }

    fn abandoned(self: Box<Self>, _: Error, retried: bool) -> Option<Box<dyn Op>> {
        retried.then_some(self)
    }
}
