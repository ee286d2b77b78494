//! `async_latency`: how long asynchronous port events take to reach user
//! space, measured on link flaps of the network device under a soft-RoCE
//! device. The C counterpart is `tests/rxe/async_latency.c`; both print the
//! same lines so that `tests/rxe/bench.sh` can compare them.
//!
//! ```text
//! async_latency -d DEVICE -i IFNAME [-n FLAPS]
//!   -d DEVICE   RDMA device to watch, e.g. rxe0
//!   -i IFNAME   network device under it, e.g. veth0 (taken down and up!)
//!   -n FLAPS    number of down/up cycles (default 20)
//! ```
//!
//! The link is switched with one rtnetlink request (`RTM_NEWLINK`, no
//! process is started), and the asynchronous event fd is waited on with
//! `poll(2)`. For each event the program takes `CLOCK_MONOTONIC` at these
//! points:
//!
//! - `trigger`: before the netlink request is sent; the kernel takes the link
//!   down or up and rxe queues `PORT_ERR` / `PORT_ACTIVE`;
//! - `wake`: when `poll` returns with the fd readable;
//! - `read`: when the event has been read (`ibv_get_async_event`, here
//!   [`Context::try_get_async_event`], which also resolves the element);
//! - `acked`: when the acknowledgement returned (`ibv_ack_async_event`, here
//!   [`AsyncEvent::ack`](ibverbs_async::AsyncEvent::ack)).
//!
//! It prints the medians of `read - wake` (reading), `acked - read`
//! (acknowledging), `acked - wake` (user-space cost of one event), and of
//! `wake - trigger` for the first event after each link change (the kernel's
//! link change and event delivery, the same code for C and Rust), and the
//! total time of all flaps divided by their number. It needs root; the policy routes through the
//! device vanish when it goes down and must be restored afterwards.

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ibverbs_async::{Context, EventType};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{self, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol};

const USAGE: &str = "usage: async_latency -d DEVICE -i IFNAME [-n FLAPS]";

struct Options {
    device: String,
    ifname: String,
    flaps: u32,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
    let (mut device, mut ifname, mut flaps) = (None, None, 20u32);
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-d" => device = Some(args.next().ok_or("-d needs a device name")?),
            "-i" => ifname = Some(args.next().ok_or("-i needs an interface name")?),
            "-n" => {
                let v = args.next().ok_or("-n needs a number")?;
                flaps = v
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("-n: {v:?} is not a positive number"))?;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Options {
        device: device.ok_or("-d DEVICE is required")?,
        ifname: ifname.ok_or("-i IFNAME is required")?,
        flaps,
    })
}

/// Sets a network interface up or down through rtnetlink.
struct Link {
    sock: OwnedFd,
    index: i32,
    seq: u32,
}

const RTM_NEWLINK: u16 = 16;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const IFF_UP: u32 = 1;

impl Link {
    fn open(ifname: &str) -> Result<Link, String> {
        let path = format!("/sys/class/net/{ifname}/ifindex");
        let index = std::fs::read_to_string(&path)
            .map_err(|e| format!("{path}: {e}"))?
            .trim()
            .parse()
            .map_err(|_| format!("{path}: not a number"))?;
        let sock = socket::socket(
            AddressFamily::Netlink,
            socket::SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRoute,
        )
        .map_err(|e| format!("netlink socket: {e}"))?;
        socket::connect(sock.as_raw_fd(), &NetlinkAddr::new(0, 0))
            .map_err(|e| format!("netlink connect: {e}"))?;
        Ok(Link {
            sock,
            index,
            seq: 0,
        })
    }

    /// `ip link set IFNAME up|down`, waiting for the kernel's answer.
    fn set_up(&mut self, up: bool) -> Result<(), String> {
        self.seq += 1;
        let mut msg = Vec::with_capacity(32);
        // struct nlmsghdr
        msg.extend_from_slice(&32u32.to_ne_bytes());
        msg.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
        msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
        msg.extend_from_slice(&self.seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        // struct ifinfomsg: family, pad, type, index, flags, change
        msg.extend_from_slice(&[0, 0, 0, 0]);
        msg.extend_from_slice(&self.index.to_ne_bytes());
        msg.extend_from_slice(&(if up { IFF_UP } else { 0 }).to_ne_bytes());
        msg.extend_from_slice(&IFF_UP.to_ne_bytes());
        socket::send(self.sock.as_raw_fd(), &msg, MsgFlags::empty())
            .map_err(|e| format!("netlink send: {e}"))?;
        let mut buf = [0u8; 1024];
        loop {
            let n = socket::recv(self.sock.as_raw_fd(), &mut buf, MsgFlags::empty())
                .map_err(|e| format!("netlink recv: {e}"))?;
            if n < 20 {
                return Err("short netlink answer".into());
            }
            let kind = u16::from_ne_bytes([buf[4], buf[5]]);
            let seq = u32::from_ne_bytes([buf[8], buf[9], buf[10], buf[11]]);
            if kind != NLMSG_ERROR || seq != self.seq {
                continue;
            }
            let err = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
            if err != 0 {
                return Err(format!(
                    "setting the link {}: {}",
                    if up { "up" } else { "down" },
                    nix::errno::Errno::from_raw(-err)
                ));
            }
            return Ok(());
        }
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

#[derive(Default)]
struct Samples {
    read: Vec<f64>,
    ack: Vec<f64>,
    read_ack: Vec<f64>,
    wake_down: Vec<f64>,
    wake_up: Vec<f64>,
    port_err: u32,
    port_active: u32,
    other: u32,
}

/// Reads one event after `poll` said the fd is readable; returns its type
/// and records its timings. `None` when another reader took it (EAGAIN).
fn read_one(ctx: &Context, wake: Instant, s: &mut Samples) -> Result<Option<EventType>, String> {
    let Some(event) = ctx.try_get_async_event().map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let read = Instant::now();
    let info = event.ack();
    let acked = Instant::now();
    s.read.push(micros(read - wake));
    s.ack.push(micros(acked - read));
    s.read_ack.push(micros(acked - wake));
    match info.event_type {
        EventType::PortErr => s.port_err += 1,
        EventType::PortActive => s.port_active += 1,
        _ => s.other += 1,
    }
    Ok(Some(info.event_type))
}

/// Waits up to `limit` for the fd to be readable; returns the wake-up time.
fn wait(ctx: &Context, limit: Duration) -> Result<Option<Instant>, String> {
    // SAFETY: the context's event fd, open while `ctx` is; it is only
    // polled, never read (reading it would take an event from libibverbs).
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(ctx.async_fd().as_raw_fd()) };
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    let timeout = PollTimeout::try_from(limit).unwrap_or(PollTimeout::MAX);
    match poll(&mut fds, timeout) {
        Ok(0) => Ok(None),
        Ok(_) => Ok(Some(Instant::now())),
        Err(nix::errno::Errno::EINTR) => Ok(Some(Instant::now())),
        Err(e) => Err(format!("poll: {e}")),
    }
}

fn run(o: &Options) -> Result<(), String> {
    let ctx = Context::open(&o.device).map_err(|e| format!("{}: {e}", o.device))?;
    let mut link = Link::open(&o.ifname)?;
    let mut s = Samples::default();
    // Events left over from before: not measured.
    while ctx
        .try_get_async_event()
        .map_err(|e| e.to_string())?
        .is_some()
    {}

    let start = Instant::now();
    for _ in 0..o.flaps {
        for (up, expected) in [(false, EventType::PortErr), (true, EventType::PortActive)] {
            let trigger = Instant::now();
            link.set_up(up)?;
            // Read until the event this change causes; a late second
            // PORT_ACTIVE of the previous change may come first.
            loop {
                let wake = wait(&ctx, Duration::from_secs(10))?.ok_or_else(|| {
                    format!(
                        "no {expected} within 10 s of setting the link {}",
                        if up { "up" } else { "down" }
                    )
                })?;
                if read_one(&ctx, wake, &mut s)? == Some(expected) {
                    let w = micros(wake - trigger);
                    if up {
                        s.wake_up.push(w);
                    } else {
                        s.wake_down.push(w);
                    }
                    break;
                }
            }
        }
    }
    let total = start.elapsed();
    // The events that trail the last change (rxe may report PORT_ACTIVE
    // more than once), counted but not part of the total time.
    while let Some(wake) = wait(&ctx, Duration::from_millis(300))? {
        read_one(&ctx, wake, &mut s)?;
    }
    let events = s.port_err + s.port_active + s.other;
    println!(
        "{} flaps of {}: {events} events on {} ({} PORT_ERR, {} PORT_ACTIVE, {} other) in {:.3} s",
        o.flaps,
        o.ifname,
        o.device,
        s.port_err,
        s.port_active,
        s.other,
        total.as_secs_f64()
    );
    println!(
        "median_us read {:.2} ack {:.2} read_ack {:.2} down_to_wake {:.1} up_to_wake {:.1}",
        median(&mut s.read),
        median(&mut s.ack),
        median(&mut s.read_ack),
        median(&mut s.wake_down),
        median(&mut s.wake_up)
    );
    println!(
        "total_us_per_flap {:.1}",
        micros(total) / f64::from(o.flaps)
    );
    if s.port_err < o.flaps || s.port_active < o.flaps {
        return Err(format!(
            "expected at least {} PORT_ERR and PORT_ACTIVE events",
            o.flaps
        ));
    }
    Ok(())
}

fn main() -> ExitCode {
    let options = match parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("async_latency: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("async_latency: {msg}");
            ExitCode::FAILURE
        }
    }
}
