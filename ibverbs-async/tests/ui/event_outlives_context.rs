// An event cannot escape the scope of its context.
fn first_event() -> ibverbs_async::AsyncEvent<'static> {
    let ctx = ibverbs_async::Context::open("rxe0").unwrap();
    ctx.get_async_event().unwrap()
}

fn main() {
    first_event().ack();
}
