//! The shm endpoints of this process that others may still address, and
//! the closes put off for them (see [`quirks::closed_peers_dangle`]).
//!
//! shm hands an endpoint that maps a peer of the same process the peer's
//! own mapping of its region instead of mapping it again, and the peer's
//! close unmaps it: every later use of the entry (a send, an RMA, the
//! progress of an operation toward the peer or of a command the peer left
//! behind, an endpoint enabled on the vector) reads or writes unmapped
//! memory, or memory mapped there since.
//!
//! So the provider close of a shm endpoint waits, the endpoint kept whole
//! here ("parked": its queues, vector and domain stay open with it, its
//! buffers with the provider), until no endpoint left open may still use
//! its region: every address vector that may map it has only endpoints
//! closed by the application bound to it. Those then close together, with
//! the progress of all their queues held off, so that none of them runs
//! while another one's region is gone. An address vector may map an
//! endpoint when its address was inserted there, or when the endpoint's
//! own vector holds the address of an endpoint bound there (a send makes
//! the receiver map the sender: `smr_progress_connreq`,
//! `prov/shm/src/smr_progress.c` 754-785 in 1.17).
//!
//! A vector that may map an endpoint that closed refuses endpoints from
//! then on (their `fi_enable` maps every entry of the vector into the new
//! endpoint, reading each peer's region: `smr_exchange_all_peers` from
//! `smr_ep_ctrl`, `prov/shm/src/smr_ep.c` 1714, and `smr_map_to_endpoint`,
//! `prov/util/src/util_shm.c` 427-446, in 1.17), and the
//! address of an endpoint that closed is refused by every vector (the
//! provider keeps its name, with the unmapped region, in the list it looks
//! peers of this process up in for the life of the process:
//! `smr_map_to_region`, `util_shm.c` 373-380; `smr_av.c` 95-102 in 2.6).
//! The names of the endpoints that closed are kept for the life of the
//! process as well, as the provider keeps its own entry for each.
//!
//! Not covered: from libfabric 1.21 an endpoint's close answers each large
//! message left unexpected at it by writing into its sender's region
//! (`smr_discard`, `prov/shm/src/smr_ep.c` 1266-1280 in 1.22; 1.17's,
//! 1568-1574, writes nothing). Two endpoints closing together that hold
//! each other's large unexpected messages can then not be closed in any
//! order without one writing into the other's unmapped region.
//!
//! [`quirks::closed_peers_dangle`]: crate::quirks::closed_peers_dangle

use crate::ep::EpInner;
use crate::error::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

/// An endpoint enabled (or being enabled) on a shm domain.
struct EpRec {
    /// Its name, as the provider compares it (see [`normalize`]).
    name: Vec<u8>,
    /// Its address vector's id.
    av: u64,
    /// Closed by the application, open in the provider.
    parked: Option<EpInner>,
}

/// An open address vector of a shm domain.
#[derive(Default)]
struct AvRec {
    /// The names inserted, by address, until the provider removes them.
    names: BTreeMap<u64, Vec<u8>>,
    /// The names of the endpoints ever enabled on it: those a peer may
    /// have sent to, which maps the peer into this vector.
    bound: BTreeSet<Vec<u8>>,
    /// It may map an endpoint that closed: endpoints are refused.
    tainted: bool,
}

pub(crate) struct Registry {
    eps: BTreeMap<u64, EpRec>,
    avs: BTreeMap<u64, AvRec>,
    /// The names of the endpoints closed in the provider.
    dead: BTreeSet<Vec<u8>>,
    /// The names of this process's endpoints handed to the application.
    own: BTreeSet<Vec<u8>>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    eps: BTreeMap::new(),
    avs: BTreeMap::new(),
    dead: BTreeSet::new(),
    own: BTreeSet::new(),
});

/// shm's `SMR_NAME_MAX`: an address is kept up to this many bytes, NUL
/// included.
const SMR_NAME_MAX: usize = 256;

/// The registry, locked. Nothing may drop an endpoint while holding it
/// (a parked endpoint's drop takes it).
pub(crate) fn lock() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// A shm address as the provider compares it: up to its NUL, and after the
/// `://` of its prefix (`smr_no_prefix`, `include/ofi_shm.h` 203-208 in
/// 1.17).
pub(crate) fn normalize(addr: &[u8]) -> Vec<u8> {
    let end = addr.iter().position(|&b| b == 0).unwrap_or(addr.len());
    let addr = &addr[..end];
    match addr.windows(3).position(|w| w == b"://") {
        Some(at) => addr[at + 3..].to_vec(),
        None => addr.to_vec(),
    }
}

/// Refuses the name of a peer whose region file another user could have
/// written. shm maps the file an address names (`/dev/shm/<name>`) and
/// trusts what it reads there: `smr_map_to_region` maps as many bytes as
/// the file's header says, without checking the mapping, and the insert
/// then writes through it (`prov/util/src/util_shm.c` 383-425 in 1.17;
/// `prov/shm/src/smr_util.c` 374-412 in 2.1): a file whose header says 0
/// crashed the insert. Another user can create any name in `/dev/shm`;
/// they cannot change, remove or replace a file of this user's there
/// (shm creates its files 0600, and `/dev/shm` is sticky). So the file
/// must exist, be a regular file of this process's user, and be writable
/// by nobody else; a file of this user is trusted as the user's own
/// processes are (any of them could also write this process's memory).
/// A name whose file is missing names no endpoint yet: refused too
/// ([`Error::State`]: the peer may not be enabled yet), unless `ours`,
/// the name of an endpoint of this process, whose file its enable makes.
///
/// Not covered: the check is made at the insert. libfabric 2.x maps a
/// peer at the first send to it (`smr_map_add`, `smr_util.c` 557-593 in
/// 2.1), 1.17 and 1.22 also when the file was not ready at the insert;
/// and a peer that exits unlinks its file, after which another user may
/// create one under its name. A file made in between is mapped unchecked.
fn check_region_file(name: &[u8], ours: bool) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    // shm_open(3) skips leading slashes; a name with another slash was
    // refused before (check_insert).
    let file = name
        .iter()
        .position(|&b| b != b'/')
        .map_or(&[][..], |at| &name[at..]);
    let path = std::path::Path::new("/dev/shm").join(std::ffi::OsStr::from_bytes(file));
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if ours {
                return Ok(());
            }
            return Err(Error::State {
                call: "fi_av_insert",
                reason: "the shm address names no enabled endpoint (its region file, \
                         /dev/shm/<name>, is missing): insert it once the peer is enabled",
            });
        }
        Err(e) => return Err(Error::system("stat of a shm region file", e)),
    };
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if !meta.file_type().is_file() || meta.uid() != euid || meta.mode() & 0o022 != 0 {
        return Err(Error::InvalidArgument(
            format!(
                "fi_av_insert: the shm address {:?} names a region file that is not a regular \
                 file of this process's user writable by that user alone: shm would map it and \
                 trust what it reads there",
                String::from_utf8_lossy(name)
            )
            .into(),
        ));
    }
    Ok(())
}

fn closed_peer(call: &'static str) -> Error {
    Error::State {
        call,
        reason: "the address names a shm endpoint of this process that was closed: the provider would use its unmapped memory",
    }
}

impl Registry {
    /// Refuses the name of an endpoint that closed (before `fi_av_insert`),
    /// and names the provider would read otherwise than this module: the
    /// provider keeps the first 255 bytes of an address
    /// (`smr_map_add`, `prov/util/src/util_shm.c` 501-502 in 1.17), and
    /// `shm_open` ignores leading slashes (so `/name` maps the file of
    /// `name` under another name, `util_shm.c` 383). No shm endpoint's name
    /// is that long, and one with a slash is taken only as the name of an
    /// endpoint of this process (the provider compares those exactly).
    pub(crate) fn check_insert(&self, name: &[u8], whole: &[u8]) -> Result<()> {
        let end = whole.iter().position(|&b| b == 0).unwrap_or(whole.len());
        let slashed = name.contains(&b'/') && !self.eps.values().any(|e| e.name == name);
        if end >= SMR_NAME_MAX || slashed {
            return Err(Error::InvalidArgument(
                "a shm address of 255 bytes or more, or with a '/' in its name that names no \
                 endpoint of this process, is read by the provider as another name"
                    .into(),
            ));
        }
        if self.dead.contains(name) {
            return Err(closed_peer("fi_av_insert"));
        }
        // An endpoint of this process may not have made its file yet (it
        // does when enabled): a missing file is taken for its name alone.
        let ours = self.own.contains(name) || self.eps.values().any(|e| e.name == name);
        check_region_file(name, ours)
    }

    /// `name`, the name of an endpoint of this process, was handed to the
    /// application: an insert of it before the endpoint made its region
    /// file (when enabled) is taken, the file checked if it exists.
    pub(crate) fn handed_out(&mut self, name: &[u8]) {
        self.own.insert(normalize(name));
    }

    /// `name` was inserted into vector `av` at `addr`.
    pub(crate) fn inserted(&mut self, av: u64, addr: u64, name: Vec<u8>) {
        self.avs.entry(av).or_default().names.insert(addr, name);
    }

    /// The provider removed `addr` from vector `av`.
    pub(crate) fn removed(&mut self, av: u64, addr: u64) {
        if let Some(rec) = self.avs.get_mut(&av) {
            rec.names.remove(&addr);
        }
    }

    /// Vector `av` is closing: nothing can be bound to it any more, and
    /// its map goes with it.
    pub(crate) fn av_closed(&mut self, av: u64) {
        self.avs.remove(&av);
    }

    /// Endpoint `id` named `name` is about to be enabled on vector `av`:
    /// refused on a vector that may map an endpoint that closed, or under
    /// the name of one.
    pub(crate) fn register(&mut self, id: u64, name: Vec<u8>, av: u64) -> Result<()> {
        if self.dead.contains(&name) {
            return Err(Error::State {
                call: "fi_enable",
                reason: "a shm endpoint of this process that was closed had this endpoint's name, and the provider would hand out its unmapped memory for it",
            });
        }
        let rec = self.avs.entry(av).or_default();
        if rec.tainted {
            return Err(Error::State {
                call: "fi_enable",
                reason: "the address vector may map a shm endpoint of this process that was closed, whose memory enabling an endpoint on it would read: use another address vector",
            });
        }
        rec.bound.insert(name.clone());
        self.eps.insert(
            id,
            EpRec {
                name,
                av,
                parked: None,
            },
        );
        Ok(())
    }

    /// Whether vector `x` may map endpoint `m`: `x` holds its name, or `m`
    /// posted to an endpoint bound to `x` (the provider sends its name with
    /// the first post to a peer, `smr_send_name`, and the peer maps it by
    /// that name into its vector, `smr_progress_connreq`,
    /// `prov/shm/src/smr_progress.c` 754-785 in 1.22). What `m` posted to
    /// is known as the addresses of its vector it used (an over-estimate;
    /// all of them if unknown).
    /// Whether an endpoint bound to vector `av` that posted to the
    /// addresses `posted_to` names (bit `addr % 64`, see
    /// `EpInner::posted_to`) may have posted to an endpoint of another
    /// process: to an address whose name is not that of an endpoint of
    /// this process (open, its close put off, or closed), or that the
    /// vector no longer records. A peer of this process can carry nothing
    /// out after this endpoint's close: the close is put off until none
    /// may map it (see `closable`).
    pub(crate) fn may_have_posted_elsewhere(&self, av: u64, posted_to: u64) -> bool {
        if posted_to == 0 {
            return false;
        }
        let Some(rec) = self.avs.get(&av) else {
            return true;
        };
        let local = |n: &Vec<u8>| self.dead.contains(n) || self.eps.values().any(|e| e.name == *n);
        (0..64u64)
            .filter(|bit| posted_to & (1 << bit) != 0)
            .any(|bit| {
                let mut names = rec.names.iter().filter(|(&a, _)| a & 63 == bit);
                match names.next() {
                    None => true,
                    Some((_, first)) => !local(first) || names.any(|(_, n)| !local(n)),
                }
            })
    }

    fn may_map(&self, x: &AvRec, m: &EpRec) -> bool {
        if x.names.values().any(|n| *n == m.name) {
            return true;
        }
        match self.avs.get(&m.av) {
            Some(own) => own.names.iter().any(|(&addr, n)| {
                x.bound.contains(n)
                    && m.parked
                        .as_ref()
                        .is_none_or(|ep| ep.may_have_posted_to(addr))
            }),
            None => false,
        }
    }

    /// The parked endpoints that may close now, taken out: the largest set
    /// of them such that every vector that may map one of them has only
    /// endpoints of the set bound to it. Their names are dead from here,
    /// and the vectors that may map them refuse endpoints.
    fn closable(&mut self) -> Vec<EpInner> {
        let mut set: BTreeSet<u64> = self
            .eps
            .iter()
            .filter(|(_, r)| r.parked.is_some())
            .map(|(&id, _)| id)
            .collect();
        // Which parked endpoints each vector may map.
        let mut mapped_by: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for &id in &set {
            let m = &self.eps[&id];
            for (&xid, x) in &self.avs {
                if self.may_map(x, m) {
                    mapped_by.entry(xid).or_default().push(id);
                }
            }
        }
        // A vector with an endpoint outside the set keeps every endpoint it
        // may map open; that endpoint leaves the set, and so its own vector
        // keeps those it may map open in turn.
        let mut blocked: BTreeSet<u64> = self
            .eps
            .values()
            .filter(|e| e.parked.is_none())
            .map(|e| e.av)
            .collect();
        let mut queue: Vec<u64> = blocked.iter().copied().collect();
        while let Some(xid) = queue.pop() {
            for id in mapped_by.get(&xid).map(Vec::as_slice).unwrap_or(&[]) {
                if set.remove(id) {
                    let own = self.eps[id].av;
                    if blocked.insert(own) {
                        queue.push(own);
                    }
                }
            }
        }
        if set.is_empty() {
            return Vec::new();
        }
        let tainted: Vec<u64> = self
            .avs
            .iter()
            .filter(|(_, x)| set.iter().any(|id| self.may_map(x, &self.eps[id])))
            .map(|(&xid, _)| xid)
            .collect();
        for xid in tainted {
            if let Some(x) = self.avs.get_mut(&xid) {
                x.tainted = true;
            }
        }
        let mut members = Vec::with_capacity(set.len());
        for id in set {
            if let Some(rec) = self.eps.remove(&id) {
                self.dead.insert(rec.name);
                members.extend(rec.parked);
            }
        }
        members
    }
}

/// The application closed `ep`, a registered endpoint: it is kept until
/// the endpoints that may address it are closed too, and whatever may
/// close now (it, or it with others parked before) closes.
pub(crate) fn park(ep: EpInner) {
    let members = {
        let mut registry = lock();
        match registry.eps.get_mut(&ep.id()) {
            Some(rec) => {
                rec.parked = Some(ep);
                registry.closable()
            }
            // Not registered: closes alone (outside the lock).
            None => vec![ep],
        }
    };
    crate::ep::release_group(members);
}
