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
#[path = "pingpong/report.rs"]
mod report;
#[path = "pingpong/setup.rs"]
mod setup;
#[path = "pingpong/transfer.rs"]
mod transfer;

use cli::{EpKind, Options, Parsed, Role};
use report::{EventLog, Row};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;
use transfer::Progress;

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

fn banner(opts: &Options, server: &str) -> String {
    let ep = match opts.ep {
        EpKind::Msg => "MSG",
        EpKind::Rdm => "RDM",
    };
    format!(
        "pingpong: provider {}, {ep} endpoints, server {server}, completions: {}\n",
        opts.provider_name(),
        opts.mode
    )
}

fn output(banner: String, log: &EventLog, rows: &[Row]) -> String {
    format!("{banner}{}\n{}", log.render(), report::table(rows))
}

/// The server's whole run on a listener.
fn serve(
    listener: setup::Listener,
    opts: &Options,
    patient: bool,
    progress: bool,
) -> Res<Vec<Row>> {
    let link = setup::accept(listener, opts)?;
    let rows = transfer::server(&link, opts.mode, patient, Progress::new(progress))?;
    setup::shutdown(&link, false)?;
    Ok(rows)
}

/// The client's whole run.
fn client(opts: &Options, host: &str, port: u16, log: &Arc<EventLog>) -> Res<Vec<Row>> {
    let link = setup::connect(opts, host, port, log)?;
    let rows = transfer::client(&link, opts, Progress::new(true))?;
    setup::shutdown(&link, true)?;
    Ok(rows)
}

/// Server and client in one process: the server thread listens on
/// 127.0.0.1 and tells the client thread where.
fn both(opts: &Options) -> Res<String> {
    let log = Arc::new(EventLog::new());
    let (ready, where_) = mpsc::channel();
    let server = {
        let (opts, log) = (opts.clone(), log.clone());
        thread::spawn(move || -> Res<Vec<Row>> {
            let port = opts.port.unwrap_or(0);
            let listener = match setup::listen(&opts, Some("127.0.0.1"), port, &log) {
                Ok((listener, addr)) => {
                    let _ = ready.send(Some(addr));
                    listener
                }
                Err(e) => {
                    let _ = ready.send(None);
                    return Err(e);
                }
            };
            serve(listener, &opts, true, false)
        })
    };
    let Ok(Some(addr)) = where_.recv() else {
        return Err(joined(server)
            .err()
            .unwrap_or_else(|| "the server did not start".into()));
    };
    let result = client(opts, &addr.ip().to_string(), addr.port(), &log);
    let rows = match result {
        Ok(rows) => rows,
        Err(e) => {
            // The server's error, if it failed first, says more.
            for _ in 0..20 {
                if server.is_finished() {
                    if let Err(first) = joined(server) {
                        return Err(format!("server: {first}\nclient: {e}").into());
                    }
                    break;
                }
                thread::sleep(Duration::from_millis(50));
            }
            return Err(e);
        }
    };
    joined(server).map_err(|e| format!("server: {e}"))?;
    Ok(output(banner(opts, &addr.to_string()), &log, &rows))
}

fn joined(handle: thread::JoinHandle<Res<Vec<Row>>>) -> Res<Vec<Row>> {
    handle
        .join()
        .unwrap_or_else(|_| Err("the server thread panicked".into()))
}

fn server_only(opts: &Options, node: Option<&str>) -> Res<String> {
    let log = Arc::new(EventLog::new());
    let port = opts.port.unwrap_or(cli::DEFAULT_PORT);
    let (listener, addr) = setup::listen(opts, node, port, &log)?;
    eprintln!("pingpong: listening on {addr}, waiting for a client");
    let rows = serve(listener, opts, true, true)?;
    Ok(output(banner(opts, &addr.to_string()), &log, &rows))
}

fn client_only(opts: &Options, host: &str) -> Res<String> {
    let log = Arc::new(EventLog::new());
    let port = opts.port.unwrap_or(cli::DEFAULT_PORT);
    let rows = client(opts, host, port, &log)?;
    Ok(output(banner(opts, &format!("{host}:{port}")), &log, &rows))
}
