// An `AsyncEvent` borrows its context, so it cannot be moved to another
// thread that may outlive it; `into_owned()` makes the event that can.
fn main() {
    let ctx = ibverbs_async::Context::open("rxe0").unwrap();
    let event = ctx.get_async_event().unwrap();
    std::thread::spawn(move || drop(event));
}
