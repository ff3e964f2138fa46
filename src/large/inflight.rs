//! A bound on the bytes one streaming save has on their way to the writer.
//!
//! The channel to the writer bounds messages, not bytes; a chunked save sends chunks of up
//! to a mebibyte each, which the writer keeps until their transaction commits. Each
//! message of chunks carries a [`Permit`] for its bytes, taken from the save's [`Budget`]
//! before it is sent and given back when the writer drops the message, so a save of any
//! size holds at most the budget (plus the message being made) in memory.

use std::sync::{Arc, Condvar, Mutex};

/// Bytes a save may have in flight.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: usize,
    used: Mutex<usize>,
    freed: Condvar,
}

/// Bytes of a budget held by one message; given back when dropped.
#[derive(Debug)]
pub(crate) struct Permit {
    budget: Arc<Budget>,
    bytes: usize,
}

impl Budget {
    pub(crate) fn new(limit: usize) -> Arc<Budget> {
        Arc::new(Budget { limit, used: Mutex::new(0), freed: Condvar::new() })
    }

    /// Waits until `bytes` fit the budget (a message larger than the whole budget waits
    /// until nothing else is in flight), then holds them.
    pub(crate) fn take(self: &Arc<Self>, bytes: usize) -> Permit {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *used > 0 && *used + bytes > self.limit {
            used = self.freed.wait(used).unwrap_or_else(|p| p.into_inner());
        }
        *used += bytes;
        Permit { budget: Arc::clone(self), bytes }
    }
}

impl Permit {
    /// Whether half the budget or more is in flight: the writer should commit what it
    /// holds rather than wait for more, or the save stalls on its budget.
    pub(crate) fn pressing(&self) -> bool {
        let used = *self.budget.used.lock().unwrap_or_else(|p| p.into_inner());
        used * 2 >= self.budget.limit
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut used = self.budget.used.lock().unwrap_or_else(|p| p.into_inner());
        *used -= self.bytes;
        drop(used);
        self.budget.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_take_waits_for_a_permit_to_be_given_back() {
        let budget = Budget::new(10);
        let first = budget.take(8);
        let (tx, rx) = std::sync::mpsc::channel();
        let waiting = {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || {
                let second = budget.take(5);
                tx.send(()).unwrap();
                drop(second);
            })
        };
        // The second take cannot have returned: 8 + 5 do not fit 10 while `first` is held.
        assert!(rx.try_recv().is_err());
        drop(first);
        rx.recv().unwrap();
        waiting.join().unwrap();
        // Larger than the budget: it goes when nothing else is in flight.
        drop(budget.take(50));
    }
}
