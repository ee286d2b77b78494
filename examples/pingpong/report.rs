//! The results table, in fi_pingpong's format, and the event log.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The result of one message size.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub size: usize,
    pub iterations: usize,
    pub elapsed: Duration,
    /// Transfers per iteration: 2 for a ping and its pong, 1 for an RMA
    /// read (the read is the round trip).
    pub xfers: usize,
}

impl Row {
    /// Microseconds per transfer: half a round trip, as fi_pingpong counts
    /// (an RMA read: the whole read).
    pub fn usec_per_xfer(&self) -> f64 {
        self.elapsed.as_secs_f64() * 1e6 / (self.iterations as f64 * self.xfers as f64)
    }

    /// Bytes moved in both directions per microsecond (fi_pingpong's MB/sec).
    pub fn mb_per_sec(&self) -> f64 {
        let bytes = (self.size * self.iterations * self.xfers) as f64;
        bytes / (self.elapsed.as_secs_f64() * 1e6)
    }
}

/// fi_pingpong's size_str: 4096 -> "4k", 1536 -> "1.5k".
fn size_str(size: u64) -> String {
    let (base, mag) = match size {
        s if s >= 1 << 30 => (1u64 << 30, "g"),
        s if s >= 1 << 20 => (1 << 20, "m"),
        s if s >= 1 << 10 => (1 << 10, "k"),
        _ => (1, ""),
    };
    let fraction = if size / base < 10 {
        (size % base) * 10 / base
    } else {
        0
    };
    if fraction > 0 {
        format!("{}.{fraction}{mag}", size / base)
    } else {
        format!("{}{mag}", size / base)
    }
}

/// fi_pingpong's cnt_str: 1000 -> "1k".
fn cnt_str(count: u64) -> String {
    match count {
        c if c >= 1_000_000_000 => format!("{}b", c / 1_000_000_000),
        c if c >= 1_000_000 => format!("{}m", c / 1_000_000),
        c if c >= 1_000 => format!("{}k", c / 1_000),
        c => c.to_string(),
    }
}

/// The table, with fi_pingpong's header and columns.
pub fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<8}{:<8}{:<9}{:<8}{:>8} {:>10}{:>13}{:>13}\n",
        "bytes", "#sent", "#ack", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec"
    );
    for r in rows {
        let usec = r.usec_per_xfer();
        let _ = writeln!(
            out,
            "{:<8}{:<8}={:<8}{:<8}{:>8.2}s{:>10.2}{:>11.2}{:>11.2}",
            size_str(r.size as u64),
            cnt_str(r.iterations as u64),
            cnt_str(r.iterations as u64),
            size_str((r.size * r.iterations * r.xfers) as u64),
            r.elapsed.as_secs_f64(),
            r.mb_per_sec(),
            usec,
            1.0 / usec,
        );
    }
    out
}

/// Event queue events seen by either side, with the time they were read.
pub struct EventLog {
    start: Instant,
    entries: Mutex<Vec<(Duration, &'static str, String)>>,
}

impl EventLog {
    pub fn new() -> Self {
        EventLog {
            start: Instant::now(),
            entries: Mutex::new(Vec::new()),
        }
    }

    pub fn record(&self, side: &'static str, text: String) {
        let at = self.start.elapsed();
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((at, side, text));
    }

    pub fn render(&self) -> String {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        entries.sort_by_key(|e| e.0);
        let mut out = String::from("event queue events:\n");
        if entries.is_empty() {
            out.push_str(
                "  (none: RDM endpoints have no connections; peers are addresses in an AV)\n",
            );
        }
        for (at, side, text) in entries {
            let _ = writeln!(
                out,
                "  {:>9.3} ms  {side:<6}  {text}",
                at.as_secs_f64() * 1e3
            );
        }
        out
    }
}
