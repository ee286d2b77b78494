// A TryWaitSet takes the queues of any threading model (a completion
// queue of a FI_THREAD_DOMAIN domain is read without locks), and calls
// fi_trywait on them: it stays on the thread it was made on, moved or
// shared, whatever queues it holds.
use libfabric::cq::Msg;
use libfabric::wait::TryWaitSet;
use libfabric::{CompletionQueue, EventQueue, Fabric, ThreadDomain};
fn moved(fabric: &Fabric, cq: &CompletionQueue<Msg, ThreadDomain>) {
    let mut set = TryWaitSet::new(fabric, &[cq]).unwrap();
    std::thread::scope(|s| {
        s.spawn(move || set.trywait());
    });
}
fn shared(fabric: &Fabric, eq: &EventQueue) {
    let set = TryWaitSet::new(fabric, &[eq]).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| format!("{:?}", &set));
    });
}
fn main() {}
