// A borrowed element cannot outlive the event; to keep the object, clone
// its handle (which keeps it alive, not the event).
fn main() {
    let ctx = ibverbs_async::Context::open("rxe0").unwrap();
    let element;
    {
        let event = ctx.get_async_event().unwrap();
        element = event.element();
    }
    println!("{element:?}");
}
