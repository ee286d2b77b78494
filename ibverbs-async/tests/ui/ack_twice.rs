// `ack` consumes the event: an event is acknowledged exactly once.
fn main() {
    let ctx = ibverbs_async::Context::open("rxe0").unwrap();
    let event = ctx.get_async_event().unwrap();
    event.ack();
    event.ack();
}
