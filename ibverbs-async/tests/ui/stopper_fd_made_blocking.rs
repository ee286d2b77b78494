// A stopper's eventfd is polled, never re-flagged: with O_NONBLOCK cleared
// on it, `reset` of a stopper that is not stopped would block for ever.
// Only its number and a poll-only `EventFd` are handed out.
use std::os::fd::AsFd;

fn make_blocking(stopper: &ibverbs_async::Stopper) {
    let fd = stopper.as_fd();
    let _ = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()));
    let _owned = stopper.fd().try_clone_to_owned();
}

fn main() {}
