// Taking a completion's context by hand would leave its buffer neither
// reclaimed nor handed back (its slot taken for good): only the crate can
// call take_context.
use libfabric::cq::{CompletionEntry, MsgEntry};
fn take(entry: &MsgEntry) {
    let _ = entry.take_context(Default::default());
}
fn main() {}
