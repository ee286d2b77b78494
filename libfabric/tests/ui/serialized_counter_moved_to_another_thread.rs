// A counter of a FI_THREAD_DOMAIN or FI_THREAD_COMPLETION domain runs the
// provider's progress without its locks: it stays on its domain's thread.
use libfabric::{Counter, ThreadCompletion, ThreadDomain};
fn moved(cntr: Counter<ThreadDomain>) {
    std::thread::spawn(move || cntr.read());
}
fn shared(cntr: &Counter<ThreadCompletion>) {
    std::thread::scope(|s| {
        s.spawn(|| cntr.read());
    });
}
fn main() {}
