// Memory regions are written through `&mut self`; they are not `Clone`, so
// two Rust handles cannot race on the contents.
fn main() {
    let ctx = ibverbs_async::Context::open("rxe0").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.reg_mr(64, ibverbs_async::AccessFlags::LOCAL_WRITE).unwrap();
    let _other = mr.clone();
}
