// A queue's wait poison and progress lock are the crate's: cleared from
// outside, a wait on an rxm, rxd or shm queue would call into a closed
// endpoint; held from outside, an endpoint's close would wait on it.
use libfabric::cq::Msg;
use libfabric::wait::Waitable;
use libfabric::CompletionQueue;
fn clear(cq: &CompletionQueue<Msg>) {
    if let Some(poison) = cq.wait_poison(Default::default()) {
        poison.store(false, std::sync::atomic::Ordering::Relaxed);
    }
    let _held = cq.progress_lock(Default::default());
}
fn main() {}
