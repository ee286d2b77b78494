// An endpoint of a FI_THREAD_DOMAIN domain posts without the provider's
// locks: it cannot be moved to, or used from, another thread.
use libfabric::{Endpoint, ThreadDomain};
fn moved(ep: Endpoint<ThreadDomain>) {
    std::thread::spawn(move || ep.enable());
}
fn shared(ep: &Endpoint<ThreadDomain>) {
    std::thread::scope(|s| {
        s.spawn(|| ep.enable());
    });
}
fn main() {}
