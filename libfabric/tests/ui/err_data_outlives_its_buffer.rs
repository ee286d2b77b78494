// An error entry's err_data lives in the caller's buffer, no longer.
use libfabric::eq::ErrDataBuf;
fn read(eq: &libfabric::EventQueue) -> Vec<u8> {
    let err_data;
    {
        let mut buf = ErrDataBuf::new();
        let e = eq.read_err(&mut buf).unwrap().unwrap();
        err_data = e.err_data();
    }
    err_data.to_vec()
}
fn main() {}
