// No write while the region is shared.
fn main() {
    let ctx = ibverbs_async::Context::open("rxe0").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut mr = pd.reg_mr(64, ibverbs_async::AccessFlags::LOCAL_WRITE).unwrap();
    let shared = &mr;
    mr.write(0, b"x").unwrap();
    let _ = shared.len();
}
