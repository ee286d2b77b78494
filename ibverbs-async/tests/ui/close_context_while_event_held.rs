// Nor closed.
fn main() {
    let ctx = ibverbs_async::Context::open("rxe0").unwrap();
    let event = ctx.get_async_event().unwrap();
    let _ = ctx.close();
    drop(event);
}
