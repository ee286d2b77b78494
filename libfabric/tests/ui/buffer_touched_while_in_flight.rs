// A posted buffer belongs to the provider until its completion hands it back.
fn post(ep: &libfabric::Endpoint, pool: &libfabric::BufferPool) {
    let mut buf = pool.take().unwrap();
    ep.recv(buf).unwrap();
    buf[0] = 1;
}
fn main() {}
