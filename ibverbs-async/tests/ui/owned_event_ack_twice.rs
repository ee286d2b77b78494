// An owned event is acknowledged exactly once too: `ack` consumes it.
fn main() {
    let ctx = ibverbs_async::Context::open("rxe0").unwrap();
    let event = ctx.get_owned_async_event().unwrap();
    std::thread::spawn(move || {
        event.ack();
        event.ack();
    });
}
