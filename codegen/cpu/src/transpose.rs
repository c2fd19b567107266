//! Transposing copies of f32 blocks for the JIT (`lower/mod.rs`, [`Lower::transpose_block`]):
//! the two innermost loops of a cache-tiled transposing map (`tdsl_loop::passes::tile_transpose`)
//! become one call that moves the tile through 8×8 register transposes (AVX2), where Cranelift's
//! 128-bit vectors would gather and scatter one element at a time.
//!
//! [`Lower::transpose_block`]: crate::lower

use std::sync::OnceLock;

/// The symbol generated code calls.
pub(crate) const SYMBOL: &str = "tdsl_transpose_f32";

/// The symbols this module registers with the JIT.
pub(crate) fn symbols() -> [(&'static str, *const u8); 1] {
    [(SYMBOL, tdsl_transpose_f32 as *const u8)]
}

/// Whether this CPU runs the register transposes (AVX2), unless `TDSL_TRANSPOSE=0` keeps the
/// JIT's own loops (to compare the two).
pub(crate) fn available() -> bool {
    avx2() && std::env::var("TDSL_TRANSPOSE").map_or(true, |v| v != "0")
}

/// Whether the CPU has AVX2 (detected once).
fn avx2() -> bool {
    static AVX2: OnceLock<bool> = OnceLock::new();
    *AVX2.get_or_init(|| crate::spmm::Isa::Avx2.supported())
}

/// `dst[c·ld + r] = src[r·ls + c]` for `r < rows`, `c < cols`: 8 rows at a time through 8×8
/// register transposes, the edges element by element. Registered with the JIT under [`SYMBOL`];
/// generated code calls it only when [`available`] said so.
///
/// # Safety
/// Every element named above is in bounds of its buffer (the loop-IR verifier proved it for
/// the loops the call replaces), and the two blocks do not overlap.
pub(crate) unsafe extern "C" fn tdsl_transpose_f32(
    src: *const f32,
    dst: *mut f32,
    rows: i64,
    cols: i64,
    ls: i64,
    ld: i64,
) {
    let (rows, cols) = (rows.max(0) as usize, cols.max(0) as usize);
    let (ls, ld) = (ls as isize, ld as isize);
    let (wide, tall) = (cols / 8 * 8, rows / 8 * 8);
    let mut r = 0;
    #[cfg(target_arch = "x86_64")]
    if avx2() && wide > 0 && tall > 0 {
        // SAFETY: AVX2 is present; the blocks are inside the caller's bounds.
        unsafe { blocks(src, dst, tall, wide, ls, ld) };
        r = tall;
    }
    // The rows below the last multiple of 8 (all of them without AVX2), then the columns past
    // the last multiple of 8 of the rows done above.
    let each = |i: usize, c: usize| {
        // SAFETY: the caller's contract.
        unsafe {
            *dst.offset(c as isize * ld + i as isize) = *src.offset(i as isize * ls + c as isize)
        }
    };
    for i in r..rows {
        (0..cols).for_each(|c| each(i, c));
    }
    for i in 0..r {
        (wide..cols).for_each(|c| each(i, c));
    }
}

/// The 8×8 blocks of rows `0..tall` and columns `0..wide` (multiples of 8), 8 columns at a
/// time and all the rows within them: each destination row's 8·k values are written one after
/// another, whole cache lines, before the next 8 rows (rows 4 KiB apart share an L1 set, and a
/// line written half at a time is evicted between its halves).
///
/// # Safety
/// AVX2 is present, and [`tdsl_transpose_f32`]'s contract holds for these rows and columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn blocks(src: *const f32, dst: *mut f32, tall: usize, wide: usize, ls: isize, ld: isize) {
    for c in (0..wide).step_by(8) {
        for r in (0..tall).step_by(8) {
            // SAFETY: the caller's contract; one 8×8 block.
            unsafe {
                crate::sgemm::transpose8_into_panel(
                    src.offset(r as isize * ls).add(c),
                    ls,
                    dst.offset(c as isize * ld).add(r),
                    ld as usize,
                    8,
                )
            };
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn blocks_of_every_edge_transpose_like_the_definition() {
        for (rows, cols) in [
            (8, 8),
            (8, 256),
            (16, 24),
            (13, 21),
            (3, 5),
            (9, 7),
            (0, 4),
            (7, 0),
        ] {
            let (ls, ld) = (cols + 3, rows + 5);
            let src: Vec<f32> = (0..rows * ls).map(|i| i as f32).collect();
            let mut dst = vec![-1.0f32; cols * ld];
            // SAFETY: both blocks are inside their vectors.
            unsafe {
                super::tdsl_transpose_f32(
                    src.as_ptr(),
                    dst.as_mut_ptr(),
                    rows as i64,
                    cols as i64,
                    ls as i64,
                    ld as i64,
                )
            };
            for c in 0..cols {
                for r in 0..ld {
                    let want = if r < rows { src[r * ls + c] } else { -1.0 };
                    assert_eq!(dst[c * ld + r], want, "{rows}x{cols} at ({r}, {c})");
                }
            }
        }
    }
}
