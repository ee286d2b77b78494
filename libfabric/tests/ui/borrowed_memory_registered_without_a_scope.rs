// Memory borrowed for less than 'static is registered only for a scope:
// `register` would let a forgotten region keep it registered after the
// borrow ends.
use libfabric::mr::{MemoryRegion, MrAccess};
fn register(domain: &libfabric::Domain) {
    let mut bytes = vec![0u8; 64];
    let region = MemoryRegion::register(domain, &mut bytes[..], MrAccess::REMOTE_WRITE).unwrap();
    std::mem::forget(region);
}
fn main() {}
