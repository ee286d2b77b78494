//! Shared setup of the device tests (feature `__rxe-tests`): they run inside
//! the soft-RoCE VM of `tests/rxe/vm.sh`, where `rxe0` (on veth0,
//! 198.18.0.1) and `rxe1` (on veth1, 198.18.0.2) exist and tests run as
//! root.
#![allow(dead_code)]

use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ibverbs_async::{
    AccessFlags, AsyncEvent, ConnectOptions, Context, Cq, Error, Mr, ObjectKind, Pd, PortState, Qp,
    QpCap, QpInit, WorkCompletion,
};

/// Upper bound of every wait: rxe under TCG needs about a millisecond per
/// operation, so this only ends waits that would otherwise hang.
pub const WAIT: Duration = Duration::from_secs(10);

const HOW_TO_RUN: &str = "these tests need the soft-RoCE devices rxe0 and rxe1 of the test VM; \
     run them through tests/rxe/vm.sh: build with \
     `cargo test -p ibverbs-async --features __rxe-tests --no-run`, then \
     `tests/rxe/vm.sh run \"$PWD/tests/rxe/run-binaries.sh\" <test binaries>`";

/// The device the tests call `name` ("rxe0" or "rxe1"): the same names, or
/// the devices of `IBV_TEST_DEVICES` (for example `siw0,siw1`, the
/// soft-iWARP devices of the VM), in that order.
pub fn device(name: &str) -> String {
    let mapped = std::env::var("IBV_TEST_DEVICES").ok().and_then(|list| {
        let mut it = list.split(',');
        match name {
            "rxe0" => it.next().map(str::to_string),
            "rxe1" => it.nth(1).map(str::to_string),
            _ => None,
        }
    });
    mapped.unwrap_or_else(|| name.to_string())
}

/// Whether the devices are iWARP (`IBV_TEST_IWARP=1`): queue pairs connect
/// only through rdma_cm there, with no GID table of RoCE addresses.
pub fn is_iwarp() -> bool {
    std::env::var("IBV_TEST_IWARP").as_deref() == Ok("1")
}

/// The name of the running test (libtest names its thread after it).
pub fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("unknown test")
        .to_string()
}

/// Returns early, printing a typed skip, from a test that needs what
/// iWARP devices do not have.
#[macro_export]
macro_rules! skip_on_iwarp {
    ($why:expr) => {
        if $crate::common::is_iwarp() {
            println!(
                "SKIP {}: iWARP device {}: {}",
                $crate::common::test_name(),
                $crate::common::device("rxe0"),
                $why
            );
            return;
        }
    };
}

/// Opens a device of the VM, failing with instructions anywhere else.
pub fn open(name: &str) -> Context {
    if std::env::var_os("RXE_GUEST").is_none() {
        panic!("RXE_GUEST is not set: {HOW_TO_RUN}");
    }
    let name = device(name);
    Context::open(&name).unwrap_or_else(|e| panic!("opening {name}: {e}; {HOW_TO_RUN}"))
}

/// Connection options for port 1 with the IPv4-mapped RoCE v2 GID, read
/// from the device's GID table.
pub fn opts(ctx: &Context) -> ConnectOptions {
    let gid = ctx
        .ipv4_gid(1)
        .unwrap()
        .unwrap_or_else(|| panic!("{}: no IPv4-mapped RoCE v2 GID on port 1", ctx.name()));
    ConnectOptions::new(1, gid.index)
}

/// `args` with the netdevs of `IBV_TEST_NETDEVS` (for example
/// `veth2,veth3`) in place of veth0 and veth1.
fn netdevs(args: &str) -> String {
    let Ok(list) = std::env::var("IBV_TEST_NETDEVS") else {
        return args.to_string();
    };
    let mut it = list.split(',');
    let (a, b) = (it.next().unwrap_or("veth0"), it.next().unwrap_or("veth1"));
    args.split_whitespace()
        .map(|w| match w {
            "veth0" => a,
            "veth1" => b,
            other => other,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `ip ARGS`, which must succeed.
pub fn ip(args: &str) {
    let args = &netdevs(args);
    let status = Command::new("ip")
        .args(args.split_whitespace())
        .status()
        .unwrap_or_else(|e| panic!("running ip {args}: {e}"));
    assert!(status.success(), "ip {args}: {status}");
}

/// Runs `ip ARGS`, ignoring failure (cleanup).
pub fn ip_quiet(args: &str) {
    let args = &netdevs(args);
    let _ = Command::new("ip")
        .args(args.split_whitespace())
        .stderr(std::process::Stdio::null())
        .status();
}

/// Aborts the whole test process if it is still alive after `limit`: a
/// deadlock then fails the run instead of hanging it.
pub struct Watchdog(Arc<AtomicBool>);

pub fn watchdog(what: &'static str, limit: Duration) -> Watchdog {
    let done = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&done);
    std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < limit {
            if flag.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !flag.load(Ordering::SeqCst) {
            // Straight to fd 2: the test harness captures eprintln! output
            // (also of threads a test spawns) and would lose it on abort.
            let _ = writeln!(
                std::io::stderr(),
                "DEADLOCK: {what} did not finish within {limit:?}"
            );
            std::process::abort();
        }
    });
    Watchdog(done)
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Acknowledges every event already queued on `ctx`.
pub fn drain_events(ctx: &Context) {
    while let Some(event) = ctx.try_get_async_event().unwrap() {
        eprintln!("{}: drained {event}", ctx.name());
    }
}

/// Waits for the first event that `pred` accepts; acknowledges the others
/// on the way. Panics after [`WAIT`].
pub fn wait_event<'c>(
    ctx: &'c Context,
    what: &str,
    mut pred: impl FnMut(&AsyncEvent<'_>) -> bool,
) -> AsyncEvent<'c> {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match ctx.get_async_event_timeout(left).unwrap() {
            Some(event) if pred(&event) => return event,
            Some(event) => eprintln!("{}: skipped {event} waiting for {what}", ctx.name()),
            None => panic!("{}: no {what} within {WAIT:?}", ctx.name()),
        }
    }
}

/// Waits until port 1 is ACTIVE and, on RoCE, has its IPv4-mapped GID
/// again (iWARP devices have no such GID).
pub fn wait_port_ready(ctx: &Context) {
    let deadline = Instant::now() + WAIT;
    loop {
        let active = ctx.query_port(1).unwrap().state() == PortState::Active;
        if active && (is_iwarp() || ctx.ipv4_gid(1).unwrap().is_some()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{}: port 1 not ready",
            ctx.name()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Asserts that `err` is [`Error::InUse`] for an object of `kind`.
#[track_caller]
pub fn assert_in_use(err: &Error, kind: ObjectKind) {
    assert!(
        matches!(err, Error::InUse { object, .. } if *object == kind),
        "expected the {kind} to be in use: {err}"
    );
}

/// Polls `cq` until it gave `n` completions. Panics after [`WAIT`].
pub fn poll_n(cq: &Cq, n: usize) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + WAIT;
    let mut out = Vec::new();
    let mut wc = [WorkCompletion::default(); 16];
    while out.len() < n {
        let got = cq.poll(&mut wc).unwrap();
        out.extend_from_slice(got);
        if got.is_empty() {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} completions within {WAIT:?}: {out:?}",
                out.len()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    out
}

/// One end of a reliable connection.
pub struct End {
    pub ctx: Context,
    pub pd: Pd,
    pub cq: Cq,
    pub qp: Qp,
    pub mr: Mr,
}

pub const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

/// A QP with one CQ for both queues and a 4 KiB region on `ctx`.
pub fn end(ctx: &Context) -> End {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = pd
        .create_qp(&QpInit::rc(&cq, &cq).cap(QpCap::new(32, 32)))
        .unwrap();
    let mr = pd.reg_mr(4096, ACCESS).unwrap();
    End {
        ctx: ctx.clone(),
        pd,
        cq,
        qp,
        mr,
    }
}

/// Connects two QPs (of one or two contexts) to each other.
pub fn connect(a: &Qp, a_ctx: &Context, b: &Qp, b_ctx: &Context) {
    let oa = opts(a_ctx).psn(0x1234);
    let ob = opts(b_ctx).psn(0x4321);
    Qp::connect_pair(a, &oa, b, &ob).unwrap();
}

/// Restores what taking veth0 (or veth1) down removed: the link itself and
/// the test bed's policy routes through the veth pair.
pub fn restore_links() {
    ip_quiet("link set veth0 up");
    ip_quiet("link set veth1 up");
    // Taking a link down removed the policy routes through it: put back
    // the pair's own (IBV_TEST_ROUTES, ';'-separated, for other devices).
    match std::env::var("IBV_TEST_ROUTES") {
        Ok(routes) => {
            for r in routes.split(';').filter(|r| !r.trim().is_empty()) {
                let _ = Command::new("ip")
                    .args(r.split_whitespace())
                    .stderr(std::process::Stdio::null())
                    .status();
            }
        }
        Err(_) => {
            ip_quiet("route replace 198.18.0.2 dev veth0 src 198.18.0.1 table 100");
            ip_quiet("route replace 198.18.0.1 dev veth1 src 198.18.0.2 table 101");
        }
    }
}

/// One `ip -force -batch -` process fed commands through a pipe: a command
/// costs no process start (a fork takes about 0.1 s under TCG).
pub struct IpBatch {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
}

impl IpBatch {
    pub fn start() -> IpBatch {
        let mut child = Command::new("ip")
            .args(["-force", "-batch", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting ip -batch: {e}"));
        let stdin = child.stdin.take();
        IpBatch { child, stdin }
    }

    /// Hands `cmd` (e.g. `"link set veth0 down"`) to ip, which runs it as
    /// soon as it reads the line.
    pub fn run(&mut self, cmd: &str) {
        let cmd = &netdevs(cmd);
        let stdin = self.stdin.as_mut().expect("ip -batch is running");
        writeln!(stdin, "{cmd}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("ip -batch: {cmd}: {e}"));
    }

    /// Ends ip's input and waits for it; panics if a command failed.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("waiting for ip -batch");
        assert!(status.success(), "ip -batch: {status}");
    }
}

impl Drop for IpBatch {
    fn drop(&mut self) {
        if self.stdin.take().is_some() {
            let _ = self.child.wait();
        }
    }
}
