// A stoppable wait may end without an event: its outcome must be looked at.
#![deny(unused_must_use)]
fn main() {
    let ctx = ibverbs_async::Context::open("rxe0").unwrap();
    let stopper = ibverbs_async::Stopper::new().unwrap();
    ctx.wait_async_event(&stopper, None).unwrap();
}
