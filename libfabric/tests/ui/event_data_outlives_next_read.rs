// An event borrows the buffer it was read into: the next read cannot reuse
// the buffer while the event (and its connection data) is still in use.
use libfabric::eq::{EventBuf, EqRead};
fn read(eq: &libfabric::EventQueue) {
    let mut buf = EventBuf::new();
    let first = eq.read(&mut buf).unwrap();
    let second = eq.read(&mut buf).unwrap();
    if let (EqRead::Event(a), EqRead::Event(b)) = (first, second) {
        let _ = (a, b);
    }
}
fn main() {}
