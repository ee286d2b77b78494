// An error entry's err_data is what the provider gave: strerror hands it
// back to the provider, which may interpret it (fi_eq(3)), so it cannot be
// replaced.
fn text(eq: &libfabric::EventQueue, mut e: libfabric::eq::EqError<'_>) -> String {
    let forged = [0xffu8; 64];
    e.err_data = &forged;
    eq.strerror(&e)
}
fn cq_text(
    cq: &libfabric::CompletionQueue<libfabric::cq::Msg>,
    mut e: libfabric::cq::CqError<'_>,
) -> String {
    e.err_data = std::borrow::Cow::Borrowed(&[0xffu8; 64]);
    cq.strerror(&e)
}
fn main() {}
