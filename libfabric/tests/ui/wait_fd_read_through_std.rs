// The wait fd is the provider's: safe code may poll it, never read it or
// change it (that would lose the wake-ups waiters count on).
use libfabric::wait::Waitable;
fn steal(eq: &libfabric::EventQueue) {
    let fd = eq.wait_fd().unwrap();
    let _owned = fd.try_clone_to_owned();
}
fn main() {}
