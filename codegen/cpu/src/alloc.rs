//! [`CacheLineAlloc`]: the system allocator, with every block of at least 4 KiB aligned to a
//! 64-byte cache line.
//!
//! glibc's `malloc` aligns to 16 bytes, and a large block (served by `mmap`) starts 16 bytes
//! into its page, so every 512-bit load of a buffer's elements straddles two cache lines and
//! costs two: a 4096² matrix-vector product on one thread ran 1.85 ms on such buffers against
//! 1.42 ms on aligned ones, the speed of the same loop in C (bench/RESULTS.md). The `tdsl`
//! binary installs this allocator; a Rust program using the library can too:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: tdsl::CacheLineAlloc = tdsl::CacheLineAlloc;
//! ```

use std::alloc::{GlobalAlloc, Layout, System};

/// The system allocator, with blocks of [`Self::MIN_SIZE`] bytes or more aligned to
/// [`Self::ALIGN`] bytes (except zeroed ones, which keep `calloc`'s lazily zeroed pages).
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheLineAlloc;

impl CacheLineAlloc {
    /// The alignment of large blocks.
    pub const ALIGN: usize = 64;
    /// The smallest block that is aligned.
    pub const MIN_SIZE: usize = 4096;

    /// The layout a block of `l` is allocated with.
    fn widened(l: Layout) -> Layout {
        if l.size() >= Self::MIN_SIZE && l.align() < Self::ALIGN {
            // A power of two above `l.align()`, and the size was valid for a smaller one, so
            // only an `isize` overflow of the rounded size can fail; keep `l` then.
            Layout::from_size_align(l.size(), Self::ALIGN).unwrap_or(l)
        } else {
            l
        }
    }
}

// SAFETY: every block comes from `System` with a layout at least as aligned as asked for and of
// the size asked for; `System` frees a block whatever alignment it was allocated with (glibc's
// `free` takes `posix_memalign` blocks), so `dealloc` may pass the caller's layout.
unsafe impl GlobalAlloc for CacheLineAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: `l` has a non-zero size (the caller's contract), so has its widened form.
        unsafe { System.alloc(Self::widened(l)) }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract.
        unsafe { System.alloc_zeroed(l) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `System` (see the `impl`'s comment).
        unsafe { System.dealloc(p, l) }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract: `p` is a live block of layout `l`, and `new_size`
        // rounded to `l.align()` does not overflow `isize`.
        unsafe {
            let new = Layout::from_size_align_unchecked(new_size, l.align());
            let wide = Self::widened(new);
            if wide.align() == l.align() {
                return System.realloc(p, l, new_size);
            }
            let q = System.alloc(wide);
            if !q.is_null() {
                std::ptr::copy_nonoverlapping(p, q, l.size().min(new_size));
                System.dealloc(p, l);
            }
            q
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_are_cache_line_aligned_and_keep_their_bytes() {
        let a = CacheLineAlloc;
        for size in [1usize, 100, 4095, 4096, 5000, 1 << 20] {
            let l = Layout::from_size_align(size, 4).expect("layout");
            // SAFETY: sizes are non-zero; each block is freed with its own layout.
            unsafe {
                let p = a.alloc(l);
                assert!(!p.is_null());
                if size >= CacheLineAlloc::MIN_SIZE {
                    assert_eq!(p as usize % 64, 0, "{size} bytes");
                }
                for i in 0..size {
                    *p.add(i) = (i % 251) as u8;
                }
                // Grow across the threshold, then shrink below it: the bytes kept stay.
                let grown = Layout::from_size_align(size * 3, 4).expect("layout");
                let q = a.realloc(p, l, grown.size());
                assert!(!q.is_null());
                if grown.size() >= CacheLineAlloc::MIN_SIZE {
                    assert_eq!(q as usize % 64, 0, "{size} → {} bytes", grown.size());
                }
                assert!((0..size).all(|i| *q.add(i) == (i % 251) as u8));
                let r = a.realloc(q, grown, 64);
                assert!(!r.is_null());
                assert!((0..size.min(64)).all(|i| *r.add(i) == (i % 251) as u8));
                a.dealloc(r, Layout::from_size_align(64, 4).expect("layout"));
                let z = a.alloc_zeroed(l);
                assert!((0..size).all(|i| *z.add(i) == 0));
                a.dealloc(z, l);
            }
        }
    }
}
