//! Poll sets (`fi_poll_open`, `fi_poll_add`, `fi_poll_del`, `fi_poll`):
//! one call that progresses several completion queues and counters of a
//! domain and says which have new completions.
//!
//! Poll sets are deprecated in libfabric 2.x but present in 1.17.
//!
//! ```
//! use libfabric::{info::{getinfo, Hints}, cq::{CqAttr, Msg}, eq::Fid, poll::PollSet, CompletionQueue, Domain, Fabric};
//! let list = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))?;
//! let info = list.first().unwrap();
//! let domain = Domain::open(&Fabric::open(info)?, info)?;
//! let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new())?;
//! let set = PollSet::open(&domain)?;
//! set.add(&cq)?;
//! let mut ready = [Fid::default(); 4];
//! assert_eq!(set.poll(&mut ready)?, 0, "no completions yet");
//! # Ok::<(), libfabric::Error>(())
//! ```

use crate::cq::{CompletionQueue, Format};
use crate::domain::{Domain, DomainInner};
use crate::eq::Fid;
use crate::error::{check, check_len, Error, Handback, ObjectKind, Result};
use crate::fid::{close_last, OwnedFid};
use crate::threading::{ThreadModel, ThreadSafe};
use crate::wait::{sealed, ProgressMember};
use libfabric_sys::fabric as sys;
use std::ffi::c_void;
use std::ptr;
use std::sync::{Arc, Mutex};

pub(crate) struct PollInner {
    fid: OwnedFid<sys::fid_poll>,
    /// The queues and counters in the set, kept open while they are in it.
    members: Mutex<Vec<Arc<dyn ProgressMember>>>,
    _domain: Arc<DomainInner>,
}

impl PollInner {
    /// Takes every member out of the set (`fi_poll_del`): libfabric's util
    /// poll set frees only the set at close, not its member list entries
    /// (`util_poll_close`, `prov/util/src/util_poll.c` 134-149 in 1.17), so closing it with
    /// members would leak them.
    fn remove_all(&mut self) {
        if !self.fid.is_open() {
            return;
        }
        let members = self.members.get_mut().unwrap_or_else(|e| e.into_inner());
        for m in members.drain(..) {
            // SAFETY: the member is in the open set, and open (the Arc).
            unsafe { sys::fi_poll_del(self.fid.as_ptr(), m.member_fid(), 0) };
        }
    }
}

impl Drop for PollInner {
    fn drop(&mut self) {
        self.remove_all();
    }
}

/// What a [`PollSet`] holds: a [`CompletionQueue`] or a
/// [`Counter`](crate::Counter). Sealed.
pub trait Pollable: sealed::Sealed {
    /// The object, as the set keeps it. Only the crate can call it (the
    /// token).
    #[doc(hidden)]
    fn poll_member(&self, _: sealed::Token) -> PollMember;
}

/// A member of a poll set, as [`Pollable::poll_member`] hands it over.
#[doc(hidden)]
pub struct PollMember(pub(crate) Arc<dyn ProgressMember>);

impl<F: Format, T: ThreadModel> Pollable for CompletionQueue<F, T> {
    fn poll_member(&self, _: sealed::Token) -> PollMember {
        PollMember(self.inner.clone())
    }
}

/// An open poll set of completion queues and counters of one domain.
///
/// Deprecated by libfabric 2.0 (the `fi_poll_*` calls are marked
/// `FI_DEPRECATED_FUNC` in 2.6's headers), and marked `#[deprecated]` here
/// when the crate is built against 2.x headers. Prefer reading the queues,
/// or [`Waiter`](crate::wait::Waiter) over their wait fds.
///
/// `T` is the threading model of its domain (see
/// [`Domain`]); its members are of the same domain.
#[cfg_attr(
    libfabric_2,
    deprecated(note = "libfabric 2.x deprecates poll sets: read the queues, or use Waiter")
)]
pub struct PollSet<T: ThreadModel = ThreadSafe> {
    inner: Arc<PollInner>,
    _model: std::marker::PhantomData<T>,
}

impl<T: ThreadModel> Clone for PollSet<T> {
    fn clone(&self) -> Self {
        PollSet::from_inner(self.inner.clone())
    }
}

impl<T: ThreadModel> PollSet<T> {
    fn from_inner(inner: Arc<PollInner>) -> Self {
        PollSet {
            inner,
            _model: std::marker::PhantomData,
        }
    }

    /// `fi_poll_open`.
    ///
    /// # Errors
    /// [`Error::Call`] when `fi_poll_open` fails.
    #[doc(alias = "fi_poll_open")]
    pub fn open(domain: &Domain<T>) -> Result<Self> {
        domain.inner.run_deferred();
        let mut attr = sys::fi_poll_attr { flags: 0 };
        let mut raw = ptr::null_mut();
        // SAFETY: fi_poll(3): opens a poll set on an open domain; OwnedFid
        // closes it before the domain handle is released.
        let ret = unsafe { sys::fi_poll_open(domain.inner.fid.as_ptr(), &mut attr, &mut raw) };
        let fid = OwnedFid::opened("fi_poll_open", ret, raw)?;
        Ok(PollSet::from_inner(Arc::new(PollInner {
            fid,
            members: Mutex::new(Vec::new()),
            _domain: domain.inner.clone(),
        })))
    }

    /// `fi_poll_add` of a completion queue or counter of the same domain.
    /// A counter is reported by `poll` when its count or error count
    /// changed since the last time it was reported.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a queue or counter of another domain,
    /// or one already in the set; [`Error::Call`] when `fi_poll_add` fails.
    #[doc(alias = "fi_poll_add")]
    pub fn add(&self, member: &dyn Pollable) -> Result<()> {
        let PollMember(member) = member.poll_member(sealed::Token(()));
        if !Arc::ptr_eq(member.member_domain(), &self.inner._domain) {
            return Err(Error::InvalidArgument(
                "fi_poll_add: the queue or counter belongs to another domain".into(),
            ));
        }
        let mut members = self.inner.members.lock().unwrap_or_else(|e| e.into_inner());
        if members.iter().any(|m| Arc::ptr_eq(m, &member)) {
            // The util set would hold it twice and free one entry of it
            // at the first fi_poll_del.
            return Err(Error::InvalidArgument(
                "fi_poll_add: the queue or counter is already in the set".into(),
            ));
        }
        // SAFETY: both objects are open and of one domain; the set keeps
        // the member open (Arc below) while it is in it.
        let ret = unsafe { sys::fi_poll_add(self.inner.fid.as_ptr(), member.member_fid(), 0) };
        check("fi_poll_add", ret)?;
        members.push(member);
        Ok(())
    }

    /// `fi_poll_del` of a queue or counter added before.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for one not in the set;
    /// [`Error::Call`] when `fi_poll_del` fails (it stays in the set).
    #[doc(alias = "fi_poll_del")]
    pub fn remove(&self, member: &dyn Pollable) -> Result<()> {
        let PollMember(member) = member.poll_member(sealed::Token(()));
        let mut members = self.inner.members.lock().unwrap_or_else(|e| e.into_inner());
        let Some(at) = members.iter().position(|m| Arc::ptr_eq(m, &member)) else {
            return Err(Error::InvalidArgument(
                "fi_poll_del: the queue or counter is not in the set".into(),
            ));
        };
        // SAFETY: the member is in the open set.
        let ret = unsafe { sys::fi_poll_del(self.inner.fid.as_ptr(), member.member_fid(), 0) };
        check("fi_poll_del", ret)?;
        members.swap_remove(at);
        Ok(())
    }

    /// `fi_poll`: progresses the members and writes the fids of those with
    /// completions (queues) or a changed count (counters) into `ready`;
    /// returns how many.
    ///
    /// `ready` must have room for every member of the set: libfabric's
    /// util poll sets record a counter's change as seen even when they
    /// have no room to report it (`util_poll_run`,
    /// `prov/util/src/util_poll.c` 96-111 in 1.17), so a shorter array
    /// would lose changes for good.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `ready` is shorter than the set;
    /// [`Error::State`] while a member is bound to an endpoint that failed
    /// to enable (close that endpoint first); [`Error::Call`] when `fi_poll`
    /// fails.
    #[doc(alias = "fi_poll")]
    pub fn poll(&self, ready: &mut [Fid]) -> Result<usize> {
        const STACK: usize = 32;
        let members = self.inner.members.lock().unwrap_or_else(|e| e.into_inner());
        if ready.len() < members.len() {
            return Err(Error::InvalidArgument(
                format!(
                    "fi_poll: `ready` has room for {} of the set's {} members; a change \
                     reported to no room is lost (the util poll sets count it as seen)",
                    ready.len(),
                    members.len()
                )
                .into(),
            ));
        }
        if members.is_empty() {
            return Ok(0);
        }
        let count = members.len();
        let count_c = i32::try_from(count).map_err(|_| Error::TooLarge {
            what: "members of a poll set",
            limit: i32::MAX as usize,
            given: count,
        })?;
        let mut on_stack = [ptr::null_mut::<c_void>(); STACK];
        let mut on_heap = Vec::new();
        let contexts = if count <= STACK {
            &mut on_stack[..count]
        } else {
            on_heap.resize(count, ptr::null_mut::<c_void>());
            &mut on_heap[..]
        };
        // fi_poll runs the members' progress: under their progress locks.
        // The members' locks, on the stack for up to STACK members.
        let mut stack = [None; STACK];
        let mut heap = Vec::new();
        let locks = if members.len() <= STACK {
            for (slot, m) in stack.iter_mut().zip(members.iter()) {
                *slot = Some(m.lifecycle());
            }
            &mut stack[..members.len()]
        } else {
            heap.extend(members.iter().map(|m| Some(m.lifecycle())));
            &mut heap[..]
        };
        let ret = crate::wait::with_progress_guards(locks, || {
            // A member bound to an endpoint whose enable failed: its
            // progress must not run (see Endpoint::enable).
            if members.iter().any(|m| m.progress_refused()) {
                return None;
            }
            // SAFETY: fi_poll(3) writes at most count contexts, and
            // contexts has count of them.
            Some(unsafe { sys::fi_poll(self.inner.fid.as_ptr(), contexts.as_mut_ptr(), count_c) })
        });
        let ret = ret.ok_or_else(|| crate::wait::refused_progress("fi_poll"))?;
        let n = check_len("fi_poll", ret)?.min(count);
        let mut found = 0;
        for context in &contexts[..n] {
            if let Some(m) = members
                .iter()
                .find(|m| m.member_id() as usize == *context as usize)
            {
                ready[found] = Fid::from_raw(m.member_fid());
                found += 1;
            }
        }
        Ok(found)
    }

    /// Closes the set now (`fi_close`; its members are taken out first).
    ///
    /// # Errors
    /// [`Error::InUse`] while other handles exist; [`Error::Call`] when
    /// `fi_close` fails. The set comes back with the error, still open.
    pub fn close(self) -> Handback<Self> {
        close_last(self.inner, ObjectKind::PollSet, PollSet::from_inner, |i| {
            i.remove_all();
            i.fid.close()
        })
    }
}

impl<T: ThreadModel> std::fmt::Debug for PollSet<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollSet").finish_non_exhaustive()
    }
}
