//! Providers that register the application's memory for more access than
//! asked. rxm with its write rendezvous (`FI_OFI_RXM_USE_RNDV_WRITE`)
//! registers memory given for receives for peers' writes, so its domains
//! are refused: whether the variable was on when libfabric started, or is
//! on now. Each case runs in a process of its own, started with the
//! environment it needs (libfabric reads the variable once, at its start).
mod common;

use common::provider;
use libfabric::info::EpType;
use libfabric::{getinfo, BufferPool, Domain, Error, Fabric, Hints};
use std::process::Command;

/// The child's case, in its environment.
const CASE: &str = "LIBFABRIC_TEST_WIDENED_ACCESS_CASE";
const RNDV_WRITE: &str = "FI_OFI_RXM_USE_RNDV_WRITE";

/// rxm over the suite's message provider, or over tcp.
fn rxm() -> String {
    let p = provider();
    if p.contains("ofi_rxm") {
        p
    } else {
        "tcp;ofi_rxm".to_string()
    }
}

/// `fi_getinfo` for an rxm RDM endpoint on the loopback, a fabric, and the
/// result of opening its domain (with a pool, when it opens).
fn open_domain() -> Result<(), Error> {
    let list = getinfo(
        &Hints::new()
            .provider(rxm())
            .ep_type(EpType::Rdm)
            .node("127.0.0.1"),
    )
    .unwrap_or_else(|e| panic!("{}: no fi_info ({e})", rxm()));
    let info = list.first().expect("an fi_info");
    let fabric = Fabric::open(info).unwrap();
    let domain = Domain::open(&fabric, info)?;
    BufferPool::new(&domain, 1, 64).map(drop)
}

fn assert_refused(got: Result<(), Error>, when: &str) {
    let e = got.expect_err(when);
    assert!(matches!(e, Error::Unsupported { .. }), "{when}: {e}");
    assert!(e.to_string().contains(RNDV_WRITE), "{when}: {e}");
}

/// Runs `case` in a child process (this binary, only `child_case`), with
/// the write rendezvous variable set to `rndv_write` (or unset) from its
/// start.
fn run_child(case: &str, rndv_write: Option<&str>) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child_case", "--exact", "--nocapture", "--test-threads=1"])
        .env(CASE, case);
    match rndv_write {
        Some(v) => cmd.env(RNDV_WRITE, v),
        None => cmd.env_remove(RNDV_WRITE),
    };
    let out = cmd.output().expect("the child process");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(&format!("case {case}: passed")),
        "case {case}: {}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn rxm_with_its_write_rendezvous_on_at_start_is_refused() {
    run_child("on_at_start", Some("1"));
}

#[test]
fn rxm_with_its_write_rendezvous_turned_off_after_start_is_refused() {
    run_child("off_after_start", Some("yes"));
}

#[test]
fn rxm_with_its_write_rendezvous_turned_on_after_start_is_refused() {
    run_child("on_after_start", None);
}

#[test]
fn rxm_with_its_write_rendezvous_off_opens() {
    run_child("off", Some("0"));
}

/// The child's side: one case, named by [`CASE`]. In the parent's run
/// (no case) it only checks that rxm domains open here.
#[test]
fn child_case() {
    let Ok(case) = std::env::var(CASE) else {
        if std::env::var_os(RNDV_WRITE).is_some() {
            return println!("SKIP: {RNDV_WRITE} is set: rxm domains are refused here");
        }
        open_domain().unwrap_or_else(|e| panic!("{}: {e}", rxm()));
        return;
    };
    match case.as_str() {
        "on_at_start" => assert_refused(open_domain(), "on at start"),
        "off_after_start" => {
            // libfabric starts with it on; turned off after, it still is.
            assert_refused(open_domain(), "on at start");
            std::env::set_var(RNDV_WRITE, "0");
            assert_refused(open_domain(), "turned off after libfabric started");
        }
        "on_after_start" => {
            open_domain().unwrap_or_else(|e| panic!("off at start: {e}"));
            std::env::set_var(RNDV_WRITE, "on");
            assert_refused(open_domain(), "turned on after libfabric started");
            std::env::set_var(RNDV_WRITE, "FALSE");
            open_domain().unwrap_or_else(|e| panic!("off again: {e}"));
        }
        "off" => open_domain().unwrap_or_else(|e| panic!("set to 0: {e}")),
        other => panic!("no case {other}"),
    }
    println!("case {case}: passed");
}
