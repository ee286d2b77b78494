//! The context's table of live objects: raw pointer -> weak reference.
//!
//! libibverbs reports asynchronous and completion events with a raw pointer
//! to the object they concern (`ibv_async_event.element.cq`, the `cq` out
//! argument of `ibv_get_cq_event`). Two rules hold for such a pointer:
//!
//! 1. The object cannot be freed before the event is acknowledged:
//!    `ibv_destroy_cq`/`_qp`/`_srq`/`_wq` wait, inside libibverbs, until every
//!    event the kernel handed out for the object has been acknowledged.
//! 2. So acknowledging must happen before destroying, on pain of deadlock,
//!    and acknowledging after destroying touches freed memory.
//!
//! Each table maps the pointer to a [`Weak`] of the object's shared inner
//! value. An event resolves its pointer to a strong [`Arc`], which keeps the
//! real destroy (run by the inner value's `Drop`) from starting until the
//! event is dropped; the event acknowledges in its own `Drop` before it
//! releases that `Arc`. When the `Weak` cannot be upgraded, the last handle
//! is being dropped right now and its thread is inside `ibv_destroy_*`,
//! waiting for this very acknowledgement: the reader acknowledges at once.
//!
//! Creation holds the table's lock across the `ibv_create_*` call and the
//! insertion, so an event for a new object that another thread reads at once
//! waits for the entry instead of missing it. Destruction never holds the
//! lock while it waits in `ibv_destroy_*`, and removes the entry afterwards
//! only if it still names the same object (the address may already be
//! reused by a new object).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::error::{Error, ObjectKind, Result};

/// A process-unique identity of a verbs object created through this crate.
///
/// Unlike the object's address or kernel handle, it is never reused, so an
/// [`AsyncEventInfo`](crate::AsyncEventInfo) copied out of an event can be
/// matched against objects safely after the event was acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId(u64);

impl ObjectId {
    pub(crate) fn next() -> ObjectId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ObjectId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The number behind the identity.
    #[must_use]
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

struct Slot<T> {
    id: ObjectId,
    weak: Weak<T>,
}

/// What a pointer from an event resolves to.
pub(crate) enum Lookup<T> {
    /// The object is alive; the event now holds it.
    Live(Arc<T>),
    /// The object's last handle is gone and its destroy is under way on
    /// another thread, waiting for this event's acknowledgement.
    Dying(ObjectId),
    /// Not created through this crate.
    Missing,
}

/// One kind of object of one context.
pub(crate) struct Table<T> {
    map: Mutex<HashMap<usize, Slot<T>>>,
}

impl<T> Table<T> {
    pub(crate) fn new() -> Table<T> {
        Table {
            map: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<usize, Slot<T>>> {
        // A panic while the lock is held leaves the map consistent (every
        // operation is a single insert/remove/get), so poisoning is ignored.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates an object and registers it under its raw address in one
    /// critical section. `create` returns the raw address and the inner
    /// value; it must not drop an object of this same table.
    pub(crate) fn create(&self, create: impl FnOnce() -> Result<(usize, Arc<T>)>) -> Result<Arc<T>>
    where
        T: Registered,
    {
        let mut map = self.lock();
        let (key, arc) = create()?;
        map.insert(
            key,
            Slot {
                id: arc.id(),
                weak: Arc::downgrade(&arc),
            },
        );
        Ok(arc)
    }

    /// Registers `arc` again under `key` (after a failed explicit destroy
    /// handed the object back in a new allocation).
    pub(crate) fn reinsert(&self, key: usize, arc: &Arc<T>)
    where
        T: Registered,
    {
        self.lock().insert(
            key,
            Slot {
                id: arc.id(),
                weak: Arc::downgrade(arc),
            },
        );
    }

    /// Resolves a raw address from an event.
    pub(crate) fn lookup(&self, key: usize) -> Lookup<T> {
        let map = self.lock();
        match map.get(&key) {
            None => Lookup::Missing,
            Some(slot) => match slot.weak.upgrade() {
                Some(arc) => Lookup::Live(arc),
                None => Lookup::Dying(slot.id),
            },
        }
        // The lock is released here; an upgraded Arc is returned, never
        // dropped under the lock (dropping the last one would destroy the
        // object, which removes its entry, which takes this lock).
    }

    /// Removes the entry of object `id` after it was destroyed.
    pub(crate) fn remove(&self, key: usize, id: ObjectId) {
        let mut map = self.lock();
        if map.get(&key).is_some_and(|slot| slot.id == id) {
            map.remove(&key);
        }
    }

    /// Number of entries (objects alive or being destroyed).
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// An inner value that lives in a [`Table`].
pub(crate) trait Registered {
    fn id(&self) -> ObjectId;
}

/// The inner value of an object with an explicit, fallible destroy.
pub(crate) trait Destroy: Sized {
    /// The kind named in [`Error::InUse`].
    const KIND: ObjectKind;

    /// Destroys the C object now. After `Ok`, `Drop` must do nothing.
    fn destroy_now(&mut self) -> Result<()>;

    /// Called with the object handed back in a new `Arc` after `destroy_now`
    /// failed, to register it again where it was registered.
    fn handed_back(_arc: &Arc<Self>) {}
}

/// Destroys the object behind `arc` if `arc` is its last strong reference;
/// otherwise, or if the destroy fails, hands the reference back with the
/// error.
pub(crate) fn destroy_arc<T: Destroy>(arc: Arc<T>) -> std::result::Result<(), (Arc<T>, Error)> {
    match Arc::try_unwrap(arc) {
        Ok(mut inner) => match inner.destroy_now() {
            Ok(()) => Ok(()),
            Err(err) => {
                let arc = Arc::new(inner);
                T::handed_back(&arc);
                Err((arc, err))
            }
        },
        Err(arc) => {
            let users = Arc::strong_count(&arc).saturating_sub(1);
            Err((
                arc,
                Error::InUse {
                    object: T::KIND,
                    users,
                },
            ))
        }
    }
}

/// The fields an object's handle shows in its `Debug` output, after its
/// identity.
pub(crate) trait Describe {
    fn describe(&self, d: &mut std::fmt::DebugStruct<'_, '_>);
}

/// The methods every handle over an `Arc` of a [`Destroy`] inner value
/// has: its identity, `same_as`, the explicit destroy that hands the handle
/// back on failure, and `Debug`.
macro_rules! handle {
    (
        $T:ident($Inner:ty), what = $what:literal,
        $(#[$destroy_doc:meta])* fn $destroy:ident = $call:literal
    ) => {
        impl $T {
            #[doc = concat!("The ", $what, "'s identity, as found in events and in `Debug` output.")]
            #[must_use]
            pub fn id(&self) -> $crate::registry::ObjectId {
                self.inner.id
            }

            #[doc = concat!("Whether two handles refer to the same ", $what, ".")]
            #[must_use]
            pub fn same_as(&self, other: &$T) -> bool {
                std::sync::Arc::ptr_eq(&self.inner, &other.inner)
            }

            $(#[$destroy_doc])*
            ///
            /// # Errors
            /// [`Error::InUse`](crate::Error::InUse), handing the handle
            /// back, while clones, child objects or unacknowledged events
            /// hold the object; [`Error::Call`](crate::Error::Call), handing
            /// it back too, when the C call fails.
            #[doc(alias = $call)]
            pub fn $destroy(self) -> std::result::Result<(), ($T, $crate::Error)> {
                $crate::registry::destroy_arc(self.inner).map_err(|(inner, e)| ($T { inner }, e))
            }
        }

        impl std::fmt::Debug for $T {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let mut d = f.debug_struct(stringify!($T));
                d.field("id", &self.inner.id);
                $crate::registry::Describe::describe(&*self.inner, &mut d);
                d.finish()
            }
        }
    };
}
pub(crate) use handle;

#[cfg(test)]
mod tests {
    use super::*;

    struct Obj(ObjectId);

    impl Registered for Obj {
        fn id(&self) -> ObjectId {
            self.0
        }
    }

    #[test]
    fn lookup_live_dying_missing() {
        let table = Table::<Obj>::new();
        let arc = table
            .create(|| Ok((0x1000, Arc::new(Obj(ObjectId::next())))))
            .unwrap();
        let id = arc.id();
        match table.lookup(0x1000) {
            Lookup::Live(found) => assert!(Arc::ptr_eq(&found, &arc)),
            _ => panic!("expected a live object"),
        }
        assert!(matches!(table.lookup(0x2000), Lookup::Missing));
        drop(arc);
        // The entry stays until the destroy removes it: the object is dying.
        assert!(matches!(table.lookup(0x1000), Lookup::Dying(d) if d == id));
        table.remove(0x1000, id);
        assert!(matches!(table.lookup(0x1000), Lookup::Missing));
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn remove_spares_a_new_object_at_the_same_address() {
        let table = Table::<Obj>::new();
        let old = table
            .create(|| Ok((0x1000, Arc::new(Obj(ObjectId::next())))))
            .unwrap();
        let old_id = old.id();
        drop(old);
        // A new object reuses the address before the old destroy finished.
        let new = table
            .create(|| Ok((0x1000, Arc::new(Obj(ObjectId::next())))))
            .unwrap();
        table.remove(0x1000, old_id);
        assert!(matches!(table.lookup(0x1000), Lookup::Live(_)));
        drop(new);
    }

    #[test]
    fn failed_creation_registers_nothing() {
        let table = Table::<Obj>::new();
        let r = table.create(|| Err(Error::invalid("no")));
        assert!(r.is_err());
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn object_ids_are_unique() {
        let a = ObjectId::next();
        let b = ObjectId::next();
        assert_ne!(a, b);
        assert_eq!(format!("{}", ObjectId(7)), "#7");
    }
}
