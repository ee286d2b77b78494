//! Pingpong over tcp loopback: libfabric's `fi_pingpong` against the Rust
//! pingpong (the code of `examples/pingpong.rs`, which this binary runs as
//! `bench pingpong ...`). Each run is a server process and a client process
//! with the same provider, endpoint type, size and iteration count; the
//! client's table gives usec/xfer.

use std::fs;
use std::io;
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The C program compared against (package libfabric-bin).
pub const FI_PINGPONG: &str = "fi_pingpong";
/// How long the server may take to start listening.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    C,
    Rust,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::C => "fi_pingpong",
            Tool::Rust => "Rust pingpong",
        }
    }
}

/// What both tools are asked to do.
#[derive(Debug, Clone)]
pub struct Run {
    pub provider: String,
    pub size: usize,
    pub iterations: usize,
    /// A client that has not finished after this long is stopped.
    pub timeout: Duration,
}

/// Whether `fi_pingpong` can be started.
pub fn c_available() -> bool {
    Command::new(FI_PINGPONG)
        .arg("-h")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind(("0.0.0.0", 0))?.local_addr()?.port())
}

/// Whether some socket listens on `port` (from /proc/net/tcp and tcp6,
/// so that the server is not disturbed by a probe connection).
fn listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|file| {
        fs::read_to_string(file).is_ok_and(|text| {
            text.lines().skip(1).any(|line| {
                let cols: Vec<&str> = line.split_whitespace().collect();
                cols.len() > 3
                    && cols[3] == "0A"
                    && cols[1]
                        .rsplit(':')
                        .next()
                        .and_then(|p| u16::from_str_radix(p, 16).ok())
                        == Some(port)
            })
        })
    })
}

fn command(tool: Tool, run: &Run, port: u16, server: bool) -> io::Result<Command> {
    let (size, iters, port) = (
        run.size.to_string(),
        run.iterations.to_string(),
        port.to_string(),
    );
    let mut cmd = match tool {
        Tool::C => Command::new(FI_PINGPONG),
        Tool::Rust => {
            let mut cmd = Command::new(std::env::current_exe()?);
            cmd.args(["pingpong", "-c", "spin"]);
            cmd
        }
    };
    cmd.args(["-p", &run.provider, "-e", "msg", "-I", &iters, "-S", &size]);
    match (tool, server) {
        (Tool::C, true) => cmd.args(["-B", &port]),
        (Tool::Rust, true) => cmd.args(["-s", "-P", &port]),
        (_, false) => cmd.args(["-P", &port, "127.0.0.1"]),
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cpu) = cpu_for(server) {
        pin(&mut cmd, cpu);
    }
    Ok(cmd)
}

/// The CPU a side runs on: server and client each get one of the first two
/// CPUs this process may use. Busy-polling processes that the scheduler
/// moves onto one CPU take turns instead of answering each other, which
/// makes the latency of either tool swing by a factor of ten.
fn cpu_for(server: bool) -> Option<usize> {
    // SAFETY: sched_getaffinity(2) fills the cpu_set_t it is given (of the
    // size given) for the calling thread (pid 0); an all-zero cpu_set_t is a
    // valid empty set.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        set
    };
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads bit i < CPU_SETSIZE of a valid set.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .take(2)
        .collect();
    (cpus.len() == 2).then(|| cpus[usize::from(!server)])
}

fn pin(cmd: &mut Command, cpu: usize) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec, where
    // only async-signal-safe calls are allowed: it builds a cpu_set_t on the
    // stack (CPU_ZERO/CPU_SET are plain bit operations) and calls
    // sched_setaffinity(2), a system call. It allocates nothing and takes no
    // lock.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_ZERO(&mut set);
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            Ok(())
        });
    }
}

/// Waits for `child` up to `timeout`, stopping it if it runs longer.
fn finish(mut child: Child, timeout: Duration, what: &str) -> Result<Output, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what} did not finish within {timeout:?}"));
            }
            Err(e) => return Err(format!("{what}: {e}")),
        }
    }
    child.wait_with_output().map_err(|e| format!("{what}: {e}"))
}

fn describe(out: &Output) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    format!(
        "{}; stderr: {}; stdout: {}",
        out.status,
        text(&out.stderr),
        text(&out.stdout)
    )
}

/// The usec/xfer of the first row of fi_pingpong's table (both tools print
/// the same format; a run has one size).
pub fn parse_usec(stdout: &str) -> Option<f64> {
    stdout.lines().find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let row = cols.len() == 8 && cols[2].starts_with(['=', '+', '-']);
        row.then(|| cols[6].parse().ok()).flatten()
    })
}

/// One run of one tool: a server and a client process. Returns the
/// client's usec/xfer.
pub fn run_once(tool: Tool, run: &Run) -> Result<f64, String> {
    let port = free_port().map_err(|e| format!("no free port: {e}"))?;
    let mut server = command(tool, run, port, true)
        .and_then(|mut c| c.spawn())
        .map_err(|e| format!("starting the {} server: {e}", tool.name()))?;
    let start = Instant::now();
    while !listening(port) {
        if let Ok(Some(_)) = server.try_wait() {
            let out = finish(server, Duration::ZERO, "server")?;
            return Err(format!(
                "the {} server exited: {}",
                tool.name(),
                describe(&out)
            ));
        }
        if start.elapsed() > LISTEN_TIMEOUT {
            let _ = server.kill();
            let _ = server.wait();
            return Err(format!(
                "the {} server did not listen within {LISTEN_TIMEOUT:?}",
                tool.name()
            ));
        }
        thread::sleep(Duration::from_millis(5));
    }
    let client = match command(tool, run, port, false).and_then(|mut c| c.spawn()) {
        Ok(c) => c,
        Err(e) => {
            let _ = server.kill();
            let _ = server.wait();
            return Err(format!("starting the {} client: {e}", tool.name()));
        }
    };
    let client = finish(client, run.timeout, &format!("the {} client", tool.name()));
    let server = finish(
        server,
        Duration::from_secs(15),
        &format!("the {} server", tool.name()),
    );
    let client = client?;
    if !client.status.success() {
        return Err(format!(
            "the {} client failed: {}",
            tool.name(),
            describe(&client)
        ));
    }
    let server = server?;
    if !server.status.success() {
        return Err(format!(
            "the {} server failed: {}",
            tool.name(),
            describe(&server)
        ));
    }
    let stdout = String::from_utf8_lossy(&client.stdout);
    parse_usec(&stdout)
        .ok_or_else(|| format!("no result row in the {} output:\n{stdout}", tool.name()))
}
