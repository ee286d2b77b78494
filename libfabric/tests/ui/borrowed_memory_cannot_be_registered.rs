// Memory borrowed for less than 'static cannot be registered: a closed
// region's memory may have to be kept until RMA under way can no longer
// reach it, and a forgotten region would keep it registered after the
// borrow ends.
use libfabric::mr::{MemoryRegion, MrAccess};
fn register(domain: &libfabric::Domain) {
    let mut bytes = vec![0u8; 64];
    let region = MemoryRegion::register(domain, &mut bytes[..], MrAccess::REMOTE_WRITE).unwrap();
    std::mem::forget(region);
}
fn main() {}
