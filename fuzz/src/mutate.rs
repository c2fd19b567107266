//! The mutator: stacked byte-level edits (bit flips, byte sets, inserts, deletes, chunk
//! duplication, splicing with another pool entry) plus a per-target dictionary of tokens.
//! No coverage feedback: the engine keeps inputs that produce a new outcome instead.

use crate::rng::Rng;

/// Bytes worth trying in binary formats (boundaries, signs, ASCII digits and separators).
const INTERESTING_BYTES: &[u8] = &[
    0, 1, 2, 4, 7, 8, 16, 32, 64, 0x7f, 0x80, 0xfe, 0xff, b'0', b'1', b'9', b' ', b'\n', b'"',
    b'\'', b'(', b')', b',', b'{', b'}', b':', b'-', b'.',
];

/// Integers worth trying where a binary format has counts, lengths and offsets.
const INTERESTING_INTS: &[u64] = &[
    0,
    1,
    2,
    3,
    4,
    8,
    16,
    64,
    127,
    128,
    255,
    256,
    1024,
    4096,
    65535,
    65536,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    0x7fff_ffff_ffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
    u64::MAX - 1,
];

/// Numbers worth trying in text (ASCII).
const INTERESTING_NUMBERS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "4",
    "-1",
    "7",
    "16",
    "64",
    "255",
    "65536",
    "2147483647",
    "2147483648",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "1e308",
    "1e309",
    "-1e308",
    "0.5",
    "1e-320",
    ".5",
    "1e",
    "0x10",
];

/// Characters that are more than one byte in UTF-8, or otherwise odd: span arithmetic that
/// assumes one byte per character breaks on these.
const ODD_TEXT: &[&str] = &[
    "é", "→", "…", "😀", "\u{feff}", "\u{0}", "\t", "\r", "\r\n", "\u{2028}", "\u{7f}", "ß",
    "\u{301}",
];

/// One target's mutation settings.
#[derive(Debug, Clone, Copy)]
pub struct Mutator {
    /// Tokens the target's inputs are made of.
    pub dict: &'static [&'static [u8]],
    /// Text inputs: random bytes are mostly printable ASCII, numbers are written in decimal.
    pub text: bool,
    /// Inputs never grow past this many bytes.
    pub max_len: usize,
}

impl Mutator {
    /// Applies 1 to 8 stacked edits to `input`; `pool` is what splicing draws from.
    pub fn mutate(&self, rng: &mut Rng, input: &mut Vec<u8>, pool: &[Vec<u8>]) {
        let n = rng.small(8);
        for _ in 0..n {
            self.one(rng, input, pool);
        }
        input.truncate(self.max_len);
    }

    fn random_byte(&self, rng: &mut Rng) -> u8 {
        if self.text && !rng.one_in(16) {
            // Printable ASCII, newlines now and then.
            if rng.one_in(24) {
                b'\n'
            } else {
                b' ' + rng.below(95) as u8
            }
        } else if rng.one_in(2) {
            *rng.pick(INTERESTING_BYTES)
        } else {
            rng.next_u64() as u8
        }
    }

    fn token(&self, rng: &mut Rng) -> Vec<u8> {
        if self.text && rng.one_in(8) {
            return rng.pick(INTERESTING_NUMBERS).as_bytes().to_vec();
        }
        if self.text && rng.one_in(16) {
            return rng.pick(ODD_TEXT).as_bytes().to_vec();
        }
        if self.dict.is_empty() {
            return vec![self.random_byte(rng)];
        }
        let mut t = rng.pick(self.dict).to_vec();
        if self.text && rng.one_in(2) {
            // Tokens usually stand between spaces.
            t.insert(0, b' ');
            t.push(b' ');
        }
        t
    }

    /// A random range `lo..hi` of `len` bytes, short more often than long.
    fn range(rng: &mut Rng, len: usize) -> (usize, usize) {
        if len == 0 {
            return (0, 0);
        }
        let lo = rng.below(len);
        let max = len - lo;
        let n = if rng.one_in(8) {
            1 + rng.below(max)
        } else {
            rng.small(max.min(16))
        };
        (lo, (lo + n).min(len))
    }

    fn one(&self, rng: &mut Rng, input: &mut Vec<u8>, pool: &[Vec<u8>]) {
        let len = input.len();
        match rng.below(13) {
            // Flip a bit.
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            // Set a byte.
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = self.random_byte(rng);
            }
            // Insert a few random bytes.
            2 => {
                let at = rng.below(len + 1);
                let n = rng.small(4);
                let bytes: Vec<u8> = (0..n).map(|_| self.random_byte(rng)).collect();
                input.splice(at..at, bytes);
            }
            // Delete a range.
            3 if len > 0 => {
                let (lo, hi) = Self::range(rng, len);
                input.drain(lo..hi);
            }
            // Duplicate a chunk somewhere else.
            4 if len > 0 => {
                let (lo, hi) = Self::range(rng, len);
                let chunk = input[lo..hi].to_vec();
                let at = rng.below(len + 1);
                input.splice(at..at, chunk);
            }
            // Overwrite a chunk with another chunk of the same input.
            5 if len > 1 => {
                let (lo, hi) = Self::range(rng, len);
                let chunk = input[lo..hi].to_vec();
                let at = rng.below(len - chunk.len() + 1);
                input[at..at + chunk.len()].copy_from_slice(&chunk);
            }
            // Splice: insert a chunk of another pool entry, or cross over.
            6 if !pool.is_empty() => {
                let other = rng.pick(pool);
                if other.is_empty() {
                    return;
                }
                if rng.one_in(2) {
                    let (lo, hi) = Self::range(rng, other.len());
                    let at = rng.below(len + 1);
                    input.splice(at..at, other[lo..hi].iter().copied());
                } else {
                    let cut = rng.below(len + 1);
                    let from = rng.below(other.len());
                    input.truncate(cut);
                    input.extend_from_slice(&other[from..]);
                }
            }
            // Insert a dictionary token.
            7 | 8 => {
                let t = self.token(rng);
                let at = rng.below(len + 1);
                input.splice(at..at, t);
            }
            // Replace a range with a dictionary token.
            9 if len > 0 => {
                let (lo, hi) = Self::range(rng, len);
                let t = self.token(rng);
                input.splice(lo..hi, t);
            }
            // Numbers: a decimal run in text, a little-endian integer in binary.
            10 => self.number(rng, input),
            // Lines: delete, duplicate or swap one (text), or repeat a chunk many times (both).
            11 if self.text && rng.one_in(2) => Self::lines(rng, input),
            // A token repeated up to 2048 times: deep nesting, long operator chains.
            11 if self.text && !self.dict.is_empty() => {
                let t = *rng.pick(self.dict);
                let bits = 1 + rng.below(11);
                let times = 1 + rng.below(1 << bits);
                let at = rng.below(len + 1);
                let room = self.max_len.saturating_sub(len);
                let rep: Vec<u8> = t
                    .iter()
                    .copied()
                    .cycle()
                    .take((t.len() * times).min(room))
                    .collect();
                input.splice(at..at, rep);
            }
            11 | 12 if len > 0 => {
                let (lo, hi) = Self::range(rng, len.min(64));
                let chunk = input[lo..hi].to_vec();
                let times = 1 << rng.below(8);
                let at = rng.below(len + 1);
                let rep: Vec<u8> = chunk
                    .iter()
                    .copied()
                    .cycle()
                    .take((chunk.len() * times).min(self.max_len))
                    .collect();
                input.splice(at..at, rep);
            }
            _ => {
                let at = rng.below(len + 1);
                let b = self.random_byte(rng);
                input.insert(at, b);
            }
        }
    }

    fn number(&self, rng: &mut Rng, input: &mut Vec<u8>) {
        let len = input.len();
        if self.text {
            // Replace the digit run nearest after a random point (or insert one).
            let start = rng.below(len + 1);
            let at = (start..len).find(|&i| input[i].is_ascii_digit());
            let n = rng.pick(INTERESTING_NUMBERS).as_bytes().to_vec();
            match at {
                Some(lo) => {
                    let hi = (lo..len)
                        .find(|&i| !input[i].is_ascii_digit())
                        .unwrap_or(len);
                    input.splice(lo..hi, n);
                }
                None => {
                    input.splice(start..start, n);
                }
            }
            return;
        }
        let width = *rng.pick(&[1usize, 2, 4, 8]);
        if len < width {
            return;
        }
        let mut v = *rng.pick(INTERESTING_INTS);
        if rng.one_in(4) {
            v = v.wrapping_add(rng.below(3) as u64).wrapping_sub(1);
        }
        let bytes = v.to_le_bytes();
        let at = rng.below(len - width + 1);
        input[at..at + width].copy_from_slice(&bytes[..width]);
    }

    fn lines(rng: &mut Rng, input: &mut Vec<u8>) {
        let mut lines: Vec<Vec<u8>> = input.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
        let n = lines.len();
        match rng.below(3) {
            0 if n > 1 => {
                lines.remove(rng.below(n));
            }
            1 => {
                let l = lines[rng.below(n)].clone();
                lines.insert(rng.below(n + 1), l);
            }
            _ => {
                let (a, b) = (rng.below(n), rng.below(n));
                lines.swap(a, b);
            }
        }
        *input = lines.join(&b'\n');
    }
}
