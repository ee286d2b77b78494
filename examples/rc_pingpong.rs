//! `rc_pingpong`: the Rust counterpart of rdma-core's `ibv_rc_pingpong`,
//! written on `ibverbs-async`'s safe API only.
//!
//! ```text
//! rc_pingpong [OPTIONS]          start a server and wait for a connection
//! rc_pingpong [OPTIONS] HOST     connect to the server at HOST
//!
//!   -p, --port PORT       listen on / connect to TCP port PORT (default 18515)
//!   -d, --ib-dev DEV      use RDMA device DEV (default: the first one found)
//!   -i, --ib-port PORT    use port PORT of the device (default 1)
//!   -s, --size SIZE       size of the message to exchange (default 4096)
//!   -m, --mtu MTU         path MTU: 256, 512, 1024, 2048 or 4096 (default 1024)
//!   -r, --rx-depth DEPTH  receives to keep posted (default 500)
//!   -n, --iters ITERS     number of exchanges (default 1000)
//!   -e, --events          sleep on completion-channel events (default: busy poll)
//!   -g, --gid-idx INDEX   local GID index (default: the port's IPv4-mapped
//!                         RoCE v2 GID)
//!   -h, --help            print this text
//! ```
//!
//! Both sides exchange their QP number, PSN, LID and GID over TCP in the
//! same 52-byte text message as `ibv_rc_pingpong`, so either side can talk to
//! the C program. The client sends first; each side answers every message it
//! receives, with one send outstanding at a time, and receives kept posted.
//! The last two lines are `ibv_rc_pingpong`'s:
//!
//! ```text
//! 8192000 bytes in 1.02 seconds = 64.25 Mbit/sec
//! 1000 iters in 1.02 seconds = 1020.00 usec/iter
//! ```
//!
//! Exit status: 0 on success, 1 when the run failed (device, connection or a
//! completion with an error status), 2 for a bad command line.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use ibverbs_async::{
    AccessFlags, CompChannel, ConnectOptions, Context, Cq, DeviceList, Endpoint, Gid, Mr, Mtu, Qp,
    QpCap, QpInit, RecvRequest, SendRequest, WorkCompletion,
};

const USAGE: &str = "\
usage: rc_pingpong [OPTIONS]          start a server and wait for a connection
       rc_pingpong [OPTIONS] HOST     connect to the server at HOST

  -p, --port PORT       listen on / connect to TCP port PORT (default 18515)
  -d, --ib-dev DEV      use RDMA device DEV (default: the first one found)
  -i, --ib-port PORT    use port PORT of the device (default 1)
  -s, --size SIZE       size of the message to exchange (default 4096)
  -m, --mtu MTU         path MTU: 256, 512, 1024, 2048 or 4096 (default 1024)
  -r, --rx-depth DEPTH  receives to keep posted (default 500)
  -n, --iters ITERS     number of exchanges (default 1000)
  -e, --events          sleep on completion-channel events (default: busy poll)
  -g, --gid-idx INDEX   local GID index (default: the port's IPv4-mapped RoCE v2 GID)
  -h, --help            print this text
";

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

/// The exchange message: `"LLLL:QQQQQQ:PPPPPP:GGGG...GGGG"` and a NUL, as
/// `ibv_rc_pingpong` writes it (lid, qpn, psn in hex, the GID as 32 hex
/// digits in wire order).
const MSG_LEN: usize = "0000:000000:000000:00000000000000000000000000000000".len() + 1;

#[derive(Debug)]
struct Options {
    server: Option<String>,
    tcp_port: u16,
    device: Option<String>,
    ib_port: u8,
    size: usize,
    mtu: Mtu,
    rx_depth: u32,
    iters: u64,
    events: bool,
    gid_index: Option<u32>,
}

enum Parsed {
    Run(Options),
    Help,
}

fn number<T: std::str::FromStr>(opt: &str, value: Option<String>) -> Result<T, String> {
    let value = value.ok_or_else(|| format!("{opt} needs a value"))?;
    value
        .parse()
        .map_err(|_| format!("{opt}: {value:?} is not a valid number"))
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut o = Options {
        server: None,
        tcp_port: 18515,
        device: None,
        ib_port: 1,
        size: 4096,
        mtu: Mtu::Mtu1024,
        rx_depth: 500,
        iters: 1000,
        events: false,
        gid_index: None,
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        // `--name=value` is accepted as well as `--name value`.
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next());
        match name.as_str() {
            "-p" | "--port" => o.tcp_port = number(&name, value())?,
            "-d" | "--ib-dev" => o.device = Some(value().ok_or("-d needs a device name")?),
            "-i" | "--ib-port" => {
                o.ib_port = number(&name, value())?;
                if o.ib_port == 0 {
                    return Err("-i: ports are numbered from 1".into());
                }
            }
            "-s" | "--size" => {
                o.size = number(&name, value())?;
                if o.size == 0 || o.size > u32::MAX as usize {
                    return Err("-s: the size must be between 1 and 4294967295".into());
                }
            }
            "-m" | "--mtu" => {
                let bytes: u32 = number(&name, value())?;
                o.mtu = match bytes {
                    256 => Mtu::Mtu256,
                    512 => Mtu::Mtu512,
                    1024 => Mtu::Mtu1024,
                    2048 => Mtu::Mtu2048,
                    4096 => Mtu::Mtu4096,
                    _ => return Err(format!("-m: {bytes} is not 256, 512, 1024, 2048 or 4096")),
                };
            }
            "-r" | "--rx-depth" => {
                o.rx_depth = number(&name, value())?;
                if o.rx_depth < 2 {
                    return Err("-r: at least 2 receives must be kept posted".into());
                }
            }
            "-n" | "--iters" => {
                o.iters = number(&name, value())?;
                if o.iters == 0 {
                    return Err("-n: at least one iteration".into());
                }
            }
            "-e" | "--events" => o.events = true,
            "-g" | "--gid-idx" => o.gid_index = Some(number(&name, value())?),
            "-h" | "--help" => return Ok(Parsed::Help),
            other if other.starts_with('-') && other.len() > 1 => {
                return Err(format!("unknown option {other:?}"));
            }
            host => {
                if o.server.is_some() {
                    return Err(format!(
                        "unexpected argument {host:?}: one server name only"
                    ));
                }
                o.server = Some(host.to_string());
            }
        }
    }
    Ok(Parsed::Run(o))
}

/// What the two sides tell each other.
fn encode(ep: &Endpoint) -> [u8; MSG_LEN] {
    let mut text = format!("{:04x}:{:06x}:{:06x}:", ep.lid, ep.qp_num, ep.psn);
    for b in ep.gid.0 {
        text.push_str(&format!("{b:02x}"));
    }
    let mut msg = [0u8; MSG_LEN];
    msg[..text.len()].copy_from_slice(text.as_bytes());
    msg
}

fn decode(msg: &[u8]) -> Result<Endpoint, String> {
    let bad = || format!("malformed address message from the peer: {msg:?}");
    let text = std::str::from_utf8(msg).map_err(|_| bad())?;
    let text = text.trim_end_matches('\0');
    let mut parts = text.split(':');
    let mut field = |digits: usize| -> Result<&str, String> {
        parts.next().filter(|p| p.len() == digits).ok_or_else(bad)
    };
    let lid = u16::from_str_radix(field(4)?, 16).map_err(|_| bad())?;
    let qp_num = u32::from_str_radix(field(6)?, 16).map_err(|_| bad())?;
    let psn = u32::from_str_radix(field(6)?, 16).map_err(|_| bad())?;
    let hex = field(32)?;
    let mut gid = [0u8; 16];
    for (i, b) in gid.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(Endpoint::new(qp_num, psn, lid, Gid(gid)))
}

fn print_address(which: &str, ep: &Endpoint) {
    println!(
        "  {which} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        ep.lid, ep.qp_num, ep.psn, ep.gid
    );
}

/// A 24-bit first packet sequence number that differs from run to run.
fn random_psn() -> u32 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = nanos ^ (u64::from(std::process::id()) << 32);
    // splitmix64 finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (x & 0x00ff_ffff) as u32
}

/// The verbs resources of one side: one buffer for sends and receives, one
/// CQ for both queues, an optional completion channel.
struct Pingpong {
    ctx: Context,
    channel: Option<CompChannel>,
    cq: Cq,
    qp: Qp,
    mr: Mr,
    size: usize,
    rx_depth: u32,
}

impl Pingpong {
    fn new(o: &Options) -> Result<Pingpong, String> {
        let list = DeviceList::new().map_err(|e| e.to_string())?;
        let device = match &o.device {
            Some(name) => list.find(name).map_err(|e| e.to_string())?,
            None => list.get(0).ok_or("no RDMA devices found")?,
        };
        let name = device.name().to_string();
        let ctx = device
            .open()
            .map_err(|e| format!("couldn't open {name}: {e}"))?;
        ctx.query_port(o.ib_port)
            .map_err(|e| format!("{name}: {e}"))?;
        let channel = if o.events {
            Some(
                ctx.create_comp_channel()
                    .map_err(|e| format!("couldn't create completion channel: {e}"))?,
            )
        } else {
            None
        };
        let pd = ctx
            .alloc_pd()
            .map_err(|e| format!("couldn't allocate PD: {e}"))?;
        let mut mr = pd
            .reg_mr(o.size, AccessFlags::LOCAL_WRITE)
            .map_err(|e| format!("couldn't register MR: {e}"))?;
        mr.fill(0x7b);
        let cqe = o.rx_depth.saturating_add(1);
        let cq = match &channel {
            Some(ch) => ctx.create_cq_with_channel(cqe, ch, 0),
            None => ctx.create_cq(cqe),
        }
        .map_err(|e| format!("couldn't create CQ: {e}"))?;
        let qp = pd
            .create_qp(&QpInit::rc(&cq, &cq).cap(QpCap::new(1, o.rx_depth)))
            .map_err(|e| format!("couldn't create QP: {e}"))?;
        qp.modify_to_init(o.ib_port, AccessFlags::empty())
            .map_err(|e| format!("failed to modify QP to INIT: {e}"))?;
        Ok(Pingpong {
            ctx,
            channel,
            cq,
            qp,
            mr,
            size: o.size,
            rx_depth: o.rx_depth,
        })
    }

    /// Posts up to `n` receives; returns how many were posted.
    fn post_recv(&self, n: u32) -> u32 {
        for i in 0..n {
            if self
                .qp
                .post_recv(&RecvRequest::new(&self.mr, 0..self.size).wr_id(RECV_WRID))
                .is_err()
            {
                return i;
            }
        }
        n
    }

    fn post_send(&self) -> Result<(), String> {
        self.qp
            .post_send(&SendRequest::send(&self.mr, 0..self.size).wr_id(SEND_WRID))
            .map_err(|e| format!("couldn't post send: {e}"))
    }

    /// RTR towards `remote`, then RTS, with `ibv_rc_pingpong`'s attributes.
    fn connect(&self, opts: &ConnectOptions, remote: &Endpoint) -> Result<(), String> {
        self.qp
            .modify_to_rtr(opts, remote)
            .map_err(|e| format!("failed to modify QP to RTR: {e}"))?;
        self.qp
            .modify_to_rts(opts)
            .map_err(|e| format!("failed to modify QP to RTS: {e}"))
    }
}

fn server_exchange(
    pp: &Pingpong,
    opts: &ConnectOptions,
    port: u16,
    local: &Endpoint,
) -> Result<Endpoint, String> {
    let listener = TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|e| format!("couldn't listen to port {port}: {e}"))?;
    let (mut conn, _) = listener
        .accept()
        .map_err(|e| format!("accept() failed: {e}"))?;
    drop(listener);
    let mut msg = [0u8; MSG_LEN];
    conn.read_exact(&mut msg)
        .map_err(|e| format!("couldn't read remote address: {e}"))?;
    let remote = decode(&msg)?;
    pp.connect(opts, &remote)
        .map_err(|e| format!("couldn't connect to remote QP: {e}"))?;
    conn.write_all(&encode(local))
        .map_err(|e| format!("couldn't send local address: {e}"))?;
    let mut done = [0u8; 5];
    conn.read_exact(&mut done)
        .map_err(|e| format!("couldn't read the client's \"done\": {e}"))?;
    Ok(remote)
}

fn client_exchange(host: &str, port: u16, local: &Endpoint) -> Result<Endpoint, String> {
    let mut conn = TcpStream::connect((host, port))
        .map_err(|e| format!("couldn't connect to {host}:{port}: {e}"))?;
    conn.write_all(&encode(local))
        .map_err(|e| format!("couldn't send local address: {e}"))?;
    let mut msg = [0u8; MSG_LEN];
    conn.read_exact(&mut msg)
        .map_err(|e| format!("couldn't read remote address: {e}"))?;
    conn.write_all(b"done\0")
        .map_err(|e| format!("couldn't write \"done\" to the server: {e}"))?;
    decode(&msg)
}

fn run(o: &Options) -> Result<(), String> {
    let pp = Pingpong::new(o)?;
    let name = pp.ctx.name().to_string();
    let mut routs = pp.post_recv(pp.rx_depth);
    if routs < pp.rx_depth {
        return Err(format!("couldn't post receive ({routs})"));
    }
    if pp.channel.is_some() {
        pp.cq
            .req_notify(false)
            .map_err(|e| format!("couldn't request CQ notification: {e}"))?;
    }

    let gid_index = match o.gid_index {
        Some(i) => i,
        None => {
            pp.ctx
                .ipv4_gid(o.ib_port)
                .map_err(|e| format!("{name}: {e}"))?
                .ok_or_else(|| {
                    format!(
                        "{name} port {} has no IPv4-mapped RoCE v2 GID: give the GID index with -g",
                        o.ib_port
                    )
                })?
                .index
        }
    };
    let mut opts = ConnectOptions::new(o.ib_port, gid_index).psn(random_psn());
    opts.mtu = o.mtu;
    opts.hop_limit = 1;
    opts.access = AccessFlags::empty();
    let local = pp
        .qp
        .endpoint(&opts)
        .map_err(|e| format!("can't read sgid of index {gid_index}: {e}"))?;
    print_address("local address: ", &local);

    let remote = match &o.server {
        Some(host) => client_exchange(host, o.tcp_port, &local)?,
        None => server_exchange(&pp, &opts, o.tcp_port, &local)?,
    };
    print_address("remote address:", &remote);

    let mut pending = RECV_WRID;
    if o.server.is_some() {
        pp.connect(&opts, &remote)?;
        pp.post_send()?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();

    let (mut rcnt, mut scnt) = (0u64, 0u64);
    let mut wc = [WorkCompletion::default(); 2];
    while rcnt < o.iters || scnt < o.iters {
        let ne = if let Some(channel) = &pp.channel {
            let ev_cq = channel
                .get_cq_event()
                .map_err(|e| format!("failed to get cq_event: {e}"))?;
            if !ev_cq.same_as(&pp.cq) {
                return Err(format!("CQ event for unknown CQ {ev_cq:?}"));
            }
            ev_cq
                .req_notify(false)
                .map_err(|e| format!("couldn't request CQ notification: {e}"))?;
            pp.cq
                .poll(&mut wc)
                .map_err(|e| format!("poll CQ failed: {e}"))?
                .len()
        } else {
            loop {
                let ne = pp
                    .cq
                    .poll(&mut wc)
                    .map_err(|e| format!("poll CQ failed: {e}"))?
                    .len();
                if ne > 0 {
                    break ne;
                }
            }
        };
        for wc in &wc[..ne] {
            if !wc.is_success() {
                return Err(format!(
                    "failed status {} ({:?}) for wr_id {}",
                    wc.status_str(),
                    wc.status(),
                    wc.wr_id()
                ));
            }
            match wc.wr_id() {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= 1 {
                        routs += pp.post_recv(pp.rx_depth - routs);
                        if routs < pp.rx_depth {
                            return Err(format!("couldn't post receive ({routs})"));
                        }
                    }
                    rcnt += 1;
                }
                other => return Err(format!("completion for unknown wr_id {other}")),
            }
            pending &= !wc.wr_id();
            if scnt < o.iters && pending == 0 {
                pp.post_send()?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }

    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = o.size as u64 * o.iters * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        o.iters,
        usec / 1e6,
        usec / o.iters as f64
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Result<Vec<String>, _> = std::env::args_os()
        .skip(1)
        .map(|a| a.into_string())
        .collect();
    let parsed = args
        .map_err(|a| format!("argument {a:?} is not UTF-8"))
        .and_then(parse);
    let options = match parsed {
        Ok(Parsed::Run(o)) => o,
        Ok(Parsed::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("rc_pingpong: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("rc_pingpong: {msg}");
            ExitCode::FAILURE
        }
    }
}
