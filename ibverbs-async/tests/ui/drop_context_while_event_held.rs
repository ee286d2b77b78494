// The event borrows the context: the context cannot be dropped while an
// event read from it is alive.
fn main() {
    let ctx = ibverbs_async::Context::open("rxe0").unwrap();
    let event = ctx.get_async_event().unwrap();
    drop(ctx);
    event.ack();
}
