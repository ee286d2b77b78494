// The event fds are polled, never read: reading one through std would take
// an event from libibverbs (never acknowledged: destroy hangs), and its
// flags are the crate's.
fn steal(ctx: &ibverbs_async::Context, channel: &ibverbs_async::CompChannel) {
    let _owned = ctx.async_fd().try_clone_to_owned();
    let _also = channel.fd().try_clone_to_owned();
    let _fd: std::os::fd::BorrowedFd<'_> = std::os::fd::AsFd::as_fd(&ctx.async_fd());
}
fn main() {}
