//! `Stash.read_model_iter`: a model's objects as a Python iterator, in bounded memory.
//!
//! The library's stream (`Stash::model_reader`) borrows the stash, which a Python object
//! cannot; so a thread of the stream's own runs it on the handle and hands the objects
//! over through a bounded channel, which the iterator drains. Dropping the iterator ends
//! the thread (its next hand-over fails); a close or a fork (`Handle::interruptions`) ends
//! it too, and the iterator then raises, so that a stream never keeps either waiting.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, SendTimeoutError, Sender, bounded};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use crate::errors;
use crate::handle::{CallError, Handle};

/// Objects handed over ahead of the iterator, at most.
const AHEAD: usize = 1_024;
/// How often a blocked hand-over looks for a close or a fork.
const CHECK: Duration = Duration::from_millis(20);

/// What the stream's thread hands over.
enum Message {
    /// Whether the root is a complete model: the first message.
    Start(bool),
    Object(objstash::Key, Vec<u8>),
    Failed(CallError),
    /// A close or a fork stopped the stream.
    Interrupted,
    /// Every object was handed over.
    End,
}

/// The objects of a complete model as `(key, bytes)` pairs, in storage order, read in one
/// snapshot a chunk at a time (`Stash.read_model_iter`).
#[pyclass(module = "objstash._objstash", name = "ModelIterator", frozen)]
pub struct ModelIterator {
    rx: Receiver<Message>,
    /// Whether the stream said it ended: a thread gone without saying so was stopped
    /// (by a close or a fork, whose message may not have found room).
    ended: AtomicBool,
}

impl ModelIterator {
    /// Starts streaming the model of `root`; None when it is no complete model.
    pub fn start(
        py: Python<'_>,
        handle: &Arc<Handle>,
        root: objstash::Key,
    ) -> PyResult<Option<ModelIterator>> {
        let (tx, rx) = bounded(AHEAD);
        let handle = Arc::clone(handle);
        let since = handle.interruptions();
        crate::signals::blocked(|| {
            std::thread::Builder::new()
                .name("objstash-model-stream".to_string())
                .spawn(move || stream(&handle, since, &root, &tx))
        })
        .map_err(|e| PyRuntimeError::new_err(format!("starting a thread: {e}")))?;
        match py.detach(|| rx.recv()) {
            Ok(Message::Start(true)) => {
                Ok(Some(ModelIterator { rx, ended: AtomicBool::new(false) }))
            }
            Ok(Message::Start(false)) => Ok(None),
            Ok(message) => Err(error(message)),
            Err(_) => Err(PyRuntimeError::new_err("the model stream's thread panicked")),
        }
    }
}

/// The stream's thread: the model's objects handed over one by one.
fn stream(handle: &Handle, since: u64, root: &objstash::Key, tx: &Sender<Message>) {
    let send = |message: Message| -> bool {
        let mut message = message;
        loop {
            match tx.send_timeout(message, CHECK) {
                Ok(()) => return true,
                Err(SendTimeoutError::Disconnected(_)) => return false,
                Err(SendTimeoutError::Timeout(back)) => {
                    if handle.interruptions() != since {
                        let _ = tx.try_send(Message::Interrupted);
                        return false;
                    }
                    message = back;
                }
            }
        }
    };
    let run = handle.run(|s| {
        let Some(reader) = s.model_reader(root)? else {
            send(Message::Start(false));
            return Ok(());
        };
        if !send(Message::Start(true)) {
            return Ok(());
        }
        for object in reader {
            match object {
                Ok((key, bytes)) => {
                    if handle.interruptions() != since {
                        send(Message::Interrupted);
                        return Ok(());
                    }
                    if !send(Message::Object(key, bytes)) {
                        return Ok(());
                    }
                }
                Err(e) => {
                    send(Message::Failed(CallError::Stash(e)));
                    return Ok(());
                }
            }
        }
        send(Message::End);
        Ok(())
    });
    if let Err(e) = run {
        send(Message::Failed(e));
    }
}

/// The Python error for a message that ends the stream.
fn error(message: Message) -> PyErr {
    match message {
        Message::Failed(e) => errors::call_to_py(e),
        _ => PyRuntimeError::new_err(
            "the stash was closed, or the process forked, while the model was read",
        ),
    }
}

#[pymethods]
impl ModelIterator {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        match py.detach(|| self.rx.recv()) {
            Ok(Message::Object(key, bytes)) => {
                let key = PyString::new(py, &key.to_string());
                Ok(Some(PyTuple::new(py, [key.into_any(), PyBytes::new(py, &bytes).into_any()])?))
            }
            Ok(Message::End) => {
                self.ended.store(true, Ordering::SeqCst);
                Ok(None)
            }
            Err(_) if self.ended.load(Ordering::SeqCst) => Ok(None),
            Err(_) => Err(error(Message::Interrupted)),
            Ok(message) => {
                // An error is raised once; the stream is over.
                self.ended.store(true, Ordering::SeqCst);
                Err(error(message))
            }
        }
    }
}
