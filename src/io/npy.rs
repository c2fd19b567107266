//! `.npy` files (NumPy's array format, versions 1.0, 2.0 and 3.0) read into and written from
//! [`Tensor`]s.
//!
//! Reading accepts f32, f64, f16 and bf16 data in either byte order and in C or Fortran order;
//! Fortran data is transposed, so the returned tensor is always C-contiguous. A 0-d array
//! (shape `()`) is a scalar: a tensor with an empty shape. Writing produces version 1.0,
//! little-endian, C-order files, atomically (temporary file in the same directory, then rename).
//!
//! Invariants:
//! - The header is parsed by `npyz`, but only after [`gate`] has checked it: `npyz` multiplies
//!   the dimensions of the shape without overflow checks (a debug build panics on a header such
//!   as `'shape': (4294967296, 4294967296)`), and its parser recurses without a depth limit. The
//!   gate makes sure neither can happen.
//! - Nothing is allocated from a size the header claims until that size has been checked with
//!   overflow-safe arithmetic against the real file length: the header length against the file,
//!   and the data length (elements × item size) must equal exactly what follows the header.
//! - bf16 is stored as NumPy with `ml_dtypes` stores it; see [`Elem::BF16`].
//! - Every error is a [`Diagnostic`] (without labels) whose message names the file.

use super::{read_error, write_error};
use std::ffi::OsString;
use std::fmt::{self, Display};
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use half::{bf16, f16};
use npyz::{
    DType as NpyDType, Endianness, FixedSizeBytes, NpyFile, NpyHeader, Order, TypeChar, TypeStr,
    WriterBuilder,
};

use crate::diag::{Code, Diagnostic};
use crate::tensor::{Storage, Tensor};

/// The six bytes every `.npy` file starts with.
const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// The longest header we accept. NumPy itself refuses headers over 10 000 bytes by default; a
/// header of any supported array is far shorter than this.
const MAX_HEADER_LEN: u64 = 1 << 20;

/// How deeply brackets may nest in a header (record dtypes nest; ours never do).
const MAX_HEADER_DEPTH: usize = 32;

/// The descrs we read, for diagnostics.
const SUPPORTED: &str = "supported .npy dtypes: '<f4'/'>f4' (f32), '<f8'/'>f8' (f64), \
     '<f2'/'>f2' (f16), and '<V2'/'>V2'/'|V2' (bf16, as NumPy with ml_dtypes saves it)";

/// An element type we can read, with what `npyz` does not already handle.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Elem {
    F32,
    F64,
    F16,
    /// bf16. NumPy has no bfloat16 of its own; `ml_dtypes.bfloat16` is a NumPy extension type
    /// whose `dtype.str` is `'<V2'` (a two-byte raw "void" type). Checked with numpy 2.4.6 and
    /// ml_dtypes 0.6.0: `np.save` of a bfloat16 array writes `'descr': '<V2'` followed by the
    /// raw bf16 bit patterns, little-endian; a byte-swapped array
    /// (`a.astype(a.dtype.newbyteorder('>'))`) writes `'>V2'`, and a plain `np.dtype('V2')` is
    /// `'|V2'`. `np.load` gives such a file back as a `V2` array which
    /// `.view(ml_dtypes.bfloat16)` turns into bfloat16 again. So we read `'<V2'` and `'|V2'` as
    /// little-endian bf16 and `'>V2'` as big-endian bf16, and we write `'<V2'`. (A `V2` array
    /// could in principle hold any two-byte records; in practice it is bf16.)
    BF16 {
        big_endian: bool,
    },
}

impl Elem {
    fn from_npy(dtype: &NpyDType) -> Option<Elem> {
        let NpyDType::Plain(ts) = dtype else {
            return None;
        };
        match (ts.type_char(), ts.size_field()) {
            (TypeChar::Float, 4) => Some(Elem::F32),
            (TypeChar::Float, 8) => Some(Elem::F64),
            (TypeChar::Float, 2) => Some(Elem::F16),
            (TypeChar::RawData, 2) => Some(Elem::BF16 {
                big_endian: ts.endianness() == Endianness::Big,
            }),
            _ => None,
        }
    }

    fn item_size(self) -> u64 {
        match self {
            Elem::F32 => 4,
            Elem::F64 => 8,
            Elem::F16 | Elem::BF16 { .. } => 2,
        }
    }
}

/// A numpy dtype descr with the name users know beside it: `'<i4' (int32)`.
fn descr_words(descr: &str) -> String {
    let code = descr
        .trim_matches('\'')
        .trim_start_matches(['<', '>', '|', '=']);
    let name = match code {
        "i1" => "int8",
        "i2" => "int16",
        "i4" => "int32",
        "i8" => "int64",
        "u1" => "uint8",
        "u2" => "uint16",
        "u4" => "uint32",
        "u8" => "uint64",
        "b1" => "bool",
        "f2" => "float16",
        "f4" => "float32",
        "f8" => "float64",
        "f16" => "float128",
        "c8" => "complex64",
        "c16" => "complex128",
        _ => return descr.to_string(),
    };
    format!("{descr} ({name})")
}

/// Reads a `.npy` file into a C-contiguous tensor.
pub fn read_npy(path: &Path) -> Result<Tensor, Diagnostic> {
    let file = File::open(path).map_err(|e| read_error(path, &e))?;
    let file_len = file.metadata().map_err(|e| read_error(path, &e))?.len();
    let mut reader = BufReader::new(file);
    let (header, data_len) = read_header(&mut reader, file_len, path)?;

    let dtype = header.dtype();
    let Some(elem) = Elem::from_npy(&dtype) else {
        return Err(Diagnostic::new(
            Code::DtypeMismatch,
            format!(
                "`{}` holds elements of dtype {}, which tdsl cannot read",
                path.display(),
                descr_words(&dtype.descr())
            ),
        )
        .help(SUPPORTED));
    };

    // Exact size check, in u64 with overflow checks, before any data is allocated.
    let (shape, count) = checked_extent(
        path,
        header.shape(),
        Some(elem.item_size()),
        data_len,
        &dtype.descr(),
        false,
    )?;
    let count = usize::try_from(count).map_err(|_| {
        too_large_error(
            path,
            header.shape(),
            &dtype.descr(),
            false,
            "it does not fit in memory on this machine",
        )
    })?;

    let fortran = header.order() == Order::Fortran;
    let npy = NpyFile::with_header(header, reader.take(data_len));
    let data = match elem {
        Elem::F32 => Storage::F32(to_c_order(read_elems(npy, count, path)?, &shape, fortran)),
        Elem::F64 => Storage::F64(to_c_order(read_elems(npy, count, path)?, &shape, fortran)),
        Elem::F16 => Storage::F16(to_c_order(
            read_elems::<f16, _>(npy, count, path)?,
            &shape,
            fortran,
        )),
        Elem::BF16 { big_endian } => {
            let raw = read_elems::<FixedSizeBytes<2>, _>(npy, count, path)?;
            let vals = raw
                .into_iter()
                .map(|b| {
                    bf16::from_bits(if big_endian {
                        u16::from_be_bytes(b.0)
                    } else {
                        u16::from_le_bytes(b.0)
                    })
                })
                .collect();
            Storage::BF16(to_c_order(vals, &shape, fortran))
        }
    };
    debug_assert_eq!(data.len(), count);
    Ok(Tensor { shape, data })
}

/// The elements of an array of any type a `.npz` member may hold (see [`read_any`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AnyData {
    /// f32, f64, f16 or bf16 (`V2`), as [`read_npy`] reads them.
    Float(Storage),
    /// Signed or unsigned integers of 1 to 8 bytes, widened to i64 (a u64 above `i64::MAX` is
    /// an error).
    Int(Vec<i64>),
    /// Byte strings (`S`) or unicode strings (`U`), each with its trailing NULs removed.
    Text(Vec<String>),
}

/// An array read by [`read_any`]: C-order elements and the shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AnyArray {
    pub shape: Vec<usize>,
    pub data: AnyData,
}

/// Reads a `.npy` stream of `len` bytes holding floats (as [`read_npy`]), integers or strings,
/// with the same checks as `read_npy`: the header before `npyz` sees it, and the data length
/// against the header before anything is allocated from it. `path` names it in diagnostics.
pub(crate) fn read_any<R: Read>(
    mut reader: R,
    len: u64,
    path: &Path,
) -> Result<AnyArray, Diagnostic> {
    enum Kind {
        Float(Elem),
        Int { signed: bool },
        Bytes,
        Unicode,
    }
    let (header, data_len) = read_header(&mut reader, len, path)?;
    let dtype = header.dtype();
    let unsupported = || {
        Diagnostic::new(
            Code::DtypeMismatch,
            format!(
                "`{}` holds elements of dtype {}, which tdsl cannot read here",
                path.display(),
                descr_words(&dtype.descr())
            ),
        )
        .help("supported: float arrays (f4, f8, f2, V2 as bf16), integers (i1..i8, u1..u8) and strings (S, U)")
    };
    let NpyDType::Plain(ts) = &dtype else {
        return Err(unsupported());
    };
    let size = ts.size_field();
    let big_endian = ts.endianness() == Endianness::Big;
    let kind = match (ts.type_char(), size) {
        (TypeChar::Int, 1 | 2 | 4 | 8) => Kind::Int { signed: true },
        (TypeChar::Uint, 1 | 2 | 4 | 8) => Kind::Int { signed: false },
        (TypeChar::ByteStr, _) => Kind::Bytes,
        (TypeChar::UnicodeStr, _) => Kind::Unicode,
        _ => match Elem::from_npy(&dtype) {
            Some(e) => Kind::Float(e),
            None => return Err(unsupported()),
        },
    };
    let item = match kind {
        Kind::Float(e) => Some(e.item_size()),
        Kind::Unicode => size.checked_mul(4),
        _ => Some(size),
    };
    let (shape, _) = checked_extent(path, header.shape(), item, data_len, &dtype.descr(), true)?;
    // nbytes == data_len <= len, and the caller holds the `len` bytes, so this fits.
    let mut bytes = Vec::new();
    reader
        .take(data_len)
        .read_to_end(&mut bytes)
        .map_err(|e| data_error(path, &e))?;
    if bytes.len() as u64 != data_len {
        return Err(data_error(path, &io::ErrorKind::UnexpectedEof.into()));
    }
    let fortran = header.order() == Order::Fortran;
    let item = item.unwrap_or(0) as usize; // == nbytes / count, which fits
    if item == 0 {
        return Err(invalid(
            path,
            format!("dtype {} has zero-size elements", dtype.descr()),
        ));
    }
    let chunks = || bytes.chunks_exact(item);
    let data = match kind {
        Kind::Float(Elem::F32) => AnyData::Float(Storage::F32(to_c_order(
            chunks()
                .map(|c| f32::from_le_bytes(le(c, big_endian)))
                .collect(),
            &shape,
            fortran,
        ))),
        Kind::Float(Elem::F64) => AnyData::Float(Storage::F64(to_c_order(
            chunks()
                .map(|c| f64::from_le_bytes(le(c, big_endian)))
                .collect(),
            &shape,
            fortran,
        ))),
        Kind::Float(Elem::F16) => AnyData::Float(Storage::F16(to_c_order(
            chunks()
                .map(|c| f16::from_le_bytes(le(c, big_endian)))
                .collect(),
            &shape,
            fortran,
        ))),
        Kind::Float(Elem::BF16 { big_endian }) => AnyData::Float(Storage::BF16(to_c_order(
            chunks()
                .map(|c| bf16::from_le_bytes(le(c, big_endian)))
                .collect(),
            &shape,
            fortran,
        ))),
        Kind::Int { signed } => {
            let mut vals = Vec::with_capacity(bytes.len() / item);
            for c in chunks() {
                let le: [u8; 8] = le(c, big_endian);
                let mut wide = [0u8; 8];
                wide[..item].copy_from_slice(&le[..item]);
                if signed && le[item - 1] & 0x80 != 0 {
                    wide[item..].fill(0xff);
                }
                let v = i64::from_le_bytes(wide);
                if !signed && item == 8 && v < 0 {
                    return Err(invalid(
                        path,
                        format!("the uint64 value {} does not fit in an int64", v as u64),
                    ));
                }
                vals.push(v);
            }
            AnyData::Int(to_c_order(vals, &shape, fortran))
        }
        Kind::Bytes | Kind::Unicode => {
            let mut vals = Vec::with_capacity(bytes.len() / item);
            {
                for c in chunks() {
                    let text = if matches!(kind, Kind::Bytes) {
                        String::from_utf8_lossy(c).into_owned()
                    } else {
                        c.chunks_exact(4)
                            .map(|u| {
                                let b = [u[0], u[1], u[2], u[3]];
                                let code = if big_endian {
                                    u32::from_be_bytes(b)
                                } else {
                                    u32::from_le_bytes(b)
                                };
                                char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER)
                            })
                            .collect()
                    };
                    vals.push(text.trim_end_matches('\0').to_string());
                }
            }
            AnyData::Text(to_c_order(vals, &shape, fortran))
        }
    };
    Ok(AnyArray { shape, data })
}

/// The first `N` bytes of an element of `c.len() <= N` bytes in little-endian order, zero-filled.
fn le<const N: usize>(c: &[u8], big_endian: bool) -> [u8; N] {
    let mut out = [0u8; N];
    let n = c.len().min(N);
    out[..n].copy_from_slice(&c[..n]);
    if big_endian {
        out[..n].reverse();
    }
    out
}

/// Reads and checks the preamble and header of a `.npy` stream of `file_len` bytes, leaving
/// `reader` at the first data byte. Returns the header and the number of data bytes that
/// follow it (not yet checked against the header's shape and dtype). `path` names the file in
/// diagnostics.
pub(crate) fn read_header<R: Read>(
    reader: &mut R,
    file_len: u64,
    path: &Path,
) -> Result<(NpyHeader, u64), Diagnostic> {
    // The preamble: magic, version, header length. npyz reads it too, but we need the header
    // length checked against the file before anything is allocated for the header.
    let mut pre = [0u8; 12];
    let avail = file_len.min(8) as usize;
    reader
        .read_exact(&mut pre[..avail])
        .map_err(|e| data_error(path, &e))?;
    let magic_len = avail.min(MAGIC.len());
    if avail < MAGIC.len() || pre[..magic_len] != MAGIC[..magic_len] {
        return Err(invalid(
            path,
            format!(
                "not a .npy file: it does not start with the magic string \\x93NUMPY{}",
                if avail < MAGIC.len() {
                    format!(" (the file is only {file_len} bytes long)")
                } else {
                    String::new()
                }
            ),
        ));
    }
    let truncated_preamble = || invalid(path, "truncated: the file ends inside the preamble");
    if avail < 8 {
        return Err(truncated_preamble());
    }
    let header_start: usize = match (pre[6], pre[7]) {
        (1, 0) => 10,
        (2, 0) | (3, 0) => 12,
        (major, minor) => {
            return Err(invalid(
                path,
                format!("format version {major}.{minor} is not supported (1.0, 2.0 and 3.0 are)"),
            ))
        }
    };
    if file_len < header_start as u64 {
        return Err(truncated_preamble());
    }
    reader
        .read_exact(&mut pre[8..header_start])
        .map_err(|e| data_error(path, &e))?;
    let header_len = match header_start {
        10 => u64::from(u16::from_le_bytes([pre[8], pre[9]])),
        _ => u64::from(u32::from_le_bytes([pre[8], pre[9], pre[10], pre[11]])),
    };
    let after_preamble = file_len - header_start as u64;
    if header_len > after_preamble {
        return Err(invalid(
            path,
            format!(
                "truncated: the header claims {header_len} bytes but only {after_preamble} \
                 follow the preamble"
            ),
        ));
    }
    if header_len > MAX_HEADER_LEN {
        return Err(invalid(
            path,
            format!(
                "the header is {header_len} bytes long, more than the limit of {MAX_HEADER_LEN}"
            ),
        ));
    }
    // Both bounded above: header_len <= MAX_HEADER_LEN and <= the file length.
    let mut head = vec![0u8; header_start + header_len as usize];
    head[..header_start].copy_from_slice(&pre[..header_start]);
    reader
        .read_exact(&mut head[header_start..])
        .map_err(|e| data_error(path, &e))?;

    let descr = match gate(&head[header_start..]) {
        Ok(descr) => descr,
        Err(GateError::Invalid(why)) => {
            return Err(invalid(path, format!("malformed header: {why}")))
        }
        Err(GateError::TooLarge(why)) => {
            return Err(Diagnostic::new(
                Code::TooLarge,
                format!("`{}` is too large: {why}", path.display()),
            ))
        }
    };
    // npyz would say "invalid type string"; name the descr instead.
    if let Some(descr) = descr {
        if descr.parse::<TypeStr>().is_err() {
            return Err(invalid(path, format!("unknown dtype descr '{descr}'")).help(SUPPORTED));
        }
    }
    let header = NpyHeader::from_reader(&head[..])
        .map_err(|e| invalid(path, format!("malformed header: {e}")))?;
    drop(head);
    Ok((header, after_preamble - header_len))
}

/// Writes a tensor as a version 1.0, little-endian, C-order `.npy` file, atomically.
pub fn write_npy(path: &Path, t: &Tensor) -> Result<(), Diagnostic> {
    let count = t
        .shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d));
    if count != Some(t.data.len()) {
        return Err(write_error(
            path,
            format!(
                "the tensor's shape {:?} does not match its {} elements",
                t.shape,
                t.data.len()
            ),
        ));
    }
    let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
    write_atomically(path, |w| match &t.data {
        Storage::F32(v) => write_elems(w, "<f4", &shape, v.iter().copied()),
        Storage::F64(v) => write_elems(w, "<f8", &shape, v.iter().copied()),
        Storage::F16(v) => write_elems(w, "<f2", &shape, v.iter().copied()),
        Storage::BF16(v) => write_elems(
            w,
            "<V2",
            &shape,
            v.iter().map(|x| FixedSizeBytes(x.to_bits().to_le_bytes())),
        ),
    })
}

/// Reads exactly `count` elements (already checked against the file length).
fn read_elems<T: npyz::Deserialize, R: Read>(
    npy: NpyFile<R>,
    count: usize,
    path: &Path,
) -> Result<Vec<T>, Diagnostic> {
    let items = npy
        .data::<T>()
        .map_err(|e| invalid(path, format!("cannot decode the data: {e}")))?;
    let mut out = Vec::with_capacity(count);
    for item in items {
        out.push(item.map_err(|e| data_error(path, &e))?);
    }
    Ok(out)
}

/// Returns the elements in C order. `data` is in C order already unless `fortran`, in which case
/// it is in Fortran order (first index fastest) and is transposed.
fn to_c_order<T: Clone>(data: Vec<T>, shape: &[usize], fortran: bool) -> Vec<T> {
    if !fortran || shape.len() < 2 || data.is_empty() {
        return data;
    }
    // Fortran strides: stride[k] = shape[0] * ... * shape[k-1]. No overflow: the product of all
    // dimensions is data.len().
    let mut strides = Vec::with_capacity(shape.len());
    let mut acc = 1usize;
    for &d in shape {
        strides.push(acc);
        acc *= d;
    }
    // Walk the C-order index like an odometer, last axis fastest, tracking the Fortran offset.
    let mut index = vec![0usize; shape.len()];
    let mut offset = 0usize;
    let mut out = Vec::with_capacity(data.len());
    for _ in 0..data.len() {
        out.push(data[offset].clone());
        for k in (0..shape.len()).rev() {
            index[k] += 1;
            offset += strides[k];
            if index[k] < shape[k] {
                break;
            }
            offset -= strides[k] * shape[k];
            index[k] = 0;
        }
    }
    out
}

fn write_elems<T: npyz::Serialize, W: Write>(
    w: W,
    descr: &str,
    shape: &[u64],
    items: impl Iterator<Item = T>,
) -> io::Result<()> {
    let ts: TypeStr = descr
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut out = npyz::WriteOptions::<T>::new()
        .dtype(NpyDType::Plain(ts))
        .shape(shape)
        .writer(w)
        .begin_nd()?;
    out.extend(items)?;
    out.finish()
}

/// Distinguishes temporary files written concurrently by one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Removes the temporary file when dropped, unless disarmed (after the rename).
struct TempFile {
    path: PathBuf,
    armed: bool,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Writes `path` through `fill` into `.NAME.tmp-PID-N` in the same directory, then renames it
/// over `path`. On any error (or panic) the temporary file is removed.
pub(crate) fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> Result<(), Diagnostic> {
    let Some(name) = path.file_name() else {
        return Err(write_error(path, "the path does not name a file"));
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp_name = OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let mut tmp = TempFile {
        path: dir.join(tmp_name),
        armed: true,
    };
    let result = (|| {
        let mut w = BufWriter::new(File::create(&tmp.path)?);
        fill(&mut w)?;
        drop(w.into_inner().map_err(io::IntoInnerError::into_error)?);
        fs::rename(&tmp.path, path)
    })();
    match result {
        Ok(()) => {
            tmp.armed = false;
            Ok(())
        }
        Err(e) => Err(write_error(path, e)),
    }
}

// ---- The header gate ----------------------------------------------------------------------

/// Why [`gate`] rejected a header.
#[derive(Debug)]
enum GateError {
    Invalid(String),
    TooLarge(String),
}

/// A Python literal as far as the gate cares.
enum Lit<'a> {
    Str(&'a [u8]),
    /// `None` when the value does not fit in a u64.
    Int(Option<u64>),
    Word,
    Seq(Vec<Lit<'a>>),
    Dict(Vec<(Lit<'a>, Lit<'a>)>),
}

/// Checks a header's text before `npyz` parses it, so that `npyz` cannot panic or recurse
/// without bound on it.
///
/// It parses a strict subset of Python literals: dicts, tuples, lists, plain decimal integers,
/// quoted strings without escapes or prefixes, `True`, `False`, `None`, nested at most
/// [`MAX_HEADER_DEPTH`] deep. NumPy's headers are inside that subset. On that subset the gate
/// reads exactly what `npyz`'s parser reads, so every top-level `'shape'` entry `npyz` could use
/// has been seen here, and its dimensions' product (zeros left out, so every partial product
/// `npyz` computes is covered) has been checked to fit in a u64.
///
/// Returns the top-level `'descr'` entry when it is a string.
fn gate(text: &[u8]) -> Result<Option<String>, GateError> {
    let mut p = LitParser { s: text, pos: 0 };
    let top = p.value(0)?;
    p.skip_ws();
    if p.pos != text.len() {
        return Err(p.unexpected());
    }
    let Lit::Dict(entries) = top else {
        return Err(GateError::Invalid("the header is not a dict".into()));
    };
    let mut descr = None;
    for (key, value) in &entries {
        if let (Lit::Str(b"descr"), Lit::Str(s)) = (key, value) {
            descr = Some(String::from_utf8_lossy(s).into_owned());
        }
        let (Lit::Str(b"shape"), Lit::Seq(dims)) = (key, value) else {
            continue;
        };
        let mut product = 1u64;
        for dim in dims {
            let Lit::Int(d) = dim else {
                continue; // npyz rejects the shape; it multiplies nothing
            };
            product = match d {
                Some(0) => product,
                Some(d) => product.checked_mul(*d).ok_or_else(|| {
                    GateError::TooLarge(
                        "its header claims a shape whose element count overflows 64 bits".into(),
                    )
                })?,
                None => {
                    return Err(GateError::TooLarge(
                        "its header claims a dimension larger than 2^64".into(),
                    ))
                }
            };
        }
    }
    Ok(descr)
}

struct LitParser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> LitParser<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn unexpected(&self) -> GateError {
        GateError::Invalid(match self.peek() {
            Some(c) => format!(
                "unexpected {} at byte {} of the header",
                ByteDisplay(c),
                self.pos
            ),
            None => "the header ends unexpectedly".into(),
        })
    }

    fn value(&mut self, depth: usize) -> Result<Lit<'a>, GateError> {
        if depth > MAX_HEADER_DEPTH {
            return Err(GateError::Invalid(format!(
                "brackets nest more than {MAX_HEADER_DEPTH} deep"
            )));
        }
        self.skip_ws();
        match self.peek() {
            Some(b'{') => {
                self.pos += 1;
                let mut entries = Vec::new();
                loop {
                    self.skip_ws();
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        return Ok(Lit::Dict(entries));
                    }
                    let key = self.value(depth + 1)?;
                    self.skip_ws();
                    if self.peek() != Some(b':') {
                        return Err(self.unexpected());
                    }
                    self.pos += 1;
                    let value = self.value(depth + 1)?;
                    entries.push((key, value));
                    self.skip_ws();
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(b'}') => {}
                        _ => return Err(self.unexpected()),
                    }
                }
            }
            Some(open @ (b'(' | b'[')) => {
                let close = if open == b'(' { b')' } else { b']' };
                self.pos += 1;
                let mut items = Vec::new();
                loop {
                    self.skip_ws();
                    if self.peek() == Some(close) {
                        self.pos += 1;
                        return Ok(Lit::Seq(items));
                    }
                    items.push(self.value(depth + 1)?);
                    self.skip_ws();
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(c) if c == close => {}
                        _ => return Err(self.unexpected()),
                    }
                }
            }
            Some(quote @ (b'\'' | b'"')) => {
                let start = self.pos + 1;
                let mut end = start;
                loop {
                    match self.s.get(end) {
                        Some(&c) if c == quote => break,
                        Some(b'\\') => {
                            return Err(GateError::Invalid(
                                "escape sequences in header strings are not supported".into(),
                            ))
                        }
                        Some(b'\n') | None => {
                            return Err(GateError::Invalid("unterminated string".into()))
                        }
                        Some(_) => end += 1,
                    }
                }
                self.pos = end + 1;
                if matches!(self.peek(), Some(b'\'' | b'"')) {
                    return Err(GateError::Invalid(
                        "triple-quoted or adjacent strings are not supported".into(),
                    ));
                }
                Ok(Lit::Str(&self.s[start..end]))
            }
            Some(b'0'..=b'9') => {
                let mut value = Some(0u64);
                while let Some(c @ (b'0'..=b'9' | b'_')) = self.peek() {
                    if c != b'_' {
                        value = value
                            .and_then(|v| v.checked_mul(10))
                            .and_then(|v| v.checked_add(u64::from(c - b'0')));
                    }
                    self.pos += 1;
                }
                if matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == b'.') {
                    return Err(GateError::Invalid(
                        "only plain decimal integers are supported in the header".into(),
                    ));
                }
                Ok(Lit::Int(value))
            }
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let start = self.pos;
                while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == b'_') {
                    self.pos += 1;
                }
                match &self.s[start..self.pos] {
                    b"True" | b"False" | b"None" => Ok(Lit::Word),
                    word => Err(GateError::Invalid(format!(
                        "unexpected name `{}` in the header",
                        String::from_utf8_lossy(word)
                    ))),
                }
            }
            _ => Err(self.unexpected()),
        }
    }
}

// ---- Diagnostics --------------------------------------------------------------------------

/// The "too large" diagnostic of a header claiming `shape` (with its dtype when `with_dtype`).
fn too_large_error(
    path: &Path,
    shape: &[u64],
    descr: &str,
    with_dtype: bool,
    what: &str,
) -> Diagnostic {
    let of = if with_dtype {
        format!(" of {descr}")
    } else {
        String::new()
    };
    Diagnostic::new(
        Code::TooLarge,
        format!(
            "`{}` is too large: its header claims shape {}{of} and {what}",
            path.display(),
            ShapeDisplay(shape)
        ),
    )
}

/// Checks, in u64 with overflow checks and before anything is allocated, that a header's shape
/// and item size (`None`: it overflows) account for exactly the `data_len` bytes that follow.
/// Returns the shape in `usize` and the element count.
fn checked_extent(
    path: &Path,
    shape_u64: &[u64],
    item: Option<u64>,
    data_len: u64,
    descr: &str,
    with_dtype: bool,
) -> Result<(Vec<usize>, u64), Diagnostic> {
    let too_large = |what: &str| too_large_error(path, shape_u64, descr, with_dtype, what);
    let count = shape_u64
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| too_large("the element count overflows 64 bits"))?;
    let nbytes = item
        .and_then(|i| count.checked_mul(i))
        .ok_or_else(|| too_large("the byte count overflows 64 bits"))?;
    if nbytes != data_len {
        let how = if nbytes > data_len {
            "the data is truncated"
        } else {
            "there are extra bytes after the data"
        };
        return Err(invalid(
            path,
            format!(
                "{how}: the header claims shape {} of {descr} ({count} elements, {nbytes} bytes), \
                 but {data_len} bytes follow the header",
                ShapeDisplay(shape_u64),
            ),
        ));
    }
    let shape = shape_u64
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| too_large("a dimension does not fit in memory on this machine"))?;
    Ok((shape, count))
}

fn invalid(path: &Path, what: impl Display) -> Diagnostic {
    super::invalid_file(Code::NpyInvalid, ".npy", path, what)
}

/// An error while reading bytes whose presence was already checked.
fn data_error(path: &Path, e: &io::Error) -> Diagnostic {
    super::data_error(path, e, invalid)
}

/// A shape as Python writes a tuple: `()`, `(3,)`, `(2, 3)`.
struct ShapeDisplay<'a>(&'a [u64]);

impl Display for ShapeDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        if self.0.len() == 1 {
            f.write_str(",")?;
        }
        f.write_str(")")
    }
}

/// A header byte for a message: printable ASCII quoted, anything else in hex.
struct ByteDisplay(u8);

impl Display for ByteDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_ascii_graphic() {
            write!(f, "`{}`", self.0 as char)
        } else {
            write!(f, "byte 0x{:02x}", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    /// A `.npy` file as NumPy lays it out: version 1.0, header padded with spaces to a multiple
    /// of 64 bytes and ended by a newline.
    fn npy_bytes(descr: &str, fortran: bool, shape: &str, data: &[u8]) -> Vec<u8> {
        let mut header = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
            if fortran { "True" } else { "False" }
        );
        while !(10 + header.len() + 1).is_multiple_of(64) {
            header.push(' ');
        }
        header.push('\n');
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn write_file(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.path().join(name);
        fs::write(&path, bytes).expect("write test file");
        path
    }

    fn read_bytes(bytes: &[u8]) -> Result<Tensor, Diagnostic> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_file(&dir, "t.npy", bytes);
        read_npy(&path)
    }

    fn f32_le(vals: &[f32]) -> Vec<u8> {
        vals.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn expect_err(r: Result<Tensor, Diagnostic>, code: Code, needles: &[&str]) -> Diagnostic {
        let d = r.expect_err("expected a diagnostic");
        assert_eq!(d.code, code, "{d:?}");
        assert!(d.message.contains("t.npy"), "message names the file: {d:?}");
        for n in needles {
            assert!(d.message.contains(n), "{n:?} not in {:?}", d.message);
        }
        d
    }

    fn no_stray_files(dir: &tempfile::TempDir, expected: usize) {
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), expected, "{names:?}");
        assert!(
            names.iter().all(|n| !n.to_string_lossy().contains(".tmp-")),
            "{names:?}"
        );
    }

    #[test]
    fn round_trips_every_dtype() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vals = [0.0, 1.0, -2.5, 0.125, 3.0, 65504.0, f64::INFINITY];
        for dtype in DType::ALL {
            for shape in [vec![7], vec![1, 7], vec![7, 1, 1]] {
                let t = Tensor::from_f64(dtype, shape.clone(), &vals);
                let path = dir.path().join(format!("{dtype}.npy"));
                write_npy(&path, &t).expect("write");
                let back = read_npy(&path).expect("read");
                assert_eq!(back, t, "{dtype} {shape:?}");
            }
        }
        let t = Tensor::from_f64(DType::F32, vec![2, 3], &[1., 2., 3., 4., 5., 6.]);
        let path = dir.path().join("m.npy");
        write_npy(&path, &t).expect("write");
        assert_eq!(read_npy(&path).expect("read"), t);
        no_stray_files(&dir, DType::ALL.len() + 1);
    }

    #[test]
    fn round_trips_scalars_and_empty_tensors() {
        let dir = tempfile::tempdir().expect("tempdir");
        for dtype in DType::ALL {
            let path = dir.path().join("s.npy");
            let t = Tensor::from_f64(dtype, vec![], &[-1.5]);
            write_npy(&path, &t).expect("write");
            let back = read_npy(&path).expect("read");
            assert!(back.shape.is_empty());
            assert_eq!(back, t);

            let t = Tensor::from_f64(dtype, vec![0, 3], &[]);
            write_npy(&path, &t).expect("write");
            assert_eq!(read_npy(&path).expect("read"), t);
        }
    }

    #[test]
    fn writes_version_1_little_endian_c_order_headers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("h.npy");
        for (dtype, descr) in [
            (DType::F32, "'<f4'"),
            (DType::F64, "'<f8'"),
            (DType::F16, "'<f2'"),
            (DType::BF16, "'<V2'"),
        ] {
            let t = Tensor::from_f64(dtype, vec![2, 3], &[1., 2., 3., 4., 5., 6.]);
            write_npy(&path, &t).expect("write");
            let bytes = fs::read(&path).expect("read back");
            assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
            let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            assert_eq!((10 + hlen) % 16, 0);
            let header = String::from_utf8_lossy(&bytes[10..10 + hlen]);
            assert!(header.contains(&format!("'descr': {descr}")), "{header}");
            assert!(header.contains("'fortran_order': False"), "{header}");
            assert!(header.contains("'shape': (2, 3, )"), "{header}");
            assert_eq!(bytes.len(), 10 + hlen + 6 * dtype.size_bytes() as usize);
        }
        // Little-endian data, bf16 as its bit pattern.
        let t = Tensor::from_f64(DType::BF16, vec![1], &[1.0]);
        write_npy(&path, &t).expect("write");
        assert_eq!(
            fs::read(&path).expect("read back").last_chunk(),
            Some(&[0x80, 0x3f])
        );
    }

    #[test]
    fn reads_bf16_as_numpy_with_ml_dtypes_saves_it() {
        // Byte for byte what `np.save(f, np.array([1.0, -2.5, 3.0], dtype=ml_dtypes.bfloat16))`
        // wrote (numpy 2.4.6, ml_dtypes 0.6.0).
        let mut bytes = b"\x93NUMPY\x01\x00v\x00{'descr': '<V2', 'fortran_order': False, \
            'shape': (3,), }"
            .to_vec();
        bytes.extend(std::iter::repeat_n(b' ', 60));
        bytes.extend_from_slice(b"\n\x80? \xc0@@");
        assert_eq!(bytes.len(), 128 + 6);
        let t = read_bytes(&bytes).expect("read");
        assert_eq!(t, Tensor::from_f64(DType::BF16, vec![3], &[1.0, -2.5, 3.0]));

        // '|V2' (a plain two-byte void) is read the same way.
        let t = read_bytes(&npy_bytes("|V2", false, "(1,)", &[0x80, 0x3f])).expect("read");
        assert_eq!(t, Tensor::from_f64(DType::BF16, vec![1], &[1.0]));
    }

    #[test]
    fn reads_big_endian_data() {
        let vals = [1.0f64, -2.5, 0.5];
        let cases: [(&str, DType, Vec<u8>); 4] = [
            (
                ">f4",
                DType::F32,
                vals.iter()
                    .flat_map(|&v| (v as f32).to_be_bytes())
                    .collect(),
            ),
            (
                ">f8",
                DType::F64,
                vals.iter().flat_map(|v| v.to_be_bytes()).collect(),
            ),
            (
                ">f2",
                DType::F16,
                vals.iter()
                    .flat_map(|&v| f16::from_f64(v).to_be_bytes())
                    .collect(),
            ),
            (
                ">V2",
                DType::BF16,
                vals.iter()
                    .flat_map(|&v| bf16::from_f64(v).to_be_bytes())
                    .collect(),
            ),
        ];
        for (descr, dtype, data) in cases {
            let t = read_bytes(&npy_bytes(descr, false, "(3,)", &data)).expect(descr);
            assert_eq!(t, Tensor::from_f64(dtype, vec![3], &vals), "{descr}");
        }
        // Little-endian f16 too, spelled out.
        let data: Vec<u8> = vals
            .iter()
            .flat_map(|&v| f16::from_f64(v).to_le_bytes())
            .collect();
        let t = read_bytes(&npy_bytes("<f2", false, "(3,)", &data)).expect("<f2");
        assert_eq!(t, Tensor::from_f64(DType::F16, vec![3], &vals));
    }

    #[test]
    fn transposes_fortran_order_into_c_order() {
        // np.asfortranarray(np.arange(6, dtype='<f4').reshape(2, 3)) stores 0 3 1 4 2 5.
        let data = f32_le(&[0., 3., 1., 4., 2., 5.]);
        let t = read_bytes(&npy_bytes("<f4", true, "(2, 3)", &data)).expect("read");
        assert_eq!(
            t,
            Tensor::from_f64(DType::F32, vec![2, 3], &[0., 1., 2., 3., 4., 5.])
        );

        // Rank 3, big-endian f8: element (i, j, k) has value 100i + 10j + k and sits at Fortran
        // offset i + 2j + 6k.
        let (a, b, c) = (2, 3, 4);
        let mut fortran = vec![0.0f64; a * b * c];
        let mut expected = Vec::new();
        for i in 0..a {
            for j in 0..b {
                for k in 0..c {
                    let v = (100 * i + 10 * j + k) as f64;
                    fortran[i + a * j + a * b * k] = v;
                    expected.push(v);
                }
            }
        }
        let data: Vec<u8> = fortran.iter().flat_map(|v| v.to_be_bytes()).collect();
        let t = read_bytes(&npy_bytes(">f8", true, "(2, 3, 4)", &data)).expect("read");
        assert_eq!(t, Tensor::from_f64(DType::F64, vec![2, 3, 4], &expected));

        // Fortran-order scalars and vectors need no transposition.
        let t = read_bytes(&npy_bytes("<f4", true, "()", &f32_le(&[7.0]))).expect("read");
        assert_eq!(t, Tensor::from_f64(DType::F32, vec![], &[7.0]));
    }

    #[test]
    fn reads_a_scalar() {
        // np.save(f, np.array(np.float32(3.5)))
        let t = read_bytes(&npy_bytes("<f4", false, "()", &f32_le(&[3.5]))).expect("read");
        assert!(t.shape.is_empty());
        assert_eq!(t.to_f64(), vec![3.5]);
    }

    #[test]
    fn reads_versions_2_and_3() {
        for version in [2u8, 3] {
            let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n";
            let mut bytes = MAGIC.to_vec();
            bytes.extend_from_slice(&[version, 0]);
            bytes.extend_from_slice(&(header.len() as u32).to_le_bytes());
            bytes.extend_from_slice(header.as_bytes());
            bytes.extend(f32_le(&[1.0, 2.0]));
            let t = read_bytes(&bytes).expect("read");
            assert_eq!(t, Tensor::from_f64(DType::F32, vec![2], &[1.0, 2.0]));
        }
    }

    #[test]
    fn rejects_truncated_files() {
        let full = npy_bytes("<f4", false, "(2, 3)", &f32_le(&[0.; 6]));
        let d = expect_err(
            read_bytes(&full[..full.len() - 4]),
            Code::NpyInvalid,
            &["truncated", "(2, 3)", "24 bytes", "20 bytes"],
        );
        assert!(d.labels.is_empty());
        // Cut inside the header and inside the preamble.
        expect_err(read_bytes(&full[..40]), Code::NpyInvalid, &["truncated"]);
        expect_err(read_bytes(&full[..9]), Code::NpyInvalid, &["preamble"]);
        // Too many bytes is just as wrong.
        let mut long = full.clone();
        long.extend_from_slice(&[0; 4]);
        expect_err(read_bytes(&long), Code::NpyInvalid, &["extra bytes"]);
    }

    #[test]
    fn rejects_lying_headers_without_allocating() {
        // 10^15 f8 elements claimed, 16 bytes present.
        let bytes = npy_bytes("<f8", false, "(1000000000000000,)", &[0; 16]);
        expect_err(
            read_bytes(&bytes),
            Code::NpyInvalid,
            &["(1000000000000000,)", "8000000000000000 bytes"],
        );
        // Element counts that overflow 64 bits, even when a zero makes the product zero (npyz
        // would overflow computing its strides), or the byte count overflows.
        for shape in [
            "(4294967296, 4294967296)",
            "(4294967296, 4294967296, 0)",
            "(0, 4294967296, 4294967296)",
            "(99999999999999999999999,)",
        ] {
            expect_err(
                read_bytes(&npy_bytes("<f4", false, shape, &[])),
                Code::TooLarge,
                &["too large"],
            );
        }
        expect_err(
            read_bytes(&npy_bytes("<f8", false, "(4611686018427387904,)", &[])),
            Code::TooLarge,
            &["byte count"],
        );
        // A version 2.0 header claiming 4 GiB of header text.
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[2, 0, 0xff, 0xff, 0xff, 0xff]);
        bytes.extend_from_slice(b"{'descr': '<f4'}");
        expect_err(read_bytes(&bytes), Code::NpyInvalid, &["4294967295"]);
    }

    #[test]
    fn rejects_bad_magic_and_versions() {
        let good = npy_bytes("<f4", false, "(1,)", &f32_le(&[1.0]));
        let mut bad = good.clone();
        bad[1] = b'X';
        expect_err(read_bytes(&bad), Code::NpyInvalid, &["magic"]);
        expect_err(read_bytes(b""), Code::NpyInvalid, &["magic", "0 bytes"]);
        expect_err(read_bytes(b"PK\x03\x04 zip"), Code::NpyInvalid, &["magic"]);
        let mut bad = good.clone();
        bad[6] = 4;
        expect_err(read_bytes(&bad), Code::NpyInvalid, &["version 4.0"]);
    }

    #[test]
    fn rejects_unsupported_descrs() {
        for (descr, size) in [("<i4", 4), ("|b1", 1), ("<c8", 8), ("<u2", 2), ("|V4", 4)] {
            let d = expect_err(
                read_bytes(&npy_bytes(descr, false, "(1,)", &vec![0; size])),
                Code::DtypeMismatch,
                &[descr],
            );
            let help = d.help.expect("help lists the supported dtypes");
            assert!(help.contains("'<f4'") && help.contains("'<V2'"), "{help}");
        }
        // Object arrays (pickles) and record dtypes.
        expect_err(
            read_bytes(&npy_bytes("|O", false, "(1,)", &[0; 8])),
            Code::DtypeMismatch,
            &["|O"],
        );
        let mut header =
            "{'descr': [('a', '<f4'), ('b', '<f4')], 'fortran_order': False, 'shape': (1,), }"
                .to_string();
        header.push('\n');
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[1, 0]);
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(&[0; 8]);
        expect_err(read_bytes(&bytes), Code::DtypeMismatch, &["'a'"]);
        // Not a type string at all.
        expect_err(
            read_bytes(&npy_bytes("bfloat16", false, "(1,)", &[0; 2])),
            Code::NpyInvalid,
            &["bfloat16"],
        );
    }

    #[test]
    fn rejects_malformed_header_dicts() {
        let cases: [(&str, &str); 8] = [
            ("{'descr': '<f4', 'fortran_order': False}", "shape"),
            ("{'descr': '<f4', 'shape': (1,)}", "fortran_order"),
            ("{'fortran_order': False, 'shape': (1,)}", "descr"),
            (
                "{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}",
                "fortran_order",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': 'x'}",
                "shape",
            ),
            ("['descr', '<f4']", "dict"),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'sh\\x61pe': (1,)}",
                "escape",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (0x10,)}",
                "decimal",
            ),
        ];
        for (header, needle) in cases {
            let mut bytes = MAGIC.to_vec();
            bytes.extend_from_slice(&[1, 0]);
            bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
            bytes.extend_from_slice(header.as_bytes());
            bytes.extend(f32_le(&[1.0]));
            expect_err(read_bytes(&bytes), Code::NpyInvalid, &[needle]);
        }
        // Deep nesting is refused before npyz's recursive parser sees it.
        let header = format!("{{'descr': {}1{}}}", "(".repeat(5000), ")".repeat(5000));
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[1, 0]);
        bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
        bytes.extend_from_slice(header.as_bytes());
        expect_err(read_bytes(&bytes), Code::NpyInvalid, &["nest"]);
    }

    #[test]
    fn reports_missing_files_as_read_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.npy");
        expect_err(read_npy(&path), Code::FileRead, &["cannot read"]);
    }

    #[test]
    fn writes_atomically_and_cleans_up_on_failure() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Tensor::from_f64(DType::F64, vec![2], &[1.0, 2.0]);

        // Overwriting replaces the file whole.
        let path = dir.path().join("t.npy");
        fs::write(&path, b"old contents").expect("write");
        write_npy(&path, &t).expect("overwrite");
        assert_eq!(read_npy(&path).expect("read"), t);
        no_stray_files(&dir, 1);

        // The rename fails when the target is a non-empty directory: the error names the path
        // and no temporary file is left behind.
        let blocked = dir.path().join("blocked.npy");
        fs::create_dir(&blocked).expect("mkdir");
        fs::write(blocked.join("x"), b"x").expect("write");
        let d = write_npy(&blocked, &t).expect_err("cannot replace a directory");
        assert_eq!(d.code, Code::FileWrite);
        assert!(d.message.contains("blocked.npy"), "{}", d.message);
        no_stray_files(&dir, 2);

        // A missing directory is a write error too.
        let d = write_npy(&dir.path().join("nope/t.npy"), &t).expect_err("no such dir");
        assert_eq!(d.code, Code::FileWrite);
        no_stray_files(&dir, 2);

        // A tensor whose shape disagrees with its data is refused before anything is written.
        let bad = Tensor {
            shape: vec![3],
            data: Storage::F32(vec![1.0]),
        };
        let d = write_npy(&dir.path().join("bad.npy"), &bad).expect_err("bad tensor");
        assert_eq!(d.code, Code::FileWrite);
        no_stray_files(&dir, 2);
    }

    #[test]
    fn transposes_like_numpy() {
        assert_eq!(to_c_order(vec![1, 2, 3], &[3], true), vec![1, 2, 3]);
        assert_eq!(
            to_c_order(vec![0, 3, 1, 4, 2, 5], &[2, 3], false),
            vec![0, 3, 1, 4, 2, 5]
        );
        assert_eq!(
            to_c_order(vec![0, 3, 1, 4, 2, 5], &[2, 3], true),
            vec![0, 1, 2, 3, 4, 5]
        );
        assert_eq!(
            to_c_order(Vec::<u8>::new(), &[0, 3], true),
            Vec::<u8>::new()
        );
    }
}
