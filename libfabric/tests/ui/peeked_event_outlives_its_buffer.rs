// A peeked event borrows the buffer it was read into, like a read one.
use libfabric::eq::{EqRead, Event, EventBuf};
fn data_len(eq: &libfabric::EventQueue) -> usize {
    let mut buf = EventBuf::new();
    let event = eq.peek(&mut buf).unwrap();
    drop(buf);
    match event {
        EqRead::Event(Event::UnownedConnReq(c)) => c.data().len(),
        _ => 0,
    }
}
fn main() {}
