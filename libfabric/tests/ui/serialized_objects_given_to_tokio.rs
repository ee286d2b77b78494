// The tokio wrappers run provider calls on the runtime's threads (a
// counter's wait in spawn_blocking): they take thread-safe objects only.
use libfabric::cq::Msg;
use libfabric::tokio::{AsyncCompletionQueue, AsyncCounter};
use libfabric::{CompletionQueue, Counter, ThreadDomain};
fn wrap(cq: CompletionQueue<Msg, ThreadDomain>, cntr: Counter<ThreadDomain>) {
    let _ = AsyncCompletionQueue::new(cq);
    let _ = AsyncCounter::new(cntr);
}
fn main() {}
