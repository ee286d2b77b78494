// A domain opened with FI_THREAD_DOMAIN leaves serialization of all its
// objects to the application (fi_domain(3)): its handles stay on the
// thread that opened it, neither moved nor shared.
use libfabric::{Domain, ThreadDomain};
fn moved(domain: Domain<ThreadDomain>) {
    std::thread::spawn(move || drop(domain));
}
fn shared(domain: &Domain<ThreadDomain>) {
    std::thread::scope(|s| {
        s.spawn(|| domain.deferred_closes());
    });
}
fn main() {}
