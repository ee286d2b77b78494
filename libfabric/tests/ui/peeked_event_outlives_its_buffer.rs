// A peeked event borrows the buffer it was read into, like a read one.
use libfabric::eq::{Event, EventBuf, EqRead};
fn take(eq: &libfabric::EventQueue) -> libfabric::ConnRequest {
    let mut buf = EventBuf::new();
    let event = eq.peek(&mut buf).unwrap();
    drop(buf);
    match event {
        EqRead::Event(Event::ConnReq(c)) => c.request.unwrap(),
        _ => unreachable!(),
    }
}
fn main() {}
