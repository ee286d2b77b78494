// An event read through tokio borrows the AsyncEvents it came from.
async fn run() {
    let ctx = ibverbs_async::Context::open("rxe0").unwrap();
    let events = ibverbs_async::tokio::AsyncEvents::new(&ctx).unwrap();
    let event = events.next().await.unwrap();
    drop(events);
    event.ack();
}

fn main() {
    let _ = run();
}
