//! The ping-pong: control messages over the data endpoint, the timed loop,
//! and the four ways of waiting for a completion.
//!
//! Protocol: the client sends HELLO (largest size, flags, and for RDM its own
//! address), the server answers HELLO_ACK. For each size the client sends
//! SYNC (size, iterations) and waits for SYNC_ACK; then both run the timed
//! loop: the client sends and waits for the echo, the server waits and
//! echoes. DONE / DONE_ACK end the run. Every receive is posted before the
//! peer can send, and buffers are reused: nothing is allocated in the loop.

use super::cli::{Mode, Options};
use super::report::Row;
use super::setup::{Link, CTRL_LEN};
use super::Res;
use libfabric::cq::{Context, ContextEntry, Read as CqRead};
use libfabric::eq::ErrDataBuf;
use libfabric::tokio::AsyncCompletionQueue;
use libfabric::wait::Waiter;
use libfabric::{Buffer, BufferPool, CompletionQueue, Errno};
use std::time::{Duration, Instant};

/// A wait for one completion gives up after this long without one.
const STALL: Duration = Duration::from_secs(10);
/// Blocking waits wake up this often to check for a stall.
const SLICE: Duration = Duration::from_millis(100);
/// Busy-polling checks the clock once per this many empty reads.
const SPINS_PER_CHECK: u32 = 4096;
/// A progress line on stderr at most this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(3);

const MAGIC: u32 = u32::from_le_bytes(*b"PPRS");
const FLAG_VERIFY: u64 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Hello = 1,
    HelloAck,
    Sync,
    SyncAck,
    Done,
    DoneAck,
}

impl Kind {
    fn from_raw(raw: u32) -> Option<Self> {
        [
            Kind::Hello,
            Kind::HelloAck,
            Kind::Sync,
            Kind::SyncAck,
            Kind::Done,
            Kind::DoneAck,
        ]
        .into_iter()
        .find(|k| *k as u32 == raw)
    }
}

/// A decoded control message.
struct Ctrl {
    kind: Kind,
    a: u64,
    b: u64,
    name: Vec<u8>,
}

fn encode(buf: &mut [u8], kind: Kind, a: u64, b: u64, name: &[u8]) -> Res<()> {
    if 28 + name.len() > CTRL_LEN {
        return Err("an endpoint address too long for a control message".into());
    }
    buf[..4].copy_from_slice(&MAGIC.to_le_bytes());
    buf[4..8].copy_from_slice(&(kind as u32).to_le_bytes());
    buf[8..16].copy_from_slice(&a.to_le_bytes());
    buf[16..24].copy_from_slice(&b.to_le_bytes());
    buf[24..28].copy_from_slice(&(name.len() as u32).to_le_bytes());
    buf[28..28 + name.len()].copy_from_slice(name);
    Ok(())
}

fn decode(buf: &[u8]) -> Res<Ctrl> {
    let word = |at: usize| u32::from_le_bytes(buf[at..at + 4].try_into().unwrap_or_default());
    let long = |at: usize| u64::from_le_bytes(buf[at..at + 8].try_into().unwrap_or_default());
    let kind = Kind::from_raw(word(4)).filter(|_| word(0) == MAGIC);
    let name_len = (word(24) as usize).min(CTRL_LEN - 28);
    match kind {
        Some(kind) => Ok(Ctrl {
            kind,
            a: long(8),
            b: long(16),
            name: buf[28..28 + name_len].to_vec(),
        }),
        None => Err("the peer sent something that is not a pingpong control message".into()),
    }
}

/// fi_pingpong's data pattern: the alphabet over and over, message `iter`
/// starting at a different letter.
const ALPHABET: &[u8; 62] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// The pattern of message `iter`, 62 bytes at a time.
fn pattern(iter: usize) -> impl Iterator<Item = &'static [u8]> {
    let start = iter * 7 % ALPHABET.len();
    std::iter::once(&ALPHABET[start..]).chain(std::iter::repeat(&ALPHABET[..]))
}

fn fill(buf: &mut [u8], iter: usize) {
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

fn check(buf: &[u8], iter: usize, side: &str) -> Res<()> {
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

    fn tick(&mut self, side: &str, size: usize, done: usize, iterations: usize) {
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
    wait: Wait<'l>,
    /// Two slots of the largest size: one to send from, one to receive into.
    pool: Option<BufferPool>,
    tx: Option<Buffer>,
    peer: libfabric::cq::Addr,
    verify: bool,
    progress: Progress,
}

impl<'l> Driver<'l> {
    fn new(link: &'l Link, mode: Mode, verify: bool, progress: Progress) -> Res<Self> {
        let wait = match mode {
            Mode::Spin => Wait::Spin,
            Mode::Sread => Wait::Sread,
            Mode::Fd => Wait::Fd {
                tx: Waiter::new(&link.fabric, &[&link.tx_cq])?,
                rx: Waiter::new(&link.fabric, &[&link.rx_cq])?,
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
            wait,
            pool: None,
            tx: None,
            peer: link.peer,
            verify,
            progress,
        })
    }

    /// Allocates the data buffers and posts the receive.
    fn open_buffers(&mut self, max_size: usize) -> Res<()> {
        let pool = BufferPool::new(&self.link.domain, 2, max_size.max(CTRL_LEN))?;
        let rx = pool.take().ok_or("no receive buffer")?;
        self.tx = Some(pool.take().ok_or("no transmit buffer")?);
        self.pool = Some(pool);
        self.link.ep.recv(rx)?;
        Ok(())
    }

    /// Waits for the next completion of one queue; `None`: no time limit.
    fn next(&mut self, queue: Queue, stall: Option<Duration>) -> Res<ContextEntry> {
        let cq = match queue {
            Queue::Tx => &self.link.tx_cq,
            Queue::Rx => &self.link.rx_cq,
        };
        let mut entries: [ContextEntry; 1] = Default::default();
        let mut idle = 0u32;
        let mut since = None;
        loop {
            let got = match &mut self.wait {
                Wait::Spin => found(cq.read(&mut entries)?),
                Wait::Sread => found(cq.sread(&mut entries, Some(SLICE))?),
                Wait::Fd { tx, rx } => match found(cq.read(&mut entries)?) {
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
                        Ok(read) => found(read?),
                        Err(_elapsed) => Found::Nothing,
                    }
                }
            };
            match got {
                Found::Completion => return Ok(std::mem::take(&mut entries[0])),
                Found::Error => return Err(self.failed(cq, queue)),
                Found::Nothing => {}
            }
            idle += 1;
            if matches!(self.wait, Wait::Spin) && idle % SPINS_PER_CHECK != 0 {
                continue;
            }
            let since = *since.get_or_insert_with(Instant::now);
            if stall.is_some_and(|s| since.elapsed() > s) {
                return Err(format!(
                    "{}: no completion from {} for {STALL:?}: the peer stopped answering",
                    self.link.side, self.link.peer_name
                )
                .into());
            }
        }
    }

    /// Reads the error completion waiting on `cq` and describes it.
    fn failed(&self, cq: &CompletionQueue<Context>, queue: Queue) -> super::Error {
        let what = match queue {
            Queue::Tx => "a send",
            Queue::Rx => "a receive",
        };
        let mut data = ErrDataBuf::new();
        match cq.read_err(&mut data) {
            Ok(Some(mut err)) => {
                // Hand the buffer back to its pool: nothing stays in flight.
                let _ = self.pool.as_ref().and_then(|p| p.reclaim_err(&mut err));
                let _ = self.link.ctrl.reclaim_err(&mut err);
                let hint = match err.err {
                    Errno::Canceled | Errno::ConnReset | Errno::NotConn | Errno::Shutdown => {
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
            Ok(None) => format!("{}: {what} failed", self.link.side).into(),
            Err(e) => e.into(),
        }
    }

    /// The buffer a completion hands back.
    fn reclaim(&self, entry: &mut ContextEntry) -> Res<Buffer> {
        let from_data = self.pool.as_ref().and_then(|p| p.reclaim(entry));
        from_data
            .or_else(|| self.link.ctrl.reclaim(entry))
            .ok_or_else(|| "a completion for a buffer that is not ours".into())
    }

    /// Reads the transmit CQ once so that the provider makes progress while
    /// a post is refused with -FI_EAGAIN.
    fn nudge(&self, deadline: Instant) -> Res<()> {
        let now = Instant::now();
        if now > deadline {
            return Err(format!(
                "{}: {} does not answer: is `pingpong -s` running there?",
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
        match self.link.tx_cq.read(&mut entries)? {
            CqRead::Completions(_) => Err("an unexpected send completion".into()),
            CqRead::ErrorPending => Err(self.failed(&self.link.tx_cq, Queue::Tx)),
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
                match self.link.ep.inject(&tx[..len], self.peer) {
                    Ok(()) => return Ok(tx),
                    Err(e) if e.errno() == Some(Errno::Again) => {
                        self.nudge(*deadline.get_or_insert_with(|| Instant::now() + STALL))?
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let mut buf = tx;
        let mut deadline = None;
        loop {
            match self.link.ep.send_to(buf, len, self.peer) {
                Ok(()) => break,
                Err(e) if e.is_again() => {
                    buf = e.buffer;
                    self.nudge(*deadline.get_or_insert_with(|| Instant::now() + STALL))?;
                }
                Err(e) => return Err(e.error.into()),
            }
        }
        let mut done = self.next(Queue::Tx, Some(STALL))?;
        self.reclaim(&mut done)
    }

    /// Waits for the next message and gives its buffer back.
    fn recv(&mut self, stall: Option<Duration>) -> Res<Buffer> {
        let mut done = self.next(Queue::Rx, stall)?;
        self.reclaim(&mut done)
    }

    fn send_ctrl(&mut self, kind: Kind, a: u64, b: u64, name: &[u8]) -> Res<()> {
        let mut tx = self.tx.take().ok_or("no transmit buffer")?;
        encode(&mut tx, kind, a, b, name)?;
        self.tx = Some(self.send(tx, CTRL_LEN)?);
        Ok(())
    }

    /// Waits for a control message; posts the receive again unless it ends
    /// the run (or arrived in the control buffer).
    fn recv_ctrl(&mut self, stall: Option<Duration>) -> Res<Ctrl> {
        let rx = self.recv(stall)?;
        let ctrl = decode(&rx)?;
        let last = matches!(ctrl.kind, Kind::Hello | Kind::Done | Kind::DoneAck);
        if !last {
            self.link.ep.recv(rx)?;
        }
        Ok(ctrl)
    }

    fn expect_ctrl(&mut self, kind: Kind) -> Res<Ctrl> {
        let ctrl = self.recv_ctrl(Some(STALL))?;
        if ctrl.kind != kind {
            return Err(format!(
                "expected {kind:?} from {}, got {:?}",
                self.link.peer_name, ctrl.kind
            )
            .into());
        }
        Ok(ctrl)
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
            let rx = self.recv(Some(STALL))?;
            if self.verify {
                check(&rx[..size], i, "client")?;
            }
            self.link.ep.recv(rx)?;
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
            let rx = self.recv(Some(STALL))?;
            if self.verify {
                check(&rx[..size], i, "server")?;
            }
            self.link.ep.recv(rx)?;
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
    Completion,
    Error,
    Nothing,
}

fn found<T>(read: CqRead<'_, T>) -> Found {
    match read {
        CqRead::Completions(_) => Found::Completion,
        CqRead::ErrorPending => Found::Error,
        _ => Found::Nothing,
    }
}

/// The client side of a run: one row per size.
pub fn client(link: &Link, opts: &Options, progress: Progress) -> Res<Vec<Row>> {
    let mut d = Driver::new(link, opts.mode, opts.verify, progress)?;
    d.open_buffers(opts.max_size())?;
    // An RDM server learns where the client is from the HELLO.
    let name = if link.av.is_some() {
        link.ep.name()?
    } else {
        Vec::new()
    };
    let flags = if opts.verify { FLAG_VERIFY } else { 0 };
    d.send_ctrl(Kind::Hello, opts.max_size() as u64, flags, &name)?;
    d.expect_ctrl(Kind::HelloAck)?;
    let mut rows = Vec::with_capacity(opts.sizes.len());
    for &size in &opts.sizes {
        let iterations = opts.iterations_for(size);
        d.send_ctrl(Kind::Sync, size as u64, iterations as u64, &[])?;
        d.expect_ctrl(Kind::SyncAck)?;
        let elapsed = d.client_loop(size, iterations)?;
        rows.push(Row {
            size,
            iterations,
            elapsed,
        });
    }
    d.send_ctrl(Kind::Done, 0, 0, &[])?;
    d.expect_ctrl(Kind::DoneAck)?;
    Ok(rows)
}

/// The server side of a run: waits for the client's HELLO (forever if
/// `patient`), then echoes whatever sizes the client asks for.
pub fn server(link: &Link, mode: Mode, patient: bool, progress: Progress) -> Res<Vec<Row>> {
    let mut d = Driver::new(link, mode, false, progress)?;
    let hello = d.recv_ctrl(if patient { None } else { Some(STALL) })?;
    if hello.kind != Kind::Hello {
        return Err(format!(
            "expected Hello from {}, got {:?}",
            link.peer_name, hello.kind
        )
        .into());
    }
    d.verify = hello.b & FLAG_VERIFY != 0;
    if let Some(av) = &link.av {
        d.peer = av.insert(&hello.name)?;
    }
    d.open_buffers(
        usize::try_from(hello.a).map_err(|_| "the client asked for an impossible size")?,
    )?;
    d.send_ctrl(Kind::HelloAck, 0, 0, &[])?;
    let mut rows = Vec::new();
    loop {
        let ctrl = d.recv_ctrl(Some(STALL))?;
        match ctrl.kind {
            Kind::Sync => {
                let (size, iterations) = (ctrl.a as usize, ctrl.b as usize);
                if size > d.tx.as_ref().map_or(0, |b| b.len()) {
                    return Err(format!(
                        "the client asked for {size} bytes, more than it announced"
                    )
                    .into());
                }
                d.send_ctrl(Kind::SyncAck, 0, 0, &[])?;
                let elapsed = d.server_loop(size, iterations)?;
                rows.push(Row {
                    size,
                    iterations,
                    elapsed,
                });
            }
            Kind::Done => {
                d.send_ctrl(Kind::DoneAck, 0, 0, &[])?;
                return Ok(rows);
            }
            other => return Err(format!("unexpected {other:?} from {}", link.peer_name).into()),
        }
    }
}
