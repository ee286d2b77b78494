// An endpoint and the queues, counters and address vectors bound to it
// are of one domain, so of one threading model: a thread-safe queue
// cannot be bound to a serialized endpoint, nor the other way round.
use libfabric::cq::Msg;
use libfabric::ep::CqBind;
use libfabric::{CompletionQueue, Counter, CntrBind, Endpoint, ThreadDomain};
fn bind(
    ep: &Endpoint<ThreadDomain>,
    safe_cq: &CompletionQueue<Msg>,
    safe_ep: &Endpoint,
    serialized_cntr: &Counter<ThreadDomain>,
) {
    let _ = ep.bind_cq(safe_cq, CqBind::TRANSMIT);
    let _ = safe_ep.bind_cntr(serialized_cntr, CntrBind::SEND);
}
fn main() {}
