// Reclaiming takes a completion's context through a shared reference, so
// completions are not Sync: two threads cannot reclaim one at once.
use libfabric::cq::{Msg, MsgEntry, CqRead};
use libfabric::{BufferPool, CompletionQueue};
fn both(cq: &CompletionQueue<Msg>, pool: &BufferPool) {
    let mut entries: [MsgEntry; 4] = Default::default();
    let read = cq.read(&mut entries);
    if let Ok(CqRead::Completions(c)) = read {
        let entry = &c[0];
        std::thread::scope(|s| {
            s.spawn(|| pool.reclaim(entry));
            s.spawn(|| pool.reclaim(entry));
        });
    }
}
fn main() {}
