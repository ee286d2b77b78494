//! Ping-pong over libfabric, the Rust counterpart of libfabric's
//! `fi_pingpong`, written on the safe `libfabric` crate only.
//!
//! ```text
//! cargo run --release --example pingpong                  # both sides, tcp on 127.0.0.1
//! cargo run --release --example pingpong -- -c sread -S all
//! cargo run --release --example pingpong -- -s            # on one host
//! cargo run --release --example pingpong -- HOST          # on another
//! ```
//!
//! It prints the event-queue events both sides saw (the connection request
//! with its data, `FI_CONNECTED`, `FI_SHUTDOWN`), then fi_pingpong's table:
//! usec/xfer is half a round trip, MB/sec counts the bytes of both
//! directions. `-h` lists the options.

#[path = "pingpong/cli.rs"]
mod cli;
#[path = "pingpong/control.rs"]
mod control;
#[path = "pingpong/report.rs"]
mod report;
#[path = "pingpong/rma.rs"]
mod rma;
#[path = "pingpong/setup.rs"]
mod setup;
#[path = "pingpong/transfer.rs"]
mod transfer;

use cli::{EpKind, Op, Options, Parsed, Role};
use control::{Control, Kind, FLAG_VERIFY, OP_MASK, OP_SHIFT};
use libfabric::cq::{Context, Data, Format};
use report::{EventLog, Row};
use setup::Link;
use std::net::TcpListener;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Res<T> = Result<T, Error>;

fn main() {
    std::process::exit(run(std::env::args_os().skip(1)));
}

/// Runs the program with these arguments; returns the exit code: 0, 1 when
/// the run failed, 2 for a bad command line.
pub fn run(args: impl IntoIterator<Item = std::ffi::OsString>) -> i32 {
    let args: Result<Vec<String>, _> = args.into_iter().map(|a| a.into_string()).collect();
    let parsed = args
        .map_err(|a| format!("argument {a:?} is not UTF-8"))
        .and_then(cli::parse);
    let opts = match parsed {
        Ok(Parsed::Run(opts)) => opts,
        Ok(Parsed::Help) => {
            print!("{}", cli::USAGE);
            return 0;
        }
        Err(e) => {
            eprintln!("pingpong: {e}\n\n{}", cli::USAGE);
            return 2;
        }
    };
    let outcome = match &opts.role {
        Role::Both => both(&opts),
        Role::Server(addr) => server_only(&opts, addr.as_deref()),
        Role::Client(host) => client_only(&opts, host),
    };
    match outcome {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("pingpong: error: {e}");
            1
        }
    }
}

fn banner(opts: &Options, control: &str) -> String {
    let ep = match opts.ep {
        EpKind::Msg => "MSG",
        EpKind::Rdm => "RDM",
    };
    let op = match opts.op {
        Op::Msg => String::new(),
        op => format!("RMA {op}, "),
    };
    format!(
        "pingpong: provider {}, {ep} endpoints, {op}completions: {}, control connection {control}\n",
        opts.provider_name(),
        opts.mode
    )
}

fn output(banner: String, log: &EventLog, rows: &[Row]) -> String {
    format!("{banner}{}\n{}", log.render(), report::table(rows))
}

/// What runs over a link whose queues have completion format `Self`:
/// send/recv over [`Context`] queues, RMA over [`Data`] ones (whose
/// entries carry the remote CQ data).
trait Run: Format + Sized {
    fn server(
        link: &mut Link<Self>,
        ctrl: &mut Control,
        opts: &Options,
        flags: u64,
        progress: bool,
    ) -> Res<Vec<Row>>;
    fn client(link: &mut Link<Self>, ctrl: &mut Control, opts: &Options) -> Res<Vec<Row>>;
}

impl Run for Context {
    fn server(
        link: &mut Link<Self>,
        ctrl: &mut Control,
        opts: &Options,
        flags: u64,
        progress: bool,
    ) -> Res<Vec<Row>> {
        let tx = link.tx.take().ok_or("no transmit buffer")?;
        transfer::server(link, tx, ctrl, opts.mode, flags, progress)
    }

    fn client(link: &mut Link<Self>, ctrl: &mut Control, opts: &Options) -> Res<Vec<Row>> {
        let tx = link.tx.take().ok_or("no transmit buffer")?;
        transfer::client(link, tx, ctrl, opts)
    }
}

impl Run for Data {
    fn server(
        link: &mut Link<Self>,
        ctrl: &mut Control,
        opts: &Options,
        flags: u64,
        progress: bool,
    ) -> Res<Vec<Row>> {
        let tx = link.tx.take().ok_or("no transmit buffer")?;
        rma::server(link, tx, ctrl, opts.op, flags, progress)
    }

    fn client(link: &mut Link<Self>, ctrl: &mut Control, opts: &Options) -> Res<Vec<Row>> {
        let tx = link.tx.take().ok_or("no transmit buffer")?;
        rma::client(link, tx, ctrl, opts)
    }
}

/// The server's whole run: opens the fabric endpoint, waits for a client
/// on the control port, tells it where the endpoint is, takes its
/// connection, echoes.
fn serve(
    control: &TcpListener,
    opts: &Options,
    node: Option<&str>,
    log: &Arc<EventLog>,
    progress: bool,
) -> Res<Vec<Row>> {
    if opts.op.is_rma() {
        serve_as::<Data>(control, opts, node, log, progress)
    } else {
        serve_as::<Context>(control, opts, node, log, progress)
    }
}

fn serve_as<F: Run>(
    control: &TcpListener,
    opts: &Options,
    node: Option<&str>,
    log: &Arc<EventLog>,
    progress: bool,
) -> Res<Vec<Row>> {
    let (listener, address) = setup::listen::<F>(opts, node, log)?;
    if progress {
        eprintln!(
            "pingpong: waiting for a client on port {}",
            control.local_addr()?.port()
        );
    }
    let mut ctrl = Control::accept(control)?;
    ctrl.send(Kind::Address, address.port.into(), 0, &address.name)?;
    let hello = ctrl.expect(Kind::Hello)?;
    let theirs = (hello.b & OP_MASK) >> OP_SHIFT;
    if theirs != opts.op.code() {
        let name = Op::from_code(theirs).map_or("an unknown op".to_string(), |op| op.to_string());
        return Err(format!(
            "the client runs {name}, this server {}: give both sides the same -o",
            opts.op
        )
        .into());
    }
    let mut link = setup::accept(listener, opts, &hello)?;
    let rows = F::server(&mut link, &mut ctrl, opts, hello.b, progress)?;
    setup::shutdown(&link, false)?;
    Ok(rows)
}

/// The client's whole run: control connection, endpoint, `Hello`,
/// connection, the sizes.
fn client(opts: &Options, host: &str, port: u16, log: &Arc<EventLog>) -> Res<Vec<Row>> {
    if opts.op.is_rma() {
        client_as::<Data>(opts, host, port, log)
    } else {
        client_as::<Context>(opts, host, port, log)
    }
}

fn client_as<F: Run>(opts: &Options, host: &str, port: u16, log: &Arc<EventLog>) -> Res<Vec<Row>> {
    let mut ctrl = Control::connect(host, port)?;
    let address = ctrl.expect(Kind::Address)?;
    let mut link = setup::open::<F>(opts, host, &address, log)?;
    // An RDM server learns where the client is from the Hello.
    let name = match &link.av {
        Some(_) => link.ep.name()?,
        None => Vec::new(),
    };
    let verify = if opts.verify { FLAG_VERIFY } else { 0 };
    let flags = verify | opts.op.code() << OP_SHIFT;
    ctrl.send(Kind::Hello, opts.max_size() as u64, flags, &name)?;
    setup::connect(&mut link)?;
    let rows = F::client(&mut link, &mut ctrl, opts)?;
    setup::shutdown(&link, true)?;
    Ok(rows)
}

/// Server and client in one process, one thread each, on 127.0.0.1.
fn both(opts: &Options) -> Res<String> {
    let log = Arc::new(EventLog::new());
    let control = TcpListener::bind(("127.0.0.1", opts.port.unwrap_or(0)))?;
    let port = control.local_addr()?.port();
    let server = {
        let (opts, log) = (opts.clone(), log.clone());
        thread::spawn(move || serve(&control, &opts, Some("127.0.0.1"), &log, false))
    };
    let rows = match client(opts, "127.0.0.1", port, &log) {
        Ok(rows) => rows,
        Err(e) => {
            // When the server failed first, its error is the one that says
            // what went wrong.
            for _ in 0..40 {
                if server.is_finished() {
                    joined(server)?;
                    break;
                }
                thread::sleep(Duration::from_millis(50));
            }
            return Err(e);
        }
    };
    joined(server).map_err(|e| format!("server: {e}"))?;
    Ok(output(
        banner(opts, &format!("127.0.0.1:{port}")),
        &log,
        &rows,
    ))
}

fn joined(handle: thread::JoinHandle<Res<Vec<Row>>>) -> Res<Vec<Row>> {
    handle
        .join()
        .unwrap_or_else(|_| Err("the server thread panicked".into()))
}

fn server_only(opts: &Options, node: Option<&str>) -> Res<String> {
    let log = Arc::new(EventLog::new());
    let port = opts.port.unwrap_or(cli::DEFAULT_PORT);
    let control = TcpListener::bind((node.unwrap_or("0.0.0.0"), port))
        .map_err(|e| format!("listening on port {port}: {e}"))?;
    let rows = serve(&control, opts, node, &log, true)?;
    Ok(output(banner(opts, &format!("port {port}")), &log, &rows))
}

fn client_only(opts: &Options, host: &str) -> Res<String> {
    let log = Arc::new(EventLog::new());
    let port = opts.port.unwrap_or(cli::DEFAULT_PORT);
    let rows = client(opts, host, port, &log)?;
    Ok(output(banner(opts, &format!("{host}:{port}")), &log, &rows))
}
