// Borrowed memory registered for a scope cannot be reached through the
// borrow while it is registered: peers may be writing it.
use libfabric::mr::{MemoryRegion, MrAccess};
fn register(domain: &libfabric::Domain) {
    let mut bytes = vec![0u8; 64];
    let _ = MemoryRegion::scope(domain, &mut bytes, MrAccess::REMOTE_WRITE, |_region| {
        bytes[0] = 1;
    });
}
fn main() {}
