// A CQ opened with the MSG format is read into MSG entries only.
use libfabric::cq::{Msg, TaggedEntry};
fn read(cq: &libfabric::CompletionQueue<Msg>) {
    let mut entries: [TaggedEntry; 4] = Default::default();
    let _ = cq.read(&mut entries);
}
fn main() {}
