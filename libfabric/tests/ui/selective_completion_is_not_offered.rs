// Posts never ask for FI_COMPLETION, so FI_SELECTIVE_COMPLETION would keep
// every sent buffer from coming back: the flag is not offered.
fn main() {
    let _ = libfabric::ep::CqBind::SELECTIVE_COMPLETION;
}
