// The connection data of a request read in place borrows the buffer, not
// the request: the next read cannot reuse the buffer while it is in use.
use libfabric::eq::{EqRead, Event, EventBuf};
fn read(eq: &libfabric::EventQueue) {
    let mut buf = EventBuf::new();
    let data = match eq.peek(&mut buf).unwrap() {
        EqRead::Event(Event::UnownedConnReq(c)) => c.data(),
        _ => &[],
    };
    let _ = eq.read(&mut buf);
    assert!(data.is_empty());
}
fn main() {}
