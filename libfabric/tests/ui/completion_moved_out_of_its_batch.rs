// A completion stays in the batch it was read in: moved out (or swapped
// into another batch, or into an array read over later), it could outlive
// the batch, which is how the crate knows that no completion naming a
// buffer taken back from a closed endpoint is still held.
use libfabric::cq::{Msg, MsgEntry, CqRead};
use libfabric::CompletionQueue;
fn moved(cq: &CompletionQueue<Msg>, other: &mut [MsgEntry; 4]) {
    let mut entries: [MsgEntry; 4] = Default::default();
    let read = cq.read(&mut entries);
    if let Ok(CqRead::Completions(c)) = read {
        let _owned = std::mem::take(&mut c[0]);
        std::mem::swap(&mut c[1], &mut other[0]);
    }
}
fn main() {}
