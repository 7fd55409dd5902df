//! The one handle type behind every C pointer we hand out.
//!
//! An object the program sees — a context, PD, MR, CQ, QP… — is an
//! [`Obj<T>`] in an `Arc`: a use count and our state `T`, and the C
//! structure the program's pointer points at, in a shell of its own
//! behind a magic word and a pointer back to the object. The shell is in
//! our memory, or — for QPs, CQs and SRQs created in a parent domain with
//! allocators — in memory from the program's allocator. The
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
//!   gives EBUSY, as libibverbs does. A child's destroy gives up its uses
//!   at once ([`Castable::release_uses`]), as the kernel drops a uobject's
//!   hold on its parents when its destroy returns: another thread may
//!   still hold the child for a moment (an `ibv_ack_async_event`, a
//!   control verb, the CM's thread reading `id->qp`), and the program's
//!   next destroy, of the parent, must not see EBUSY for it. The child's
//!   references stay (the parents' memory outlives every straggler), only
//!   the count goes. The one use kept until the memory goes is the parent
//!   domain's of an object placed with its allocators ([`Placement`]):
//!   its `free` is the program's, called with the domain and its
//!   `pd_context`, so the domain stays busy until the memory is back;
//! - data-path verbs (`post_send`, `post_recv`, `poll_cq`, reached through
//!   `context->ops` after the program dereferenced the pointer itself)
//!   check only NULL and the magic word ([`Obj::fast`]): a registry lookup
//!   per post would cost more than the post.

use std::any::Any;
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
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
    Td,
    ImportedMr,
    Xrcd,
    TgtQp,
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

    /// Gives up this object's uses of its parents ([`Use::release`] on
    /// each [`Use`] it holds): called by its destroy ([`Obj::take`],
    /// [`Obj::take_forced`]), so that the parents' destroy succeeds as
    /// soon as the child's has returned, whoever still holds the child.
    /// Every type holding a `Use` must release it here.
    fn release_uses(&self);
}

/// An object handed to C: ours, with its C structure in a [`Shell`] of its
/// own — in our memory, or in the program's when a parent domain with
/// allocators says so ([`Placement`]).
pub struct Obj<T: Castable> {
    shell: NonNull<Shell<T::Repr>>,
    /// Where the shell came from, to give it back.
    placement: Option<Placement>,
    /// Children that count as users (see [`Use`]).
    users: AtomicUsize,
    inner: T,
}

/// The memory the program's pointer points into: a small header, then
/// the C structure. The data path finds the object from the program's
/// pointer through the header (the same cache line as the structure's
/// first bytes).
#[repr(C)]
struct Shell<R> {
    /// [`Castable::MAGIC`] while the object is live, 0 after its destroy.
    magic: AtomicU64,
    /// The [`Obj`] owning this shell (an `Arc`'s contents: it outlives
    /// the shell, which it frees when dropped).
    owner: AtomicPtr<()>,
    c: UnsafeCell<R>,
}

/// Memory for an object's shell from a parent domain's allocator
/// (`ibv_parent_domain_init_attr.alloc`/`free`): the program's, given
/// back with its `free`.
pub struct Placement {
    /// `alloc(pd, pd_context, size, alignment, resource_type)`.
    pub alloc: crate::ffi::PdAllocFn,
    /// `free(pd, pd_context, ptr, resource_type)`.
    pub free: crate::ffi::PdFreeFn,
    /// The parent domain (as the program's `ibv_pd` pointer).
    pub pd: *mut crate::ffi::ibv_pd,
    /// Its `pd_context`.
    pub pd_context: *mut std::ffi::c_void,
    /// The resource type passed to both.
    pub resource_type: u64,
    /// A use of the parent domain, dropped after the memory went back to
    /// `free`: until then the domain's `ibv_dealloc_pd` gives EBUSY, even
    /// after the object's destroy (which releases its other uses), since
    /// `free` is still to be called with the domain and its context.
    #[allow(dead_code)] // held for its drop
    pub hold: Box<dyn Send + Sync>,
}

// SAFETY: the pointers are the program's, passed back to its own
// callbacks; the parent domain they name outlives every object placed
// with it (`hold`, a `Use` of it, is dropped after `free`).
unsafe impl Send for Placement {}
// SAFETY: as above.
unsafe impl Sync for Placement {}

/// The shell's alignment when the program's allocator provides it (a
/// cache line).
pub const SHELL_ALIGN: usize = 64;

// SAFETY: the C structure holds plain data and pointers the program owns;
// we write it only while building the object and, afterwards, its counter
// fields with atomics or fields the program never touches concurrently by
// the verbs contract. `T` is Send + Sync.
unsafe impl<T: Castable> Send for Obj<T> {}
// SAFETY: as above.
unsafe impl<T: Castable> Sync for Obj<T> {}

impl<T: Castable> Drop for Obj<T> {
    fn drop(&mut self) {
        let sh = self.shell.as_ptr();
        // The domain's use (`hold`) goes after `free`, at the end.
        match &self.placement {
            None => {
                // SAFETY: allocated by `Box::new` in `new_in`, freed once.
                drop(unsafe { Box::from_raw(sh) });
            }
            Some(p) => {
                // SAFETY: the shell was written in place by `new_in` in
                // memory from `p.alloc`; it is dropped once, then the
                // memory goes back to the program's `free`.
                unsafe {
                    std::ptr::drop_in_place(sh);
                    (p.free)(p.pd, p.pd_context, sh.cast(), p.resource_type);
                }
            }
        }
    }
}

impl<T: Castable> std::ops::Deref for Obj<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

pub(crate) type Registry = HashMap<usize, (Kind, Arc<dyn Any + Send + Sync>)>;

static LIVE: Mutex<Option<Registry>> = Mutex::new(None);

/// The registry, locked (also by `crate::fork` across a fork).
pub(crate) fn live() -> MutexGuard<'static, Option<Registry>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

impl<T: Castable> Obj<T> {
    /// A new, unpublished object.
    pub fn new(c: T::Repr, inner: T) -> Arc<Self> {
        match Self::new_in(c, inner, None) {
            Ok(o) => o,
            Err((_, _)) => unreachable!("our own memory never fails to place"),
        }
    }

    /// A new, unpublished object whose C structure lives in memory from
    /// `placement` (our own with `None`). When the program's allocator
    /// returns NULL the structure and our state come back with `ENOMEM`;
    /// `IBV_ALLOCATOR_USE_DEFAULT` means our own memory.
    #[allow(clippy::type_complexity)]
    pub fn new_in(
        c: T::Repr,
        inner: T,
        placement: Option<Placement>,
    ) -> Result<Arc<Self>, (i32, T)> {
        let shell = Shell {
            magic: AtomicU64::new(T::MAGIC),
            owner: AtomicPtr::new(std::ptr::null_mut()),
            c: UnsafeCell::new(c),
        };
        let (ptr, placement) = match placement {
            None => (NonNull::from(Box::leak(Box::new(shell))), None),
            Some(p) => {
                let size = std::mem::size_of::<Shell<T::Repr>>();
                let align = SHELL_ALIGN.max(std::mem::align_of::<Shell<T::Repr>>());
                // SAFETY: the program's allocator with its own arguments.
                let m = unsafe { (p.alloc)(p.pd, p.pd_context, size, align, p.resource_type) };
                if m as usize == crate::ffi::IBV_ALLOCATOR_USE_DEFAULT {
                    (NonNull::from(Box::leak(Box::new(shell))), None)
                } else if m.is_null()
                    || !(m as usize).is_multiple_of(std::mem::align_of::<Shell<T::Repr>>())
                {
                    if !m.is_null() {
                        // SAFETY: given back as it came.
                        unsafe { (p.free)(p.pd, p.pd_context, m, p.resource_type) };
                    }
                    return Err((libc::ENOMEM, inner));
                } else {
                    let m = m.cast::<Shell<T::Repr>>();
                    // SAFETY: `size` bytes, suitably aligned (checked),
                    // from the program's allocator, ours until `free`.
                    unsafe { m.write(shell) };
                    // SAFETY: non-null (checked).
                    (unsafe { NonNull::new_unchecked(m) }, Some(p))
                }
            }
        };
        let o = Arc::new(Obj {
            shell: ptr,
            placement,
            users: AtomicUsize::new(0),
            inner,
        });
        // SAFETY: the shell is ours and live; the Arc's contents do not
        // move while it lives, and the shell goes with them.
        unsafe {
            (*ptr.as_ptr())
                .owner
                .store(Arc::as_ptr(&o) as *mut (), Ordering::Release)
        };
        Ok(o)
    }

    fn shell(&self) -> &Shell<T::Repr> {
        // SAFETY: the shell lives as long as `self`.
        unsafe { self.shell.as_ref() }
    }

    /// The C structure (for fields we, or the program, may write).
    pub fn repr(&self) -> *mut T::Repr {
        self.shell().c.get()
    }

    /// The pointer the program holds.
    pub fn api(&self) -> *mut T::Api {
        (self.repr() as *mut u8).wrapping_add(T::API_OFFSET).cast()
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

    /// Whether children use it (its destroy would give EBUSY).
    pub fn busy(&self) -> bool {
        self.users.load(Ordering::SeqCst) > 0
    }

    /// [`Obj::get`], counting the caller as a user of the object (a child
    /// being created): atomic with a destroy's check for users.
    pub fn get_use(p: *mut T::Api) -> Option<Use<T>> {
        let g = live();
        let o = Self::lookup(g.as_ref()?, p)?;
        o.users.fetch_add(1, Ordering::SeqCst);
        Some(Use {
            obj: o,
            counted: AtomicBool::new(true),
        })
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
        o.shell().magic.store(0, Ordering::SeqCst);
        drop(g);
        o.inner.release_uses();
        Ok(o)
    }

    /// Takes the object out of the registry whatever its users (an
    /// `ibv_unimport_*`: the program's handle goes, children keep the
    /// object). `Err(EINVAL)` when it is not live.
    pub fn take_forced(p: *mut T::Api) -> Result<Arc<Self>, i32> {
        let mut g = live();
        let reg = g.as_mut().ok_or(libc::EINVAL)?;
        let o = Self::lookup(reg, p).ok_or(libc::EINVAL)?;
        reg.remove(&(p as usize));
        o.shell().magic.store(0, Ordering::SeqCst);
        drop(g);
        o.inner.release_uses();
        Ok(o)
    }

    /// The first live object of this kind for which `pred` holds. `pred`
    /// runs under the registry's lock: it must not look objects up.
    pub fn find(pred: impl Fn(&Self) -> bool) -> Option<Arc<Self>> {
        Self::find_all(pred).into_iter().next()
    }

    /// Every live object of this kind for which `pred` holds (same rule).
    pub fn find_all(pred: impl Fn(&Self) -> bool) -> Vec<Arc<Self>> {
        let g = live();
        let Some(reg) = g.as_ref() else {
            return Vec::new();
        };
        reg.values()
            .filter(|(k, _)| *k == T::KIND)
            .filter_map(|(_, o)| o.clone().downcast::<Self>().ok())
            .filter(|o| pred(o))
            .collect()
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
        let c = (p as *const u8).wrapping_sub(T::API_OFFSET);
        let sh = c.wrapping_sub(std::mem::offset_of!(Shell<T::Repr>, c)) as *const Shell<T::Repr>;
        // SAFETY: per the contract, the object is live and its shell's
        // header lies just before the structure; atomic reads (the
        // destroy path writes `magic`).
        let m = unsafe { (*std::ptr::addr_of!((*sh).magic)).load(Ordering::Relaxed) };
        if m != T::MAGIC {
            return None;
        }
        // SAFETY: the magic word says this is a live shell of an `Obj<T>`,
        // whose owner pointer was stored before the object was published.
        let o = unsafe { (*std::ptr::addr_of!((*sh).owner)).load(Ordering::Acquire) };
        // SAFETY: the owner outlives its shell.
        Some(unsafe { &*(o as *const Self) })
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
/// destroy gives EBUSY until every `Use` is released (by the child's
/// destroy, [`Castable::release_uses`]) or dropped. A released `Use`
/// still holds the parent's memory.
pub struct Use<T: Castable> {
    obj: Arc<Obj<T>>,
    /// Still counted in the parent's `users`.
    counted: AtomicBool,
}

impl<T: Castable> Use<T> {
    /// Stops counting as a user of the parent (once; dropping a released
    /// `Use` counts nothing more). The reference stays.
    pub fn release(&self) {
        if self.counted.swap(false, Ordering::SeqCst) {
            self.obj.users.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Another use of the same parent, counted on its own.
    pub fn another(&self) -> Use<T> {
        self.obj.users.fetch_add(1, Ordering::SeqCst);
        Use {
            obj: self.obj.clone(),
            counted: AtomicBool::new(true),
        }
    }
}

impl<T: Castable> std::ops::Deref for Use<T> {
    type Target = Obj<T>;
    fn deref(&self) -> &Obj<T> {
        &self.obj
    }
}

impl<T: Castable> Drop for Use<T> {
    fn drop(&mut self) {
        self.release();
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
        fn release_uses(&self) {}
    }
    struct Child {
        _p: Use<Parent>,
    }
    impl Castable for Child {
        type Repr = Cee;
        type Api = Cee;
        const KIND: Kind = Kind::Mr;
        const MAGIC: u64 = 0x5445_5354_0000_0002;
        fn release_uses(&self) {
            self._p.release();
        }
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

    /// A thread still holding a destroyed child (an `ibv_ack_async_event`
    /// on a QP, a control verb, the CM's thread) does not keep its parent
    /// busy: the child's destroy released its use. The straggler's
    /// reference keeps the parent's memory, and dropping it counts
    /// nothing twice.
    #[test]
    fn a_destroyed_child_held_elsewhere_does_not_keep_its_parent_busy() {
        let p = Obj::new(Cee { x: 1, count: 0 }, Parent).publish();
        let c = Obj::new(
            Cee { x: 2, count: 0 },
            Child {
                _p: Obj::<Parent>::get_use(p).unwrap(),
            },
        )
        .publish();
        let c2 = Obj::new(
            Cee { x: 3, count: 0 },
            Child {
                _p: Obj::<Parent>::get_use(p).unwrap(),
            },
        )
        .publish();
        let straggler = std::thread::scope(|s| {
            let c = c as usize;
            s.spawn(move || Obj::<Child>::get(c as *mut Cee).expect("live"))
                .join()
                .unwrap()
        });
        drop(Obj::<Child>::take(c).expect("child destroyed"));
        // The other child still counts.
        assert_eq!(Obj::<Parent>::take(p).err(), Some(libc::EBUSY));
        drop(Obj::<Child>::take(c2).expect("second child destroyed"));
        let parent = Obj::<Parent>::take(p).expect("the parent's destroy succeeds");
        // The straggler still reaches the parent's memory through its
        // reference; its drop, then the parent's, free everything once.
        // SAFETY: a field of the parent's allocation, alive through `straggler`.
        assert_eq!(unsafe { (*straggler._p.repr()).x }, 1);
        assert_eq!(straggler._p.users.load(Ordering::SeqCst), 0);
        drop(parent);
        drop(straggler);
    }
}
