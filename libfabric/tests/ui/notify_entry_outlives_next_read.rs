// The entry of an FI_NOTIFY (FI_MR_COMPLETE, ...) event is read in place
// from the buffer it was read into: the next read, blocking or not, or an
// async one, cannot write into the buffer while the entry is still in use
// (copy it, `*entry`, to keep it).
use libfabric::eq::{EqRead, Event, EventBuf};
use libfabric::tokio::AsyncEventQueue;
use libfabric::EventQueue;
fn kept(eq: &EventQueue) -> u64 {
    let mut buf = EventBuf::new();
    let EqRead::Event(Event::Notify(first)) = eq.peek(&mut buf).unwrap() else {
        return 0;
    };
    let _ = eq.sread(&mut buf, None);
    first.data
}
async fn kept_across_an_await(aeq: &AsyncEventQueue) -> u64 {
    let mut buf = EventBuf::new();
    let EqRead::Event(Event::MrComplete(first)) = aeq.read(&mut buf).await.unwrap() else {
        return 0;
    };
    let _ = aeq.read(&mut buf).await;
    first.data
}
fn main() {}
