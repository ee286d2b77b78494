#![deny(clippy::undocumented_unsafe_blocks)]
#[path = "bench/baselines.rs"]
mod baselines;
#[path = "bench/micro.rs"]
mod micro;
fn main() {
    let q = micro::Queues::open("tcp", "127.0.0.1").unwrap();
    for case in micro::CASES {
        let iters = if case.kind == micro::Kind::WakeUp { 200 } else { 20000 };
        for _ in 0..3 {
            let c = (case.c)(&q, iters).unwrap();
            let r = (case.rust)(&q, iters).unwrap();
            println!("{:40} C {:10.1} Rust {:10.1} {:.3}", case.name, c, r, r / c);
        }
    }
}
