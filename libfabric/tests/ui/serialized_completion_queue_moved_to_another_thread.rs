// A completion queue of a FI_THREAD_DOMAIN domain is read without locks,
// the provider's or this crate's: it stays on its domain's thread.
use libfabric::cq::{Msg, MsgEntry};
use libfabric::{CompletionQueue, ThreadDomain};
fn moved(cq: CompletionQueue<Msg, ThreadDomain>) {
    std::thread::spawn(move || {
        let mut entries: [MsgEntry; 1] = Default::default();
        let _ = cq.read(&mut entries).map(|r| r.count());
    });
}
fn shared(cq: &CompletionQueue<Msg, ThreadDomain>) {
    std::thread::scope(|s| {
        s.spawn(|| cq.signal());
    });
}
fn main() {}
