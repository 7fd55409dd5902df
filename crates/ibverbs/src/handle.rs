//! The one handle type behind every C pointer we hand out.
//!
//! An object the program sees — a context, PD, MR, CQ, QP… — is an
//! [`Obj<T>`] in an `Arc`: the C structure first (so the program's pointer
//! points at it), then a magic word, a use count, and our state `T`. The
//! pattern is rustls-ffi's "castable": each `T` names its C structure
//! ([`Castable::Repr`]), the type of the pointer the program holds
//! ([`Castable::Api`]), its [`Kind`] and magic word, and everything else —
//! publishing, lookup, destroy — is written once here.
//!
//! Lifetimes follow the references, never a flag inside the memory they
//! guard:
//! - a registry maps each published pointer to its `Arc`. Control-path
//!   verbs look the pointer up ([`Obj::get`]) and hold a strong reference
//!   for the whole call: a stale, foreign or destroyed pointer gets EINVAL,
//!   and an object destroyed by another thread meanwhile stays valid until
//!   the call returns;
//! - a destroy takes the registry's reference out ([`Obj::take`]): a second
//!   destroy finds nothing; the memory goes with the last reference;
//! - children hold their parents: a QP holds its PD and CQs, everything
//!   holds its context, so `ibv_close_device` can race the destruction of
//!   the last objects from another thread and the context is freed exactly
//!   once, by whoever drops the last reference;
//! - [`Use`] is such a reference that also counts as a user of the parent:
//!   destroying a PD, CQ, SRQ or completion channel that children still use
//!   gives EBUSY, as libibverbs does;
//! - data-path verbs (`post_send`, `post_recv`, `poll_cq`, reached through
//!   `context->ops` after the program dereferenced the pointer itself)
//!   check only NULL and the magic word ([`Obj::fast`]): a registry lookup
//!   per post would cost more than the post.

use std::any::Any;
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Kinds of objects handed to C.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Context,
    Pd,
    Mr,
    Mw,
    Channel,
    Cq,
    Srq,
    Qp,
    Ah,
    CmChannel,
    CmId,
    CmEvent,
}

/// What a Rust type needs to say to live behind a C pointer.
pub trait Castable: Send + Sync + Sized + 'static {
    /// The C structure stored first in the object (the program reads and
    /// may write some of its fields).
    type Repr;
    /// The type of the pointer the program holds.
    type Api;
    /// Registry kind.
    const KIND: Kind;
    /// Magic word (checked by the data path).
    const MAGIC: u64;
    /// Byte offset of the `Api` structure inside `Repr`: 0 unless the
    /// program's pointer points into it (`ibv_context` is the last member
    /// of `verbs_context`).
    const API_OFFSET: usize = 0;
}

/// An object handed to C: its C structure, then ours.
#[repr(C)]
pub struct Obj<T: Castable> {
    c: UnsafeCell<T::Repr>,
    magic: AtomicU64,
    /// Children that count as users (see [`Use`]).
    users: AtomicUsize,
    inner: T,
}

// SAFETY: the C structure holds plain data and pointers the program owns;
// we write it only while building the object and, afterwards, its counter
// fields with atomics or fields the program never touches concurrently by
// the verbs contract. `T` is Send + Sync.
unsafe impl<T: Castable> Send for Obj<T> {}
// SAFETY: as above.
unsafe impl<T: Castable> Sync for Obj<T> {}

impl<T: Castable> std::ops::Deref for Obj<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

type Registry = HashMap<usize, (Kind, Arc<dyn Any + Send + Sync>)>;

static LIVE: Mutex<Option<Registry>> = Mutex::new(None);

fn live() -> MutexGuard<'static, Option<Registry>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

impl<T: Castable> Obj<T> {
    /// A new, unpublished object.
    pub fn new(c: T::Repr, inner: T) -> Arc<Self> {
        Arc::new(Obj {
            c: UnsafeCell::new(c),
            magic: AtomicU64::new(T::MAGIC),
            users: AtomicUsize::new(0),
            inner,
        })
    }

    /// The C structure (for fields we, or the program, may write).
    pub fn repr(&self) -> *mut T::Repr {
        self.c.get()
    }

    /// The pointer the program holds.
    pub fn api(&self) -> *mut T::Api {
        (self.c.get() as *mut u8).wrapping_add(T::API_OFFSET).cast()
    }

    /// Hands the object to C: registers it and returns its pointer.
    pub fn publish(self: Arc<Self>) -> *mut T::Api {
        let p = self.api();
        live()
            .get_or_insert_with(HashMap::new)
            .insert(p as usize, (T::KIND, self));
        p
    }

    /// The object behind a pointer the program passed, if it is a live
    /// one of ours of this kind; held for as long as the caller keeps it.
    pub fn get(p: *mut T::Api) -> Option<Arc<Self>> {
        let g = live();
        Self::lookup(g.as_ref()?, p)
    }

    fn lookup(reg: &Registry, p: *mut T::Api) -> Option<Arc<Self>> {
        match reg.get(&(p as usize))? {
            (k, o) if *k == T::KIND => o.clone().downcast::<Self>().ok(),
            _ => None,
        }
    }

    /// [`Obj::get`], counting the caller as a user of the object (a child
    /// being created): atomic with a destroy's check for users.
    pub fn get_use(p: *mut T::Api) -> Option<Use<T>> {
        let g = live();
        let o = Self::lookup(g.as_ref()?, p)?;
        o.users.fetch_add(1, Ordering::SeqCst);
        Some(Use(o))
    }

    /// A destroy: takes the object out of the registry, unless children
    /// still use it (`Err(EBUSY)`) or it is not live (`Err(EINVAL)`: a
    /// stale pointer, a second destroy). Its pointer stops working at
    /// once; its memory goes with the last reference.
    pub fn take(p: *mut T::Api) -> Result<Arc<Self>, i32> {
        let mut g = live();
        let reg = g.as_mut().ok_or(libc::EINVAL)?;
        let o = Self::lookup(reg, p).ok_or(libc::EINVAL)?;
        if o.users.load(Ordering::SeqCst) > 0 {
            return Err(libc::EBUSY);
        }
        reg.remove(&(p as usize));
        o.magic.store(0, Ordering::SeqCst);
        Ok(o)
    }

    /// The data path's check: NULL and the magic word, no reference.
    ///
    /// # Safety
    /// `p` is NULL or a pointer the program got from us for an object it
    /// has not destroyed (it has just dereferenced it itself to reach this
    /// entry point); the result must not outlive the call.
    #[inline]
    pub unsafe fn fast<'a>(p: *mut T::Api) -> Option<&'a Self> {
        if p.is_null() {
            return None;
        }
        let o = (p as *const u8).wrapping_sub(T::API_OFFSET) as *const Self;
        // SAFETY: per the contract, the object is live and `magic` lies
        // inside it; an atomic read (the destroy path writes it).
        let m = unsafe { (*std::ptr::addr_of!((*o).magic)).load(Ordering::Relaxed) };
        // SAFETY: the magic word says this is a live `Obj<T>`.
        (m == T::MAGIC).then(|| unsafe { &*o })
    }

    /// A counter field of the C structure, for atomic updates (the program
    /// only reads these).
    ///
    /// # Safety
    /// `f` must return a pointer to a properly aligned `u32` inside `repr`.
    pub unsafe fn counter(&self, f: impl FnOnce(*mut T::Repr) -> *mut u32) -> &AtomicU32Ref {
        // SAFETY: per the contract.
        unsafe { std::sync::atomic::AtomicU32::from_ptr(f(self.repr())) }
    }
}

/// An atomic view of a `u32` of a C structure.
pub type AtomicU32Ref = std::sync::atomic::AtomicU32;

/// A child's reference to its parent that counts as a use: the parent's
/// destroy gives EBUSY until every `Use` is dropped.
pub struct Use<T: Castable>(Arc<Obj<T>>);

impl<T: Castable> std::ops::Deref for Use<T> {
    type Target = Obj<T>;
    fn deref(&self) -> &Obj<T> {
        &self.0
    }
}

impl<T: Castable> Drop for Use<T> {
    fn drop(&mut self) {
        self.0.users.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    struct Cee {
        x: u64,
        count: u32,
    }
    struct Parent;
    impl Castable for Parent {
        type Repr = Cee;
        type Api = Cee;
        const KIND: Kind = Kind::Pd;
        const MAGIC: u64 = 0x5445_5354_0000_0001;
    }
    struct Child {
        _p: Use<Parent>,
    }
    impl Castable for Child {
        type Repr = Cee;
        type Api = Cee;
        const KIND: Kind = Kind::Mr;
        const MAGIC: u64 = 0x5445_5354_0000_0002;
    }

    #[test]
    fn publish_lookup_use_and_destroy() {
        let p = Obj::new(Cee { x: 7, count: 0 }, Parent).publish();
        let o = Obj::<Parent>::get(p).expect("live");
        // SAFETY: a field of our own allocation.
        assert_eq!(unsafe { (*o.repr()).x }, 7);
        // Wrong kind: not found.
        assert!(Obj::<Child>::get(p.cast()).is_none());
        // SAFETY: `p` is live.
        assert!(unsafe { Obj::<Parent>::fast(p) }.is_some());
        let c = Obj::new(
            Cee { x: 1, count: 0 },
            Child {
                _p: Obj::<Parent>::get_use(p).unwrap(),
            },
        )
        .publish();
        assert_eq!(Obj::<Parent>::take(p).err(), Some(libc::EBUSY));
        let child = Obj::<Child>::take(c).unwrap();
        assert_eq!(
            Obj::<Child>::take(c).err(),
            Some(libc::EINVAL),
            "second destroy"
        );
        drop(child);
        let gone = Obj::<Parent>::take(p).unwrap();
        assert!(Obj::<Parent>::get(p).is_none());
        // The memory lives while a reference does; the magic word is gone.
        // SAFETY: `o` keeps the object alive.
        assert!(unsafe { Obj::<Parent>::fast(p) }.is_none());
        // SAFETY: a u32 field of our allocation.
        unsafe { o.counter(|r| std::ptr::addr_of_mut!((*r).count)) }.fetch_add(2, Ordering::SeqCst);
        drop((gone, o));
    }
}
