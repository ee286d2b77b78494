// Completions are not Clone: each hands its buffer back at most once.
use libfabric::cq::MsgEntry;
fn twice(pool: &libfabric::BufferPool, entry: &MsgEntry) {
    let mut copy = MsgEntry::clone(entry);
    let _ = pool.reclaim(&copy);
}
fn main() {}
