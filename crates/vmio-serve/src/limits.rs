//! What a client can make the server hold, and how much it may say about a client.
//!
//! - [`Budget`]: payload bytes (READ buffers waiting for their reply, WRITE payloads) held
//!   per connection and in total. A connection's reader takes budget *before* it allocates a
//!   request's buffer and the thread that sends the reply gives it back once it is sent,
//!   so a client that declares a 32 MiB WRITE and sends one byte, or pipelines 32 MiB READs it
//!   never reads, holds at most its connection's budget; past it, its reader stops reading
//!   that connection (backpressure) until replies drain. Each connection has a small reserve
//!   (at most 1 MiB, carved out of the total) that does not draw on the shared pool, so
//!   clients that pin the shared pool cannot stall another client's small requests; larger
//!   requests wait for the shared pool, which hostile holders give back at the idle timeout.
//!   Invariant: bytes held by all connections <= the total budget.
//! - [`RateLog`]: client-caused log lines, at most [`LOG_LINES_PER_S`] per second, then one
//!   "N similar messages suppressed" line; [`shown`] truncates and escapes what a client sent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Client-caused log lines per second before the rest are counted, not printed.
pub const LOG_LINES_PER_S: u32 = 10;
/// Characters of a client-supplied string (an export name) shown in a log line.
pub const SHOWN_CHARS: usize = 64;

/// Lock a mutex whether or not a thread panicked while holding it (the protected values are
/// counters that stay consistent).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A client-supplied string for a log line: at most [`SHOWN_CHARS`] characters, control and
/// other non-printable characters escaped (`\n`, `\u{1b}`), the length noted when cut.
pub fn shown(s: &str) -> String {
    let mut out = String::new();
    for (n, c) in s.chars().enumerate() {
        if n == SHOWN_CHARS {
            out += &format!("...({} bytes)", s.len());
            break;
        }
        if c.is_control() || c == '\u{fffd}' || c == '\'' || c == '\\' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Rate-limited logging of client misbehaviour.
pub struct RateLog {
    prefix: &'static str,
    st: Mutex<LogWindow>,
}

struct LogWindow {
    start: Instant,
    printed: u32,
    suppressed: u64,
}

impl RateLog {
    pub fn new(prefix: &'static str) -> Self {
        Self {
            prefix,
            st: Mutex::new(LogWindow {
                start: Instant::now(),
                printed: 0,
                suppressed: 0,
            }),
        }
    }

    /// Print `msg` unless [`LOG_LINES_PER_S`] lines were printed this second.
    pub fn log(&self, msg: impl FnOnce() -> String) {
        let mut w = lock(&self.st);
        if w.start.elapsed() >= Duration::from_secs(1) {
            self.roll(&mut w);
        }
        if w.printed < LOG_LINES_PER_S {
            w.printed += 1;
            eprintln!("{}: {}", self.prefix, msg());
        } else {
            w.suppressed += 1;
        }
    }

    fn roll(&self, w: &mut LogWindow) {
        if w.suppressed > 0 {
            eprintln!(
                "{}: {} similar messages suppressed",
                self.prefix, w.suppressed
            );
        }
        *w = LogWindow {
            start: Instant::now(),
            printed: 0,
            suppressed: 0,
        };
    }

    /// Report what was suppressed so far (at shutdown).
    pub fn flush(&self) {
        let mut w = lock(&self.st);
        self.roll(&mut w);
    }
}

/// Payload bytes held in total, with each connection's reserve.
pub struct Budget {
    pub conn_max: u64,
    pub total_max: u64,
    /// Bytes of each connection not drawn from the shared pool.
    pub reserve: u64,
    shared_max: u64,
    shared_used: Mutex<u64>,
    freed: Condvar,
    in_use: AtomicU64,
    peak: AtomicU64,
}

impl Budget {
    /// `conn_max` <= `total_max` (checked by the configuration). The reserve is
    /// min(1 MiB, (total - conn_max) / connections), so that the shared pool can always hold
    /// one connection's whole budget.
    pub fn new(conn_max: u64, total_max: u64, connections: usize) -> Self {
        let spare = total_max.saturating_sub(conn_max) / connections.max(1) as u64;
        let reserve = spare.min(1 << 20) / 4096 * 4096;
        Self {
            conn_max,
            total_max,
            reserve,
            shared_max: total_max - reserve * connections.max(1) as u64,
            shared_used: Mutex::new(0),
            freed: Condvar::new(),
            in_use: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        }
    }

    /// Bytes held now, and the most ever held.
    pub fn usage(&self) -> (u64, u64) {
        (
            self.in_use.load(Ordering::Relaxed),
            self.peak.load(Ordering::Relaxed),
        )
    }

    /// Bytes of a connection holding `held` that must come from the shared pool.
    pub fn over(&self, held: u64) -> u64 {
        held.saturating_sub(self.reserve)
    }

    /// Draw `n` bytes from the shared pool, waiting while it is exhausted; false (nothing
    /// taken) when `abort()` became true first.
    pub fn take_shared(&self, n: u64, abort: &dyn Fn() -> bool) -> bool {
        if n == 0 {
            return true;
        }
        let mut used = lock(&self.shared_used);
        while *used + n > self.shared_max {
            if abort() {
                return false;
            }
            if crate::uring::busy() {
                // Pieces in this thread's io_uring: complete them while waiting.
                drop(used);
                crate::uring::park();
                used = lock(&self.shared_used);
                continue;
            }
            used = self
                .freed
                .wait_timeout(used, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *used += n;
        true
    }

    /// Give `n` bytes back to the shared pool.
    pub fn give_shared(&self, n: u64) {
        if n > 0 {
            let mut used = lock(&self.shared_used);
            *used = used.saturating_sub(n);
            self.freed.notify_all();
        }
    }

    /// Bytes held by connections grew (`up`) or shrank by `n` (for [`Budget::usage`]).
    pub fn note_held(&self, n: u64, up: bool) {
        if up {
            let now = self.in_use.fetch_add(n, Ordering::Relaxed) + n;
            self.peak.fetch_max(now, Ordering::Relaxed);
        } else {
            self.in_use.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// Wake every waiter (shutdown).
    pub fn wake_all(&self) {
        let _g = lock(&self.shared_used);
        self.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_strings_are_truncated_and_escaped() {
        assert_eq!(shown("vm1/disk0"), "vm1/disk0");
        assert_eq!(shown("a\nb\u{1b}[2J"), "a\\nb\\u{1b}[2J");
        let long = "x".repeat(4096);
        let s = shown(&long);
        assert!(
            s.starts_with(&"x".repeat(64)) && s.ends_with("...(4096 bytes)"),
            "{s}"
        );
    }

    #[test]
    fn the_reserve_comes_out_of_the_total_and_the_shared_pool_fits_one_connection() {
        let b = Budget::new(64 << 20, 1 << 30, 256);
        assert_eq!(b.reserve, 1 << 20);
        assert_eq!(b.shared_max, (1 << 30) - (256 << 20));
        let b = Budget::new(32 << 20, 32 << 20, 256);
        assert_eq!(b.reserve, 0);
        assert_eq!(b.shared_max, 32 << 20);
    }

    #[test]
    fn the_shared_pool_blocks_when_exhausted_and_counts_the_peak() {
        let b = Budget::new(4 << 20, 8 << 20, 2);
        assert_eq!(b.reserve, 1 << 20);
        assert_eq!(b.over(1 << 20), 0, "within the reserve");
        assert!(b.take_shared(b.over(5 << 20), &|| false));
        b.note_held(5 << 20, true);
        // The pool (6 MiB) has 2 MiB left: 3 MiB more waits (here: gives up at once).
        assert!(!b.take_shared(3 << 20, &|| true));
        assert!(b.take_shared(2 << 20, &|| true));
        b.give_shared(6 << 20);
        b.note_held(4 << 20, false);
        assert_eq!(*lock(&b.shared_used), 0);
        assert_eq!(b.usage(), (1 << 20, 5 << 20));
    }
}
