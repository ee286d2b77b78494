// A Waiter borrows the queues whose fds it polls.
use libfabric::wait::Waiter;
fn waiter(fabric: &libfabric::Fabric) -> Waiter<'static> {
    let eq = libfabric::EventQueue::open(fabric, &Default::default()).unwrap();
    Waiter::new(&[&eq]).unwrap()
}
fn main() {}
