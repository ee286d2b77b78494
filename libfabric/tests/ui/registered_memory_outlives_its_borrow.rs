// A region over borrowed memory cannot leave its scope, so it cannot
// outlive the borrow (or be forgotten while still registered).
use libfabric::mr::{MemoryRegion, MrAccess};
fn register(domain: &libfabric::Domain) {
    let mut bytes = vec![0u8; 64];
    let mut escaped = None;
    let _ = MemoryRegion::scope(domain, &mut bytes, MrAccess::REMOTE_WRITE, |region| {
        escaped = Some(region);
    });
    drop(escaped);
}
fn main() {}
