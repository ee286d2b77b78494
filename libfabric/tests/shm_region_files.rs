//! shm maps the region file an inserted address names (`/dev/shm/<name>`)
//! and trusts its header: a file another user could have written, or a
//! missing one, is refused at the insert. (A crafted file whose header
//! says its region is 0 bytes long crashed the insert.) Runs with the
//! suite's provider set to shm.

mod common;

use common::provider;
use libfabric::conn::ConnConfig;
use libfabric::cq::Data;
use libfabric::info::InfoList;
use libfabric::info::{Caps, EpType};
use libfabric::{getinfo, Error, Fabric, Hints, Rdm};
use std::os::unix::fs::PermissionsExt;

fn shm_info() -> InfoList {
    getinfo(
        &Hints::new()
            .provider("shm")
            .ep_type(EpType::Rdm)
            .caps(Caps::MSG),
    )
    .expect("shm's fi_info")
}

fn shm_rdm() -> Option<Rdm<Data>> {
    if provider() != "shm" {
        println!("SKIP: shm region files are checked with the suite's provider set to shm");
        return None;
    }
    let list = shm_info();
    let info = list.first().expect("an fi_info");
    let fabric = Fabric::open(info).unwrap();
    Some(Rdm::<Data>::open_on(&fabric, info, 4, &ConnConfig::new()).unwrap())
}

/// A file under `/dev/shm` that looks like an initialised region (a pid)
/// whose header says it is 0 bytes long (the offsets of libfabric 1.17's
/// `struct smr_region`; on other versions the bytes are junk all the same).
struct Crafted(String);

impl Crafted {
    fn new(tag: &str, mode: u32) -> Crafted {
        Crafted::at(format!("libfabric_test_{tag}_{}", std::process::id()), mode)
    }

    /// The file of `name`, with permissions `mode`.
    fn at(name: String, mode: u32) -> Crafted {
        let crafted = Crafted(name);
        let mut header = vec![0u8; 4096];
        header[4..8].copy_from_slice(&1i32.to_ne_bytes());
        std::fs::write(crafted.path(), &header).unwrap();
        std::fs::set_permissions(crafted.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        crafted
    }

    fn path(&self) -> String {
        format!("/dev/shm/{}", self.0)
    }

    fn addr(&self) -> Vec<u8> {
        let mut addr = self.0.clone().into_bytes();
        addr.push(0);
        addr
    }
}

impl Drop for Crafted {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.path());
    }
}

fn assert_refused(rdm: &Rdm<Data>, addr: &[u8], what: &str) {
    match rdm.insert(addr) {
        Err(Error::InvalidArgument(e)) => println!("{what}: refused ({e})"),
        other => panic!("{what}: {other:?}"),
    }
}

#[test]
fn a_region_file_others_may_write_is_refused() {
    let Some(rdm) = shm_rdm() else { return };
    let file = Crafted::new("world_writable", 0o666);
    assert_refused(&rdm, &file.addr(), "a file writable by all");
    let file = Crafted::new("group_writable", 0o620);
    assert_refused(&rdm, &file.addr(), "a file writable by its group");
}

#[test]
fn a_region_file_of_another_user_is_refused() {
    let Some(rdm) = shm_rdm() else { return };
    let file = Crafted::new("other_user", 0o600);
    // SAFETY: geteuid(2) has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let other = if euid == 65534 { 65533 } else { 65534 };
    match std::os::unix::fs::chown(file.path(), Some(other), None) {
        Ok(()) => assert_refused(&rdm, &file.addr(), "a file of another user"),
        Err(e) => panic!("chown of {} to uid {other} (needs root): {e}", file.path()),
    }
}

#[test]
fn a_symlink_or_a_missing_region_file_is_refused() {
    let Some(rdm) = shm_rdm() else { return };
    let target = Crafted::new("link_target", 0o600);
    let link = format!("libfabric_test_link_{}", std::process::id());
    let link_path = format!("/dev/shm/{link}");
    let _ = std::fs::remove_file(&link_path);
    std::os::unix::fs::symlink(target.path(), &link_path).unwrap();
    let mut addr = link.clone().into_bytes();
    addr.push(0);
    assert_refused(&rdm, &addr, "a symbolic link");
    std::fs::remove_file(&link_path).unwrap();
    // No file: not an enabled endpoint (yet).
    match rdm.insert(&addr) {
        Err(Error::State {
            call: "fi_av_insert",
            reason,
        }) => {
            assert!(reason.contains("once the peer is enabled"), "{reason}");
        }
        other => panic!("a name with no file: {other:?}"),
    }
}

/// A name of this process's endpoint is taken before the endpoint made its
/// file, but a file someone else made under it first is checked.
#[test]
fn a_file_made_under_the_name_of_an_endpoint_of_this_process_is_checked() {
    let Some(rdm) = shm_rdm() else { return };
    let list = shm_info();
    let domain = libfabric::Domain::open(rdm.fabric(), list.first().unwrap()).unwrap();
    let ep = libfabric::Endpoint::open(&domain, list.first().unwrap()).unwrap();
    let name = ep.name().unwrap();
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let file = String::from_utf8_lossy(&name[..end]).into_owned();
    let file = file.rsplit("://").next().unwrap().to_string();
    // Not enabled: no file yet, and the name is taken.
    rdm.insert(&name)
        .expect("the name of an endpoint of this process");
    let _crafted = Crafted::at(file, 0o666);
    assert_refused(
        &rdm,
        &name,
        "a file made under this process's endpoint's name",
    );
}

#[test]
fn the_names_of_endpoints_of_this_user_are_inserted() {
    let Some(rdm) = shm_rdm() else { return };
    let peer = shm_rdm().unwrap();
    let name = peer.name().unwrap();
    rdm.insert(&name)
        .unwrap_or_else(|e| panic!("a peer's name {:?}: {e}", String::from_utf8_lossy(&name)));
    // Its own name too.
    rdm.insert(&rdm.name().unwrap()).unwrap();
}
