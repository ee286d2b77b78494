// Ignoring an event (which acknowledges it at once) is flagged.
#![deny(unused_must_use)]
fn main() {
    let ctx = ibverbs_async::Context::open("rxe0").unwrap();
    ctx.get_async_event().unwrap();
}
