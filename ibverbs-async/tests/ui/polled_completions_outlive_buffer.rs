// `Cq::poll` hands out the part of the caller's buffer it filled: the
// completions cannot outlive the buffer.
use ibverbs_async::{Cq, WorkCompletion};

fn first(cq: &Cq) -> &[WorkCompletion] {
    let mut buf = [WorkCompletion::default(); 4];
    cq.poll(&mut buf).unwrap()
}

fn main() {
    let ctx = ibverbs_async::Context::open("rxe0").unwrap();
    let cq = ctx.create_cq(4).unwrap();
    println!("{:?}", first(&cq));
}
