// A pollfd set polls its queues' fds: it cannot be used after a queue it
// was refreshed from is gone (the fd number may belong to another file).
use libfabric::cq::{CqAttr, Msg};
use libfabric::wait::{PollFdSet, WaitObj};
use libfabric::{CompletionQueue, Domain};
fn poll(domain: &Domain) {
    let mut set = PollFdSet::new();
    {
        let attr = CqAttr::new().wait(WaitObj::PollFd);
        let cq = CompletionQueue::<Msg>::open(domain, &attr).unwrap();
        set.refresh(&cq).unwrap();
    }
    set.poll(None).unwrap();
}
fn main() {}
