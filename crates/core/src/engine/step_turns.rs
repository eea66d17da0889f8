//! Fair sharing of the CPU between models served side by side: every engine step and every
//! embedding pass takes a turn, and turns are given in the order they were asked for (a ticket
//! lock). So a busy model never waits more than one step of each other busy model, however long
//! their prompts: a step is bounded by `max_num_batched_tokens` (an encoder pass by
//! `--max-batch-tokens`). The kernels' thread pool runs one job at a time anyway; the turn makes
//! the interleaving a whole step at a time, and fair, where its lock alone would let one
//! model's thread take it back again and again.

use std::sync::{Condvar, Mutex, PoisonError};

#[derive(Debug, Default)]
struct Tickets {
    /// The next ticket handed out.
    next: u64,
    /// The ticket whose turn it is.
    serving: u64,
}

/// The turns of the models sharing one machine. One per server; a lone model never waits.
#[derive(Debug, Default)]
pub struct StepTurns {
    tickets: Mutex<Tickets>,
    turn_ended: Condvar,
}

/// A turn: the step runs while it is held, the next in line goes when it is dropped.
pub struct Turn<'a>(&'a StepTurns);

impl StepTurns {
    pub fn new() -> Self {
        Self::default()
    }

    /// Waits for this caller's turn (callers are served first come, first served).
    pub fn take(&self) -> Turn<'_> {
        // A panicking step poisons nothing that matters here: the counters stay consistent.
        let mut t = self.tickets.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = t.next;
        t.next += 1;
        while t.serving != mine {
            t = self
                .turn_ended
                .wait(t)
                .unwrap_or_else(PoisonError::into_inner);
        }
        Turn(self)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut t = self
            .0
            .tickets
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        t.serving += 1;
        drop(t);
        self.0.turn_ended.notify_all();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn a_waiting_caller_goes_before_one_that_asks_again() {
        // The holder ends its turn and asks at once for the next: the caller already waiting
        // goes first (a plain mutex may hand it straight back to the holder).
        let turns = Arc::new(StepTurns::new());
        let order = Arc::new(Mutex::new(Vec::new()));
        let asking = Arc::new(AtomicUsize::new(0));
        let first = turns.take();
        let waiter = {
            let (turns, order, asking) = (turns.clone(), order.clone(), asking.clone());
            std::thread::spawn(move || {
                asking.store(1, Ordering::SeqCst);
                let _turn = turns.take();
                order.lock().unwrap().push("waiter");
            })
        };
        while asking.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        // Let the waiter reach its ticket.
        while turns.tickets.lock().unwrap().next < 2 {
            std::thread::yield_now();
        }
        drop(first);
        let again = turns.take();
        order.lock().unwrap().push("holder");
        drop(again);
        waiter.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["waiter", "holder"]);
    }
}
