//! `asyncwatch`: prints the asynchronous events of RDMA devices with their
//! element, like rdma-core's `ibv_asyncwatch`, until interrupted.
//!
//! ```text
//! asyncwatch [-d DEVICE]... [-t SECONDS]
//!   -d DEVICE   watch this device (repeatable; default: every device)
//!   -t SECONDS  stop after this long (default: until Ctrl-C)
//! ```
//! Ctrl-C (SIGINT) or SIGTERM ends it cleanly: events already read are
//! acknowledged and every device is closed before it exits with status 0.

use ibverbs_async::{Context, DeviceList, Element};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use std::process::ExitCode;
use std::time::{Duration, Instant};

struct Options {
    devices: Vec<String>,
    limit: Option<Duration>,
}

fn usage() -> &'static str {
    "usage: asyncwatch [-d DEVICE]... [-t SECONDS]"
}

fn parse(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options = Options {
        devices: Vec::new(),
        limit: None,
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-d" | "--device" => {
                let name = args.next().ok_or("-d needs a device name")?;
                options.devices.push(name);
            }
            "-t" | "--time" => {
                let s = args.next().ok_or("-t needs a number of seconds")?;
                let secs: f64 = s
                    .parse()
                    .ok()
                    .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| format!("-t: {s:?} is not a number of seconds"))?;
                options.limit = Some(Duration::from_secs_f64(secs));
            }
            "-h" | "--help" => return Err(usage().into()),
            other => return Err(format!("unknown argument {other:?}\n{}", usage())),
        }
    }
    Ok(options)
}

fn describe(element: &Element) -> String {
    match element {
        Element::Port(port) => format!("port {port}"),
        Element::Device => "device".into(),
        other => format!("{}", other.id()),
    }
}

fn run(options: Options) -> Result<u64, String> {
    let names = if options.devices.is_empty() {
        let list = DeviceList::new().map_err(|e| e.to_string())?;
        list.names()
    } else {
        options.devices
    };
    let contexts: Vec<Context> = names
        .iter()
        .map(|n| Context::open(n).map_err(|e| format!("{n}: {e}")))
        .collect::<Result<_, _>>()?;

    // Ctrl-C and SIGTERM arrive on a signalfd polled with the event fds, so
    // that the loop ends between events, never inside one.
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGINT);
    mask.add(Signal::SIGTERM);
    mask.thread_block()
        .map_err(|e| format!("sigprocmask: {e}"))?;
    let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| format!("signalfd: {e}"))?;

    for ctx in &contexts {
        let port = ctx
            .query_port(1)
            .map_err(|e| format!("{}: {e}", ctx.name()))?;
        println!(
            "{}: {} port(s), port 1 {:?}",
            ctx.name(),
            ctx.port_count(),
            port.state()
        );
    }
    println!("waiting for events (Ctrl-C to stop)");

    let start = Instant::now();
    let mut count = 0u64;
    loop {
        let timeout = match options.limit {
            Some(limit) => match limit.checked_sub(start.elapsed()) {
                Some(left) => PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX),
                None => break,
            },
            None => PollTimeout::NONE,
        };
        let mut fds: Vec<PollFd<'_>> = contexts
            .iter()
            .map(|c| {
                // SAFETY: the context's event fd, open while `contexts` is;
                // it is only polled, never read (a read would take an event
                // from libibverbs).
                let fd = unsafe {
                    std::os::fd::BorrowedFd::borrow_raw(std::os::fd::AsRawFd::as_raw_fd(
                        &c.async_fd(),
                    ))
                };
                PollFd::new(fd, PollFlags::POLLIN)
            })
            .collect();
        fds.push(PollFd::new(
            std::os::fd::AsFd::as_fd(&signals),
            PollFlags::POLLIN,
        ));
        match poll(&mut fds, timeout) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(format!("poll: {e}")),
        }
        let interrupted = fds
            .last()
            .and_then(|f| f.revents())
            .is_some_and(|r| r.contains(PollFlags::POLLIN));
        drop(fds);
        // Drain every device: the fds are non-blocking, so read until empty.
        for ctx in &contexts {
            while let Some(event) = ctx
                .try_get_async_event()
                .map_err(|e| format!("{}: {e}", ctx.name()))?
            {
                count += 1;
                println!(
                    "{}: event {} ({}) on {}",
                    ctx.name(),
                    event.event_type(),
                    event.event_type().to_raw(),
                    describe(event.element())
                );
                // Dropping the event acknowledges it.
            }
        }
        if interrupted {
            println!("interrupted");
            break;
        }
    }
    Ok(count)
}

fn main() -> ExitCode {
    let options = match parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("asyncwatch: {msg}");
            return ExitCode::from(2);
        }
    };
    match run(options) {
        Ok(count) => {
            println!("{count} event(s)");
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("asyncwatch: {msg}");
            ExitCode::FAILURE
        }
    }
}
