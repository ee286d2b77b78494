// A connection request is consumed by its one answer: it cannot be rejected
// twice, nor accepted after it was rejected.
fn answer(domain: &libfabric::Domain, request: libfabric::ConnRequest) {
    request.reject(b"no").unwrap();
    let _ = libfabric::Endpoint::from_request(domain, request);
}
fn main() {}
