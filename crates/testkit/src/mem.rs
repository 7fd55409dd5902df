//! Anonymous mappings for the tests of unmapped memory: a mapping whose
//! pages can be unmapped one by one ([`Mapping`], a "hole" in the middle
//! of a buffer), and an address no mapping covers ([`hole`]). The tests of
//! softrdma-io (the kernel's copies, CMA) and of softrdma (on-demand
//! regions) share them.

use softrdma_io::mem::page_size;
use std::cell::RefCell;

/// An anonymous private mapping of whole pages, unmapped when dropped
/// (the pages still mapped only: a page unmapped by [`Mapping::unmap_page`]
/// may hold another thread's mapping by then).
pub struct Mapping {
    addr: usize,
    pages: usize,
    unmapped: RefCell<Vec<bool>>,
}

impl Mapping {
    /// `pages` pages, readable and writable (zero-filled).
    pub fn new(pages: usize) -> Mapping {
        Mapping::with_prot(pages, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// `pages` pages, read-only (zero-filled).
    pub fn read_only(pages: usize) -> Mapping {
        Mapping::with_prot(pages, libc::PROT_READ)
    }

    fn with_prot(pages: usize, prot: libc::c_int) -> Mapping {
        // SAFETY: a fresh anonymous private mapping, no memory of ours
        // involved.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                pages * page_size(),
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        Mapping {
            addr: p as usize,
            pages,
            unmapped: RefCell::new(vec![false; pages]),
        }
    }

    /// Its first byte's address.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Its first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.pages * page_size()
    }

    /// Whether it has no pages.
    pub fn is_empty(&self) -> bool {
        self.pages == 0
    }

    /// Unmaps page `i`: a hole from then on (the caller holds no reference
    /// into it).
    pub fn unmap_page(&self, i: usize) {
        assert!(i < self.pages, "page {i} of {}", self.pages);
        let page = page_size();
        // SAFETY: a page of this mapping; the caller holds no reference
        // into it.
        let r = unsafe { libc::munmap((self.addr + i * page) as *mut libc::c_void, page) };
        assert_eq!(r, 0, "munmap: {}", std::io::Error::last_os_error());
        self.unmapped.borrow_mut()[i] = true;
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let page = page_size();
        for (i, gone) in self.unmapped.borrow().iter().enumerate() {
            if !gone {
                // SAFETY: a page of this mapping still mapped, nothing
                // refers to it any more.
                unsafe { libc::munmap((self.addr + i * page) as *mut libc::c_void, page) };
            }
        }
    }
}

/// An address where no page is mapped: a fresh anonymous page, unmapped
/// at once (another thread may map something there later: the tests that
/// rely on the hole map nothing meanwhile).
pub fn hole() -> usize {
    let m = Mapping::new(1);
    m.unmap_page(0);
    m.addr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hole_is_unmapped_and_the_rest_stays() {
        let m = Mapping::new(3);
        m.unmap_page(1);
        let page = page_size();
        let mut b = [0u8; 1];
        // SAFETY (both): reads of our own process's memory through the
        // kernel, which reports a hole instead of faulting.
        assert!(unsafe { softrdma_io::mem::read_own(m.addr() + page, &mut b) }.is_err());
        assert!(unsafe { softrdma_io::mem::read_own(m.addr(), &mut b) }.is_ok());
        let h = hole();
        assert!(unsafe { softrdma_io::mem::read_own(h, &mut b) }.is_err());
        assert_eq!(m.len(), 3 * page);
    }
}
