//! The ping-pong: the timed loop and the four ways of waiting for a
//! completion.
//!
//! Before each size the client and server synchronise over the control
//! connection; then the client sends and waits for the echo, the server
//! waits and echoes, `iterations` times. As in fi_pingpong, messages shorter
//! than the inject size go with `fi_inject` (no send completion), longer
//! ones with `fi_send` and its completion; every receive is posted again as
//! soon as it completed, before the reply is sent. Buffers are reused:
//! nothing is allocated in the loop.

use super::cli::{Mode, Options};
use super::control::{Control, Kind, FLAG_VERIFY};
use super::report::Row;
use super::setup::Link;
use super::Res;
use libfabric::cq::{Context, ContextEntry, CqError, CqRead};
use libfabric::tokio::AsyncCompletionQueue;
use libfabric::wait::Waiter;
use libfabric::{Buffer, BufferPool, CompletionQueue, Errno};
use std::time::{Duration, Instant};

/// A wait for one completion gives up after this long without one.
pub const STALL: Duration = Duration::from_secs(10);
/// Blocking waits wake up this often to check for a stall.
const SLICE: Duration = Duration::from_millis(100);
/// Busy-polling checks the clock once per this many empty reads.
pub const SPINS_PER_CHECK: u32 = 4096;
/// A progress line on stderr at most this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(3);

/// fi_pingpong's data pattern: the alphabet over and over, message `iter`
/// starting at a different letter.
const ALPHABET: &[u8; 62] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// The pattern of message `iter`, 62 bytes at a time.
fn pattern(iter: usize) -> impl Iterator<Item = &'static [u8]> {
    let start = iter * 7 % ALPHABET.len();
    std::iter::once(&ALPHABET[start..]).chain(std::iter::repeat(&ALPHABET[..]))
}

pub fn fill(buf: &mut [u8], iter: usize) {
    let mut rest = buf;
    for chunk in pattern(iter) {
        if rest.is_empty() {
            break;
        }
        let n = chunk.len().min(rest.len());
        rest[..n].copy_from_slice(&chunk[..n]);
        rest = &mut rest[n..];
    }
}

pub fn check(buf: &[u8], iter: usize, side: &str) -> Res<()> {
    let mut at = 0;
    for chunk in pattern(iter) {
        if at == buf.len() {
            return Ok(());
        }
        let n = chunk.len().min(buf.len() - at);
        if buf[at..at + n] != chunk[..n] {
            let bad = at + (0..n).find(|&i| buf[at + i] != chunk[i]).unwrap_or(0);
            return Err(format!(
                "{side}: message {iter} of {} bytes is corrupt at byte {bad}",
                buf.len()
            )
            .into());
        }
        at += n;
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Queue {
    Tx,
    Rx,
}

/// How this side waits for a completion.
enum Wait<'l> {
    /// `fi_cq_read` until something comes (fi_pingpong's way).
    Spin,
    /// `fi_cq_sread`.
    Sread,
    /// `fi_trywait` + `poll(2)` on the CQ's wait fd, through [`Waiter`].
    Fd { tx: Waiter<'l>, rx: Waiter<'l> },
    /// A tokio `AsyncCompletionQueue`, awaited on a current-thread runtime.
    Tokio {
        rt: tokio::runtime::Runtime,
        tx: AsyncCompletionQueue<Context>,
        rx: AsyncCompletionQueue<Context>,
    },
}

/// Prints a line on stderr every few seconds of a long run.
pub struct Progress {
    enabled: bool,
    next: Instant,
}

impl Progress {
    pub fn new(enabled: bool) -> Self {
        Progress {
            enabled,
            next: Instant::now() + PROGRESS_EVERY,
        }
    }

    pub fn tick(&mut self, side: &str, size: usize, done: usize, iterations: usize) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if now >= self.next {
            eprintln!("pingpong: {side}: {size} bytes, {done}/{iterations} iterations");
            self.next = now + PROGRESS_EVERY;
        }
    }
}

/// One side's data path.
pub struct Driver<'l> {
    link: &'l Link,
    pool: &'l BufferPool,
    wait: Wait<'l>,
    /// The buffer sent from; the other one is posted to receive.
    tx: Option<Buffer>,
    verify: bool,
    progress: Progress,
}

impl<'l> Driver<'l> {
    fn new(link: &'l Link, tx: Buffer, mode: Mode, progress: Progress) -> Res<Self> {
        let wait = match mode {
            Mode::Spin => Wait::Spin,
            Mode::Sread => Wait::Sread,
            Mode::Fd => Wait::Fd {
                tx: Waiter::new(&[&link.tx_cq])?,
                rx: Waiter::new(&[&link.rx_cq])?,
            },
            Mode::Tokio => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let (tx, rx) = {
                    let _entered = rt.enter();
                    (
                        AsyncCompletionQueue::new(link.tx_cq.clone())?,
                        AsyncCompletionQueue::new(link.rx_cq.clone())?,
                    )
                };
                Wait::Tokio { rt, tx, rx }
            }
        };
        Ok(Driver {
            link,
            pool: link.pool.as_ref().ok_or("the link has no buffers")?,
            wait,
            tx: Some(tx),
            verify: false,
            progress,
        })
    }

    /// Waits for the next completion of one queue, at most [`STALL`], and
    /// gives back the buffer it hands back.
    fn next(&mut self, queue: Queue) -> Res<Buffer> {
        let cq = match queue {
            Queue::Tx => &self.link.tx_cq,
            Queue::Rx => &self.link.rx_cq,
        };
        let pool = &self.pool;
        let mut entries: [ContextEntry; 1] = Default::default();
        let mut idle = 0u32;
        let mut since = None;
        loop {
            let got = match &mut self.wait {
                Wait::Spin => found(cq.read(&mut entries)?, pool),
                Wait::Sread => found(cq.sread(&mut entries, Some(SLICE))?, pool),
                Wait::Fd { tx, rx } => match found(cq.read(&mut entries)?, pool) {
                    Found::Nothing => {
                        let waiter = if matches!(queue, Queue::Tx) { tx } else { rx };
                        let _ = waiter.wait(Some(SLICE))?;
                        Found::Nothing
                    }
                    other => other,
                },
                Wait::Tokio { rt, tx, rx } => {
                    let acq = if matches!(queue, Queue::Tx) {
                        &*tx
                    } else {
                        &*rx
                    };
                    let read = async { tokio::time::timeout(SLICE, acq.read(&mut entries)).await };
                    match rt.block_on(read) {
                        Ok(read) => found(read?, pool),
                        Err(_elapsed) => Found::Nothing,
                    }
                }
            };
            match got {
                Found::Completion(Some(buf)) => return Ok(buf),
                Found::Completion(None) => {
                    return Err("a completion for a buffer that is not ours".into())
                }
                Found::Error(err) => return Err(self.failed(cq, err, queue)),
                Found::Nothing => {}
            }
            idle += 1;
            if matches!(self.wait, Wait::Spin) && !idle.is_multiple_of(SPINS_PER_CHECK) {
                continue;
            }
            let since = *since.get_or_insert_with(Instant::now);
            if since.elapsed() > STALL {
                return Err(format!(
                    "{}: no completion from {} for {STALL:?}: the peer stopped answering",
                    self.link.side, self.link.peer_name
                )
                .into());
            }
        }
    }

    /// Reads the error completion waiting on `cq` and describes it.
    fn failed(
        &self,
        cq: &CompletionQueue<Context>,
        mut err: CqError<'_>,
        queue: Queue,
    ) -> super::Error {
        let what = match queue {
            Queue::Tx => "a send",
            Queue::Rx => "a receive",
        };
        // Hand the buffer back to its pool: nothing stays in flight.
        let _ = self.pool.reclaim_err(&mut err);
        let hint = match err.err {
            Errno::CANCELED | Errno::CONNRESET | Errno::NOTCONN | Errno::SHUTDOWN => {
                format!(": {} closed the connection", self.link.peer_name)
            }
            _ => String::new(),
        };
        format!(
            "{}: {what} failed with {} ({}){hint}",
            self.link.side,
            err.err,
            cq.strerror(&err)
        )
        .into()
    }

    /// Reads the transmit CQ once so that the provider makes progress while
    /// a post is refused with -FI_EAGAIN.
    fn nudge(&self, deadline: Instant) -> Res<()> {
        let now = Instant::now();
        if now > deadline {
            return Err(format!(
                "{}: the provider kept refusing to send to {} (-FI_EAGAIN) for {STALL:?}",
                self.link.side, self.link.peer_name
            )
            .into());
        }
        if now + STALL > deadline + Duration::from_millis(1) {
            // Refused for over a millisecond (a peer that is not there):
            // stop burning the CPU.
            std::thread::sleep(Duration::from_micros(200));
        }
        let mut entries: [ContextEntry; 1] = Default::default();
        let read = self.link.tx_cq.read(&mut entries)?;
        match read {
            CqRead::Completions(_) => Err("an unexpected send completion".into()),
            CqRead::Error(err) => Err(self.failed(&self.link.tx_cq, *err, Queue::Tx)),
            _ => Ok(()),
        }
    }

    /// Sends the first `len` bytes of `tx` and gives the buffer back: with
    /// `fi_inject` below the inject size (no completion), else `fi_send` and
    /// its completion. Retries while the provider says -FI_EAGAIN.
    fn send(&mut self, tx: Buffer, len: usize) -> Res<Buffer> {
        if len < self.link.inject_size {
            let mut deadline = None;
            loop {
                match self.link.ep.inject(&tx[..len], self.link.peer) {
                    Ok(()) => return Ok(tx),
                    Err(e) if e.errno() == Some(Errno::AGAIN) => {
                        self.nudge(*deadline.get_or_insert_with(|| Instant::now() + STALL))?
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let mut buf = tx;
        let mut deadline = None;
        loop {
            match self.link.ep.send_to(buf, len, self.link.peer) {
                Ok(()) => break,
                Err((back, e)) if e.is_again() => {
                    buf = back;
                    self.nudge(*deadline.get_or_insert_with(|| Instant::now() + STALL))?;
                }
                Err((_, e)) => return Err(e.into()),
            }
        }
        self.next(Queue::Tx)
    }

    /// Waits for the next message and gives its buffer back.
    fn recv(&mut self) -> Res<Buffer> {
        self.next(Queue::Rx)
    }

    /// The client's timed loop: send, wait for the echo.
    fn client_loop(&mut self, size: usize, iterations: usize) -> Res<Duration> {
        let mut tx = self.tx.take().ok_or("no transmit buffer")?;
        let start = Instant::now();
        for i in 0..iterations {
            if self.verify {
                fill(&mut tx[..size], i);
            }
            tx = self.send(tx, size)?;
            let rx = self.recv()?;
            if self.verify {
                check(&rx[..size], i, "client")?;
            }
            self.link.ep.recv(rx).map_err(libfabric::Error::from)?;
            if i % 1024 == 1023 {
                self.progress.tick("client", size, i + 1, iterations);
            }
        }
        let elapsed = start.elapsed();
        self.tx = Some(tx);
        Ok(elapsed)
    }

    /// The server's timed loop: wait for a message, echo it.
    fn server_loop(&mut self, size: usize, iterations: usize) -> Res<Duration> {
        let mut tx = self.tx.take().ok_or("no transmit buffer")?;
        let start = Instant::now();
        for i in 0..iterations {
            let rx = self.recv()?;
            if self.verify {
                check(&rx[..size], i, "server")?;
            }
            self.link.ep.recv(rx).map_err(libfabric::Error::from)?;
            if self.verify {
                fill(&mut tx[..size], i);
            }
            tx = self.send(tx, size)?;
            if i % 1024 == 1023 {
                self.progress.tick("server", size, i + 1, iterations);
            }
        }
        let elapsed = start.elapsed();
        self.tx = Some(tx);
        Ok(elapsed)
    }
}

enum Found {
    /// A completion, and the buffer it handed back.
    Completion(Option<Buffer>),
    Error(CqError<'static>),
    Nothing,
}

fn found<T: libfabric::cq::CompletionEntry>(read: CqRead<'_, T>, pool: &BufferPool) -> Found {
    match read {
        CqRead::Completions(done) => Found::Completion(pool.reclaim(&done[0])),
        CqRead::Error(err) => Found::Error(*err),
        _ => Found::Nothing,
    }
}

/// The client side of a run, after the connection: one row per size.
pub fn client(link: &Link, tx: Buffer, ctrl: &mut Control, opts: &Options) -> Res<Vec<Row>> {
    let mut d = Driver::new(link, tx, opts.mode, Progress::new(true))?;
    d.verify = opts.verify;
    let mut rows = Vec::with_capacity(opts.sizes.len());
    for &size in &opts.sizes {
        let iterations = opts.iterations_for(size);
        ctrl.send(Kind::Sync, size as u64, iterations as u64, &[])?;
        ctrl.expect(Kind::SyncAck)?;
        let elapsed = d.client_loop(size, iterations)?;
        rows.push(Row {
            size,
            iterations,
            elapsed,
            xfers: 2,
        });
    }
    ctrl.send(Kind::Done, 0, 0, &[])?;
    ctrl.expect(Kind::DoneAck)?;
    Ok(rows)
}

/// The server side of a run, after the connection: echoes whatever sizes
/// the client asks for. `flags` are those of the client's `Hello`.
pub fn server(
    link: &Link,
    tx: Buffer,
    ctrl: &mut Control,
    mode: Mode,
    flags: u64,
    progress: bool,
) -> Res<Vec<Row>> {
    let mut d = Driver::new(link, tx, mode, Progress::new(progress))?;
    d.verify = flags & FLAG_VERIFY != 0;
    let mut rows = Vec::new();
    loop {
        let msg = ctrl.recv()?;
        match msg.kind {
            Kind::Sync => {
                let (size, iterations) = (msg.a as usize, msg.b as usize);
                if size > d.tx.as_ref().map_or(0, |b| b.len()) {
                    return Err(format!(
                        "the client asked for {size} bytes, more than it announced"
                    )
                    .into());
                }
                ctrl.send(Kind::SyncAck, 0, 0, &[])?;
                let elapsed = d.server_loop(size, iterations)?;
                rows.push(Row {
                    size,
                    iterations,
                    elapsed,
                    xfers: 2,
                });
            }
            Kind::Done => {
                ctrl.send(Kind::DoneAck, 0, 0, &[])?;
                return Ok(rows);
            }
            other => return Err(format!("unexpected {other:?} from {}", link.peer_name).into()),
        }
    }
}
