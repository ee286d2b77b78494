// A memory region's close and an address vector's inserts are calls on
// objects of the domain: under FI_THREAD_DOMAIN they stay on its thread.
use libfabric::{AddressVector, MemoryRegion, ThreadDomain};
fn region(mr: MemoryRegion<Vec<u8>, ThreadDomain>) {
    std::thread::spawn(move || drop(mr));
}
fn vector(av: AddressVector<ThreadDomain>) {
    std::thread::spawn(move || av.insert(b"peer"));
}
fn main() {}
