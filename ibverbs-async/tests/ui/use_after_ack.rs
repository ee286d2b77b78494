// After the acknowledgement the event (and the object it names) is gone.
fn main() {
    let ctx = ibverbs_async::Context::open("rxe0").unwrap();
    let event = ctx.get_async_event().unwrap();
    let info = event.ack();
    println!("{info} {:?}", event.element());
}
