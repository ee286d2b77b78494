// The wait fd belongs to the queue: it cannot be used after the queue is gone.
use libfabric::wait::Waitable;
fn fd(fabric: &libfabric::Fabric) -> libfabric::wait::WaitFd<'static> {
    let eq = libfabric::EventQueue::open(fabric, &Default::default()).unwrap();
    eq.wait_fd().unwrap()
}
fn main() {}
