//! Command line: the options of fi_pingpong that apply here, plus the
//! completion mode.

use std::fmt;

pub const USAGE: &str = "\
Usage:
  pingpong [OPTIONS]              server and client in one process (two threads)
  pingpong [OPTIONS] -s [<addr>]  server only: waits for one client, listening
                                  on <addr> (default: all interfaces)
  pingpong [OPTIONS] <server>     client of a `pingpong -s` on <server>

Ping-pong over libfabric, like fi_pingpong: the client sends a message, the
server sends it back; usec/xfer is half a round trip. As in fi_pingpong, a
TCP control connection carries the setup and the synchronisation before each
size, and the fabric carries only the timed messages. Before the table: the
event queue events both sides saw (connection request, connected, shutdown).

Options:
  -p <provider>   provider (tcp)
  -e <ep_type>    endpoint type: msg|rdm (msg); rdm over tcp uses tcp;ofi_rxm
                  and an address vector
  -S <sizes>      message sizes: a comma-separated list, or 'all' (64,4096,65536)
  -I <number>     iterations per size (1000; 100 from 1 MiB up)
  -o <op>         RMA instead of send/recv: write|read|writedata (the option
                  name of fabtests' rma_pingpong). Each side registers a
                  region of the largest size; the two exchange them over the
                  control connection. write: each side writes the other's
                  region, which notices the last byte change to the
                  iteration's sequence number (fabtests' way); writedata:
                  as write, noticed by the remote CQ data completion, which
                  carries the sequence number; read: the client reads the
                  server's region (one round trip per read). The server
                  needs the same -o. Sizes of 0 bytes are left out. Spin only.
  -c <mode>       how completions are waited for (spin):
                    spin   busy-poll fi_cq_read, as fi_pingpong does
                    sread  block in fi_cq_sread
                    fd     fi_trywait, then poll(2) on the CQ's wait fd
                    tokio  await a tokio AsyncCompletionQueue
  -P <port>       control port (47592, as fi_pingpong; in one process: any free port)
  -s              server only
  -v              verify the contents of every message (the client decides)
  -h              this help
";

/// Endpoint type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpKind {
    /// `FI_EP_MSG`: connected endpoints, with connection events.
    Msg,
    /// `FI_EP_RDM`: reliable unconnected endpoints, peers in an address vector.
    Rdm,
}

/// How completions are waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Spin,
    Sread,
    Fd,
    Tokio,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Spin => "spin",
            Mode::Sread => "sread",
            Mode::Fd => "fd",
            Mode::Tokio => "tokio",
        })
    }
}

/// What moves the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `fi_send` / `fi_recv` (fi_pingpong).
    Msg,
    /// `fi_write` into the peer's region, noticed by its last byte.
    Write,
    /// `fi_read` of the server's region by the client.
    Read,
    /// `fi_writedata`, noticed by the remote CQ data completion.
    WriteData,
}

impl Op {
    /// Whether the op is an RMA one.
    pub fn is_rma(self) -> bool {
        self != Op::Msg
    }

    /// The op of a number from [`code`](Self::code).
    pub fn from_code(code: u64) -> Option<Self> {
        [Op::Msg, Op::Write, Op::Read, Op::WriteData]
            .into_iter()
            .find(|op| op.code() == code)
    }

    /// The op's number in the client's `Hello` flags.
    pub fn code(self) -> u64 {
        match self {
            Op::Msg => 0,
            Op::Write => 1,
            Op::Read => 2,
            Op::WriteData => 3,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Msg => "send/recv",
            Op::Write => "write",
            Op::Read => "read",
            Op::WriteData => "writedata",
        })
    }
}

/// Which sides run in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Both,
    /// Listening on this address, or the provider's default.
    Server(Option<String>),
    Client(String),
}

pub const DEFAULT_PORT: u16 = 47592;
pub const DEFAULT_SIZES: [usize; 3] = [64, 4096, 65536];

#[derive(Debug, Clone)]
pub struct Options {
    pub provider: String,
    pub ep: EpKind,
    pub sizes: Vec<usize>,
    pub iterations: Option<usize>,
    pub mode: Mode,
    pub op: Op,
    pub role: Role,
    pub port: Option<u16>,
    pub verify: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            provider: "tcp".into(),
            ep: EpKind::Msg,
            sizes: DEFAULT_SIZES.to_vec(),
            iterations: None,
            mode: Mode::Spin,
            op: Op::Msg,
            role: Role::Both,
            port: None,
            verify: false,
        }
    }
}

impl Options {
    /// Iterations for one size: `-I`, or 1000 (100 from 1 MiB up).
    pub fn iterations_for(&self, size: usize) -> usize {
        self.iterations
            .unwrap_or(if size >= 1 << 20 { 100 } else { 1000 })
    }

    /// The provider name for fi_getinfo: RDM over a MSG-only provider goes
    /// through the ofi_rxm utility provider.
    pub fn provider_name(&self) -> String {
        let layered = self.provider.contains(';');
        let msg_only = matches!(self.provider.as_str(), "tcp" | "verbs");
        if self.ep == EpKind::Rdm && !layered && msg_only {
            format!("{};ofi_rxm", self.provider)
        } else {
            self.provider.clone()
        }
    }

    /// The largest message of the run.
    pub fn max_size(&self) -> usize {
        self.sizes.iter().copied().max().unwrap_or(0)
    }
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Parsed {
    Run(Options),
    Help,
}

/// fi_pingpong's `-S all`: 0, 1, 2, 3, 4, 6, 8, 12, ... up to 6 MiB.
pub fn all_sizes() -> Vec<usize> {
    let mut sizes = vec![0, 1];
    for power in 1..=22 {
        sizes.push(1 << power);
        if power < 22 {
            sizes.push((1 << power) + (1 << (power - 1)));
        }
    }
    sizes.push((1 << 22) + (1 << 21));
    sizes
}

fn number<T: std::str::FromStr>(option: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{option} needs a number, not {value:?}"))
}

fn sizes(value: &str) -> Result<Vec<usize>, String> {
    if value.eq_ignore_ascii_case("all") {
        return Ok(all_sizes());
    }
    let sizes = value
        .split(',')
        .map(|s| number::<usize>("-S", s.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(big) = sizes.iter().find(|&&s| s > 1 << 30) {
        return Err(format!(
            "-S: {big} bytes is more than the 1 GiB this program allows"
        ));
    }
    Ok(sizes)
}

/// Parses the arguments (without the program name).
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut opts = Options::default();
    let mut server_only = false;
    let mut all = false;
    let mut host = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "-p" => opts.provider = value("-p")?,
            "-e" => {
                opts.ep = match value("-e")?.to_ascii_lowercase().as_str() {
                    "msg" => EpKind::Msg,
                    "rdm" => EpKind::Rdm,
                    other => {
                        return Err(format!("-e: unknown endpoint type {other:?} (msg or rdm)"))
                    }
                }
            }
            "-S" => {
                let v = value("-S")?;
                all = v.eq_ignore_ascii_case("all");
                opts.sizes = sizes(&v)?;
            }
            "-o" => {
                opts.op = match value("-o")?.to_ascii_lowercase().as_str() {
                    "write" => Op::Write,
                    "read" => Op::Read,
                    "writedata" => Op::WriteData,
                    other => {
                        return Err(format!(
                            "-o: unknown RMA op {other:?} (write, read or writedata)"
                        ))
                    }
                }
            }
            "-I" => {
                let n: usize = number("-I", &value("-I")?)?;
                if n == 0 {
                    return Err("-I: at least one iteration".into());
                }
                opts.iterations = Some(n);
            }
            "-c" => {
                opts.mode = match value("-c")?.as_str() {
                    "spin" => Mode::Spin,
                    "sread" => Mode::Sread,
                    "fd" => Mode::Fd,
                    "tokio" => Mode::Tokio,
                    other => {
                        return Err(format!(
                            "-c: unknown completion mode {other:?} (spin, sread, fd or tokio)"
                        ))
                    }
                }
            }
            "-P" => opts.port = Some(number("-P", &value("-P")?)?),
            "-s" => server_only = true,
            "-v" => opts.verify = true,
            s if s.starts_with('-') && s.len() > 1 => return Err(format!("unknown option {s}")),
            _ if host.is_some() => return Err(format!("unexpected argument {arg:?}")),
            _ => host = Some(arg),
        }
    }
    if opts.provider.is_empty() {
        return Err("-p: empty provider name".into());
    }
    if opts.op.is_rma() {
        if all {
            opts.sizes.retain(|&s| s > 0);
        } else if opts.sizes.contains(&0) {
            return Err(format!(
                "-o {}: RMA transfers need at least 1 byte (-S 0)",
                opts.op
            ));
        }
        if opts.mode != Mode::Spin {
            return Err(format!(
                "-o {}: RMA runs busy-poll (-c spin): a write is noticed by polling memory",
                opts.op
            ));
        }
    }
    if opts.sizes.is_empty() {
        return Err("-S: no sizes".into());
    }
    opts.role = match (server_only, host) {
        (true, addr) => Role::Server(addr),
        (false, Some(h)) => Role::Client(h),
        (false, None) => Role::Both,
    };
    Ok(Parsed::Run(opts))
}
