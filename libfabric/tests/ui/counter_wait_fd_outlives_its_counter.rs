// A counter's wait fd belongs to the counter: it cannot be used after the
// counter is gone.
use libfabric::wait::Waitable;
fn fd(domain: &libfabric::Domain) -> libfabric::wait::WaitFd<'static> {
    let counter = libfabric::Counter::open(domain, &Default::default()).unwrap();
    counter.wait_fd().unwrap()
}
fn main() {}
