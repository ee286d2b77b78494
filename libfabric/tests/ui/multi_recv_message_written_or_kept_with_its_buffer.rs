// A message of a multi-receive buffer is read-only: the provider may be
// writing the bytes after it, and the rest of its buffer, meanwhile. No
// `&mut` reaches it, and its buffer cannot be had while it is held.
fn write(message: &mut libfabric::Message) {
    message[0] = 1;
}
fn extend(message: &mut libfabric::Message) -> &mut [u8] {
    &mut message[..]
}
fn buffer_while_held(message: libfabric::Message) {
    let bytes: &[u8] = &message;
    let buffer = message.try_into_buffer().unwrap();
    println!("{} {}", bytes.len(), buffer.len());
}
fn main() {}
