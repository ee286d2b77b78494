//! Prints the asynchronous events of an RDMA device, like `ibv_asyncwatch`.
//!
//! ```text
//! cargo run -p ibverbs-async --example async_watch -- rxe0 [SECONDS]
//! ```
//! Without SECONDS it runs until interrupted.

use std::time::{Duration, Instant};

use ibverbs_async::{Context, DeviceList, Element};

fn main() {
    if let Err(e) = run() {
        eprintln!("async_watch: {e}");
        std::process::exit(1);
    }
}

fn run() -> ibverbs_async::Result<()> {
    let mut args = std::env::args().skip(1);
    let name = match args.next() {
        Some(name) => name,
        // The first device (DeviceList::new fails rather than return none).
        None => DeviceList::new()?.names().remove(0),
    };
    let limit = args
        .next()
        .map(|s| Duration::from_secs(s.parse().expect("SECONDS must be a number")));
    let ctx = Context::open(&name)?;
    let port = ctx.query_port(1)?;
    println!(
        "{}: {} port(s), port 1 {:?}; waiting for events",
        ctx.name(),
        ctx.port_count(),
        port.state()
    );
    let start = Instant::now();
    loop {
        let wait = match limit {
            Some(limit) => match limit.checked_sub(start.elapsed()) {
                Some(left) => left,
                None => return Ok(()),
            },
            None => Duration::from_secs(3600),
        };
        let Some(event) = ctx.get_async_event_timeout(wait)? else {
            continue;
        };
        match event.element() {
            Element::Port(port) => println!("{} on port {port}", event.event_type()),
            _ => println!("{event}"),
        }
        // Dropping the event acknowledges it.
    }
}
