// A queue's progress lock is the crate's: held from outside, an endpoint's
// close would wait on it; and the same word carries the flag that refuses
// waits once an rxm, rxd or shm endpoint bound to the queue closed.
use libfabric::cq::Msg;
use libfabric::wait::Waitable;
use libfabric::CompletionQueue;
fn hold(cq: &CompletionQueue<Msg>) {
    let _held = cq.progress_lock(Default::default());
}
fn main() {}
