//! `.safetensors` files: reading one named tensor, listing the names, and writing a set of
//! tensors.
//!
//! The `safetensors` crate parses and validates the JSON header (offsets contiguous from zero,
//! each tensor's byte range exactly `elements × item size`, no arithmetic overflow) and writes
//! files. We read only the 8-byte length, the header and the bytes of the one tensor asked for,
//! not the whole file, which can be many gigabytes.
//!
//! Invariants:
//! - The header length is checked against the crate's 100 MB limit and the real file length
//!   before the header is read, and the data the header describes must end exactly at the end
//!   of the file (as `SafeTensors::deserialize` requires) before any tensor bytes are read.
//! - F32, F64, F16 and BF16 tensors are read (little-endian, C order, as the format defines);
//!   any other dtype is a diagnostic naming it.
//! - Writes go through `safetensors::serialize_to_file`, which writes a temporary file beside
//!   the target and renames it, so a failed write leaves no partial file.
//! - Every error is a [`Diagnostic`] (without labels) whose message names the file.

use super::{read_error, write_error};
use std::fmt::Display;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use ::safetensors::tensor::{Metadata, TensorView};
use ::safetensors::Dtype;
use half::{bf16, f16};

use crate::diag::{Code, Diagnostic};
use crate::tensor::{Storage, Tensor};

/// The size of the little-endian u64 header length that starts every file.
const LEN_BYTES: u64 = 8;

/// The largest header the `safetensors` crate accepts.
const MAX_HEADER_LEN: u64 = 100_000_000;

/// How many names a "tensor not found" help line lists.
const MAX_LISTED: usize = 10;

/// Reads the tensor called `name` from a `.safetensors` file.
pub fn read_safetensors(path: &Path, name: &str) -> Result<Tensor, Diagnostic> {
    let (mut reader, data_start, metadata) = open(path)?;
    let Some(info) = metadata.info(name) else {
        let names = sorted_names(&metadata);
        return Err(Diagnostic::new(
            Code::TensorNotFound,
            format!("`{}` has no tensor named `{name}`", path.display()),
        )
        .help(not_found_help(name, &names)));
    };
    let element_size: usize = match info.dtype {
        Dtype::F32 => 4,
        Dtype::F64 => 8,
        Dtype::F16 | Dtype::BF16 => 2,
        other => {
            return Err(Diagnostic::new(
                Code::DtypeMismatch,
                format!(
                    "tensor `{name}` in `{}` has dtype {other}, which tdsl cannot read",
                    path.display()
                ),
            )
            .help("supported safetensors dtypes: F32, F64, F16, BF16"))
        }
    };
    // The crate validated that the range is `elements × item size` bytes without overflow and
    // that it lies inside the data section, whose end we checked against the file length. Check
    // the size again anyway, so nothing below depends on that for safety.
    let bytes = tensor_bytes(&mut reader, data_start, info, element_size, path, name)?;
    let data = match info.dtype {
        Dtype::F32 => Storage::F32(decode(&bytes, f32::from_le_bytes)),
        Dtype::F64 => Storage::F64(decode(&bytes, f64::from_le_bytes)),
        Dtype::F16 => Storage::F16(decode(&bytes, f16::from_le_bytes)),
        _ => Storage::BF16(decode(&bytes, bf16::from_le_bytes)),
    };
    Ok(Tensor {
        shape: info.shape.clone(),
        data,
    })
}

/// The names of the tensors in a `.safetensors` file, sorted.
pub fn safetensors_names(path: &Path) -> Result<Vec<String>, Diagnostic> {
    let (_, _, metadata) = open(path)?;
    Ok(sorted_names(&metadata))
}

/// Writes tensors under the given names to a `.safetensors` file, atomically.
pub fn write_safetensors(path: &Path, tensors: &[(&str, &Tensor)]) -> Result<(), Diagnostic> {
    let mut encoded: Vec<(&str, Dtype, &[usize], Vec<u8>)> = Vec::with_capacity(tensors.len());
    for (i, &(name, t)) in tensors.iter().enumerate() {
        if tensors[..i].iter().any(|&(other, _)| other == name) {
            return Err(write_error(
                path,
                format!("tensor name `{name}` is used twice"),
            ));
        }
        let (dtype, bytes): (Dtype, Vec<u8>) = match &t.data {
            Storage::F32(v) => (Dtype::F32, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
            Storage::F64(v) => (Dtype::F64, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
            Storage::F16(v) => (Dtype::F16, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
            Storage::BF16(v) => (
                Dtype::BF16,
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            ),
        };
        encoded.push((name, dtype, &t.shape, bytes));
    }
    let views = encoded
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            TensorView::new(*dtype, shape.to_vec(), bytes)
                .map(|view| (*name, view))
                .map_err(|e| write_error(path, format!("tensor `{name}`: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    ::safetensors::serialize_to_file(views, None, path).map_err(|e| write_error(path, e))
}

// ---- Sparse tensors ------------------------------------------------------------------------
//
// A sparse tensor `w` is stored as several tensors named `w.<array>` plus two metadata entries,
// `w.format` and `w.shape` (spec/formats.md, "safetensors"):
//
// | format        | tensors                                                              |
// |---------------|----------------------------------------------------------------------|
// | `coo`         | `w.coords` I32 `nnz × rank`, `w.values` `nnz`                        |
// | `csr`         | `w.row_offsets` I32 `rows+1`, `w.col_indices` I32 `nnz`, `w.values`  |
// | `csc`         | `w.col_offsets` I32 `cols+1`, `w.row_indices` I32 `nnz`, `w.values`  |
// | `bsr`         | `w.block_offsets`, `w.block_col_indices` I32, `w.values` `nnzb×R×C`  |
// | `2:4:axis=A`  | `w.meta` I32 `other axes × words`, `w.values` `other axes × ext/2`   |
//
// `w.shape` is the logical shape, extents joined by commas (`4096,4096`). Index tensors may
// also be I64 when reading (converted with an overflow check). Padding past the last offset is
// not written.

/// Float storage as sparse values.
fn sparse_values(s: Storage) -> tdsl_sparse::Values {
    use tdsl_sparse::Values;
    match s {
        Storage::F32(v) => Values::F32(v),
        Storage::F64(v) => Values::F64(v),
        Storage::F16(v) => Values::F16(v),
        Storage::BF16(v) => Values::BF16(v),
    }
}

/// Extents joined by commas (`4096,4096`; empty for a scalar).
fn parse_extents(text: &str) -> Option<Vec<usize>> {
    if text.trim().is_empty() {
        return Some(Vec::new());
    }
    text.split(',')
        .map(|d| d.trim().parse::<usize>().ok())
        .collect()
}

/// The index arrays of a 2:4 tensor along `axis`: its values and metadata shapes checked.
type IndexReader<'a> = dyn FnMut(&str, usize) -> Result<(Vec<usize>, Vec<i32>), Diagnostic> + 'a;

fn two_four_arrays(
    name: &str,
    shape: &[usize],
    axis: usize,
    values_shape: &[usize],
    index: &mut IndexReader<'_>,
    bad: &dyn Fn(String) -> Diagnostic,
) -> Result<(tdsl_sparse::Layout, Vec<i32>, Vec<i32>), Diagnostic> {
    let layout = tdsl_sparse::Layout::TwoFour { axis };
    layout.check_shape(shape).map_err(|e| bad(e.to_string()))?;
    let mut other: Vec<usize> = shape.to_vec();
    let ext = other.remove(axis);
    let mut want_values = other.clone();
    want_values.push(ext / 2);
    if values_shape != want_values {
        return Err(bad(format!(
            "`{name}.values` has shape {values_shape:?}, but a 2:4 tensor of shape {shape:?} along axis {axis} stores {want_values:?}"
        )));
    }
    let (mshape, meta) = index("meta", other.len() + 1)?;
    let mut want_meta = other;
    want_meta.push(ext.div_ceil(32));
    if mshape != want_meta {
        return Err(bad(format!(
            "`{name}.meta` has shape {mshape:?}, but {want_meta:?} metadata words are needed"
        )));
    }
    Ok((layout, Vec::new(), meta))
}

/// Reads the sparse tensor `name` (stored as `name.values` and friends, see above). `Ok(None)`
/// if the file has no tensor `name.values`. The arrays must pass
/// [`tdsl_sparse::validate::validate`]; every problem is a diagnostic.
pub fn read_sparse_safetensors(
    path: &Path,
    name: &str,
) -> Result<Option<tdsl_sparse::SparseTensor>, Diagnostic> {
    use tdsl_sparse::{Layout, SparseTensor};
    let (mut reader, data_start, metadata) = open(path)?;
    let values_name = format!("{name}.values");
    if metadata.info(&values_name).is_none() {
        return Ok(None);
    }
    let user = metadata.metadata().clone().unwrap_or_default();
    let entry = |key: &str| {
        user.get(&format!("{name}.{key}")).ok_or_else(|| {
            invalid(
                path,
                format!(
                    "it holds `{values_name}` but no `{name}.{key}` entry in its metadata, so \
                     the sparse tensor `{name}` cannot be read"
                ),
            )
        })
    };
    let format = entry("format")?.clone();
    let shape_text = entry("shape")?.clone();
    let bad = |what: String| sparse_error(path, name, what);
    let shape = parse_extents(&shape_text).ok_or_else(|| {
        bad(format!(
            "`{name}.shape` = {shape_text:?} is not a list of extents like \"4096,4096\""
        ))
    })?;
    let mut read = |array: &str| {
        read_raw(
            &mut reader,
            data_start,
            &metadata,
            path,
            &format!("{name}.{array}"),
        )
    };
    let (values_shape, values) = match read("values")? {
        (shape, Raw::Float(s)) => (shape, sparse_values(s)),
        (_, Raw::Int(_)) => {
            return Err(Diagnostic::new(
                Code::DtypeMismatch,
                format!(
                    "tensor `{values_name}` in `{}` holds integers; sparse values are F32, F64, F16 or BF16",
                    path.display()
                ),
            ))
        }
    };
    let mut index = |array: &str, rank: usize| -> Result<(Vec<usize>, Vec<i32>), Diagnostic> {
        let full = format!("{name}.{array}");
        let (shape, raw) = read(array)?;
        let Raw::Int(v) = raw else {
            return Err(bad(format!(
                "`{full}` holds floats; index arrays are I32 (or I64)"
            )));
        };
        if shape.len() != rank {
            return Err(bad(format!(
                "`{full}` has shape {shape:?}, not rank {rank}"
            )));
        }
        let v = v
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                i32::try_from(x)
                    .map_err(|_| bad(format!("{full}[{i}] = {x} does not fit in an int32 index")))
            })
            .collect::<Result<Vec<i32>, _>>()?;
        Ok((shape, v))
    };
    let one_d = |what: &str, shape: &[usize]| -> Result<(), Diagnostic> {
        let msg = || format!("`{name}.{what}` has shape {shape:?}, not 1-d");
        (shape.len() == 1).then_some(()).ok_or_else(|| bad(msg()))
    };
    let (layout, ptr, idx) = match format.as_str() {
        "csr" | "csc" => {
            let (o, i) = if format == "csr" {
                ("row_offsets", "col_indices")
            } else {
                ("col_offsets", "row_indices")
            };
            one_d("values", &values_shape)?;
            let (_, ptr) = index(o, 1)?;
            let (_, idx) = index(i, 1)?;
            let layout = if format == "csr" {
                Layout::Csr
            } else {
                Layout::Csc
            };
            (layout, ptr, idx)
        }
        "coo" => {
            one_d("values", &values_shape)?;
            let (cshape, idx) = index("coords", 2)?;
            if cshape != [values_shape[0], shape.len()] {
                return Err(bad(format!(
                    "`{name}.coords` has shape {cshape:?}, but {} values of a rank-{} tensor need [{}, {}]",
                    values_shape[0],
                    shape.len(),
                    values_shape[0],
                    shape.len()
                )));
            }
            let nnz = i32::try_from(values_shape[0]).map_err(|_| {
                bad(format!(
                    "{} entries do not fit in i32 offsets",
                    values_shape[0]
                ))
            })?;
            (Layout::Coo, vec![0, nnz], idx)
        }
        "bsr" => {
            let [_, br, bc] = values_shape[..] else {
                return Err(bad(format!(
                    "`{values_name}` has shape {values_shape:?}, not (blocks, block rows, block columns)"
                )));
            };
            let (_, ptr) = index("block_offsets", 1)?;
            let (_, idx) = index("block_col_indices", 1)?;
            (Layout::Bsr { br, bc }, ptr, idx)
        }
        f => match f
            .strip_prefix("2:4:axis=")
            .and_then(|a| a.parse::<usize>().ok())
        {
            Some(axis) => two_four_arrays(name, &shape, axis, &values_shape, &mut index, &bad)?,
            None => {
                return Err(bad(format!(
                    "`{name}.format` = {f:?} is not one of coo, csr, csc, bsr, 2:4:axis=N"
                )))
            }
        },
    };
    let s = SparseTensor {
        shape,
        layout,
        ptr,
        idx,
        values,
    };
    tdsl_sparse::validate::validate(s.as_ref()).map_err(|e| bad(e.to_string()))?;
    Ok(Some(s))
}

/// Writes sparse tensors under the naming convention above, atomically. 2:4 and every other
/// layout are supported; capacity padding is dropped.
pub fn write_sparse_safetensors(
    path: &Path,
    tensors: &[(&str, &tdsl_sparse::SparseTensor)],
) -> Result<(), Diagnostic> {
    use std::collections::HashMap;
    use tdsl_sparse::{Layout, Values};
    let mut encoded: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut meta: HashMap<String, String> = HashMap::new();
    let i32s = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    for (i, &(name, s)) in tensors.iter().enumerate() {
        if tensors[..i].iter().any(|&(other, _)| other == name) {
            return Err(write_error(
                path,
                format!("tensor name `{name}` is used twice"),
            ));
        }
        tdsl_sparse::validate::validate(s.as_ref())
            .map_err(|e| sparse_error(path, name, format!("the tensor is invalid: {e}")))?;
        let stored = s.ptr.last().map_or(0, |&p| p as usize);
        let mut push = |array: &str, dtype: Dtype, shape: Vec<usize>, bytes: Vec<u8>| {
            encoded.push((format!("{name}.{array}"), dtype, shape, bytes));
        };
        let (format, values_shape, per) = match s.layout {
            Layout::Coo => {
                let rank = s.shape.len();
                push(
                    "coords",
                    Dtype::I32,
                    vec![stored, rank],
                    i32s(&s.idx[..stored * rank]),
                );
                ("coo".to_string(), vec![stored], 1)
            }
            Layout::Csr | Layout::Csc => {
                let (o, i) = if s.layout == Layout::Csr {
                    ("row_offsets", "col_indices")
                } else {
                    ("col_offsets", "row_indices")
                };
                push(o, Dtype::I32, vec![s.ptr.len()], i32s(&s.ptr));
                push(i, Dtype::I32, vec![stored], i32s(&s.idx[..stored]));
                (s.layout.to_string(), vec![stored], 1)
            }
            Layout::Bsr { br, bc } => {
                push("block_offsets", Dtype::I32, vec![s.ptr.len()], i32s(&s.ptr));
                push(
                    "block_col_indices",
                    Dtype::I32,
                    vec![stored],
                    i32s(&s.idx[..stored]),
                );
                ("bsr".to_string(), vec![stored, br, bc], br * bc)
            }
            Layout::TwoFour { axis } => {
                let mut other = s.shape.clone();
                let ext = other.remove(axis);
                let mut mshape = other.clone();
                mshape.push(ext.div_ceil(32));
                push("meta", Dtype::I32, mshape, i32s(&s.idx));
                other.push(ext / 2);
                let n = s.values.len();
                (format!("2:4:axis={axis}"), other, n)
            }
        };
        let n = match s.layout {
            Layout::TwoFour { .. } => per,
            _ => stored * per,
        };
        let (dtype, bytes) = match s.values.as_ref().prefix(n) {
            tdsl_sparse::ValuesRef::F32(v) => {
                (Dtype::F32, v.iter().flat_map(|x| x.to_le_bytes()).collect())
            }
            tdsl_sparse::ValuesRef::F64(v) => {
                (Dtype::F64, v.iter().flat_map(|x| x.to_le_bytes()).collect())
            }
            tdsl_sparse::ValuesRef::F16(v) => {
                (Dtype::F16, v.iter().flat_map(|x| x.to_le_bytes()).collect())
            }
            tdsl_sparse::ValuesRef::BF16(v) => (
                Dtype::BF16,
                v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
            ),
        };
        let _: Option<&Values> = None;
        push("values", dtype, values_shape, bytes);
        meta.insert(format!("{name}.format"), format);
        meta.insert(
            format!("{name}.shape"),
            s.shape
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    for (i, (n, ..)) in encoded.iter().enumerate() {
        if encoded[..i].iter().any(|(m, ..)| m == n) {
            return Err(write_error(
                path,
                format!("tensor name `{n}` is used twice"),
            ));
        }
    }
    let views = encoded
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            TensorView::new(*dtype, shape.clone(), bytes)
                .map(|view| (name.as_str(), view))
                .map_err(|e| write_error(path, format!("tensor `{name}`: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    ::safetensors::serialize_to_file(views, Some(meta), path).map_err(|e| write_error(path, e))
}

/// A tensor's elements: floats of the four dtypes or integers (I8..I64, U8..U32) widened.
enum Raw {
    Float(Storage),
    Int(Vec<i64>),
}

/// The bytes of tensor `name`, after checking that its byte range is exactly its shape times
/// `element_size` (the crate checks this too; nothing below relies on it for safety).
fn tensor_bytes(
    reader: &mut BufReader<File>,
    data_start: u64,
    info: &safetensors::tensor::TensorInfo,
    element_size: usize,
    path: &Path,
    name: &str,
) -> Result<Vec<u8>, Diagnostic> {
    let (start, end) = info.data_offsets;
    let count = info
        .shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d));
    let byte_len = match (
        end.checked_sub(start),
        count.and_then(|c| c.checked_mul(element_size)),
    ) {
        (Some(have), Some(want)) if have == want => have,
        _ => {
            return Err(invalid(
                path,
                format!("the byte range of tensor `{name}` does not match its shape"),
            ))
        }
    };
    let mut bytes = vec![0u8; byte_len];
    reader
        .seek(SeekFrom::Start(data_start + start as u64))
        .and_then(|_| reader.read_exact(&mut bytes))
        .map_err(|e| data_error(path, &e))?;
    Ok(bytes)
}

/// Reads tensor `name` of any float or integer dtype: its shape and elements.
fn read_raw(
    reader: &mut BufReader<File>,
    data_start: u64,
    metadata: &Metadata,
    path: &Path,
    name: &str,
) -> Result<(Vec<usize>, Raw), Diagnostic> {
    let Some(info) = metadata.info(name) else {
        return Err(Diagnostic::new(
            Code::TensorNotFound,
            format!("`{}` has no tensor named `{name}`", path.display()),
        )
        .help(not_found_help(name, &sorted_names(metadata))));
    };
    let element_size: usize = match info.dtype {
        Dtype::F64 | Dtype::I64 => 8,
        Dtype::F32 | Dtype::I32 | Dtype::U32 => 4,
        Dtype::F16 | Dtype::BF16 | Dtype::I16 | Dtype::U16 => 2,
        Dtype::I8 | Dtype::U8 => 1,
        other => {
            return Err(Diagnostic::new(
                Code::DtypeMismatch,
                format!(
                    "tensor `{name}` in `{}` has dtype {other}, which tdsl cannot read",
                    path.display()
                ),
            ))
        }
    };
    let bytes = tensor_bytes(reader, data_start, info, element_size, path, name)?;
    let raw = match info.dtype {
        Dtype::F32 => Raw::Float(Storage::F32(decode(&bytes, f32::from_le_bytes))),
        Dtype::F64 => Raw::Float(Storage::F64(decode(&bytes, f64::from_le_bytes))),
        Dtype::F16 => Raw::Float(Storage::F16(decode(&bytes, f16::from_le_bytes))),
        Dtype::BF16 => Raw::Float(Storage::BF16(decode(&bytes, bf16::from_le_bytes))),
        Dtype::I64 => Raw::Int(decode(&bytes, i64::from_le_bytes)),
        Dtype::I32 => Raw::Int(decode(&bytes, |b| i64::from(i32::from_le_bytes(b)))),
        Dtype::U32 => Raw::Int(decode(&bytes, |b| i64::from(u32::from_le_bytes(b)))),
        Dtype::I16 => Raw::Int(decode(&bytes, |b| i64::from(i16::from_le_bytes(b)))),
        Dtype::U16 => Raw::Int(decode(&bytes, |b| i64::from(u16::from_le_bytes(b)))),
        Dtype::I8 => Raw::Int(decode(&bytes, |b| i64::from(i8::from_le_bytes(b)))),
        _ => Raw::Int(decode(&bytes, |b| i64::from(u8::from_le_bytes(b)))),
    };
    Ok((info.shape.clone(), raw))
}

fn sparse_error(path: &Path, name: &str, what: impl Display) -> Diagnostic {
    Diagnostic::new(
        Code::SparseData,
        format!("bad sparse tensor `{name}` in `{}`: {what}", path.display()),
    )
}

/// Opens a file and reads and validates its header. Returns the reader, the offset of the data
/// section and the metadata.
fn open(path: &Path) -> Result<(BufReader<File>, u64, Metadata), Diagnostic> {
    let file = File::open(path).map_err(|e| read_error(path, &e))?;
    let file_len = file.metadata().map_err(|e| read_error(path, &e))?.len();
    let mut reader = BufReader::new(file);
    if file_len < LEN_BYTES {
        return Err(invalid(
            path,
            format!("the file is {file_len} bytes long, too short for the 8-byte header length"),
        ));
    }
    let mut len_bytes = [0u8; 8];
    reader
        .read_exact(&mut len_bytes)
        .map_err(|e| data_error(path, &e))?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > MAX_HEADER_LEN {
        return Err(invalid(
            path,
            format!(
                "the header claims {header_len} bytes, more than the limit of {MAX_HEADER_LEN}"
            ),
        ));
    }
    let data_start = LEN_BYTES + header_len;
    if data_start > file_len {
        return Err(invalid(
            path,
            format!(
                "truncated: the header claims {header_len} bytes but only {} follow",
                file_len - LEN_BYTES
            ),
        ));
    }
    // Bounded by MAX_HEADER_LEN and by the file length.
    let mut header = vec![0u8; header_len as usize];
    reader
        .read_exact(&mut header)
        .map_err(|e| data_error(path, &e))?;
    let metadata: Metadata = serde_json::from_slice(&header)
        .map_err(|e| invalid(path, format!("malformed header: {e}")))?;
    let data_len = file_len - data_start;
    if metadata.data_len() as u64 != data_len {
        let how = if (metadata.data_len() as u64) > data_len {
            "the data is truncated"
        } else {
            "there are extra bytes after the data"
        };
        return Err(invalid(
            path,
            format!(
                "{how}: the header describes {} bytes of tensor data but {data_len} follow it",
                metadata.data_len()
            ),
        ));
    }
    Ok((reader, data_start, metadata))
}

fn sorted_names(metadata: &Metadata) -> Vec<String> {
    let mut names: Vec<String> = metadata.tensors().into_keys().collect();
    names.sort();
    names
}

/// Little-endian elements of `N` bytes.
fn decode<const N: usize, T>(bytes: &[u8], from_le: impl Fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|chunk| {
            let mut a = [0u8; N];
            a.copy_from_slice(chunk);
            from_le(a)
        })
        .collect()
}

/// The help line of a "tensor not found" diagnostic: the closest name if one is close, else
/// the first few names.
fn not_found_help(name: &str, names: &[String]) -> String {
    if names.is_empty() {
        return "the file contains no tensors".into();
    }
    let closest = names
        .iter()
        .map(|n| (tdsl_syntax::suggest::edit_distance(name, n), n))
        .min_by_key(|&(d, _)| d);
    if let Some((d, n)) = closest {
        if d <= (name.chars().count() / 3).max(1) {
            return format!("did you mean `{n}`?");
        }
    }
    let listed: Vec<String> = names
        .iter()
        .take(MAX_LISTED)
        .map(|n| format!("`{n}`"))
        .collect();
    let more = names.len().saturating_sub(MAX_LISTED);
    if more > 0 {
        format!("available tensors: {} and {more} more", listed.join(", "))
    } else {
        format!("available tensors: {}", listed.join(", "))
    }
}

fn invalid(path: &Path, what: impl Display) -> Diagnostic {
    super::invalid_file(Code::SafetensorsInvalid, ".safetensors", path, what)
}

/// An error while reading bytes whose presence was already checked.
fn data_error(path: &Path, e: &io::Error) -> Diagnostic {
    super::data_error(path, e, invalid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use std::fs;
    use std::path::PathBuf;

    /// A file laid out by hand: length, JSON header padded to 8 bytes, data.
    fn file_bytes(header: &str, data: &[u8]) -> Vec<u8> {
        let mut header = header.to_string();
        while !header.len().is_multiple_of(8) {
            header.push(' ');
        }
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn write_file(dir: &tempfile::TempDir, bytes: &[u8]) -> PathBuf {
        let path = dir.path().join("t.safetensors");
        fs::write(&path, bytes).expect("write test file");
        path
    }

    fn expect_err<T: std::fmt::Debug>(
        r: Result<T, Diagnostic>,
        code: Code,
        needles: &[&str],
    ) -> Diagnostic {
        let d = r.expect_err("expected a diagnostic");
        assert_eq!(d.code, code, "{d:?}");
        assert!(d.message.contains("t.safetensors"), "names the file: {d:?}");
        assert!(d.labels.is_empty());
        for n in needles {
            assert!(d.message.contains(n), "{n:?} not in {:?}", d.message);
        }
        d
    }

    #[test]
    fn round_trips_every_dtype_and_a_scalar() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.safetensors");
        let vals = [0.0, 1.0, -2.5, 0.125, 3.0, 65504.0];
        let tensors: Vec<(String, Tensor)> = DType::ALL
            .iter()
            .flat_map(|&dtype| {
                [
                    (
                        format!("{dtype}.matrix"),
                        Tensor::from_f64(dtype, vec![2, 3], &vals),
                    ),
                    (
                        format!("{dtype}.scalar"),
                        Tensor::from_f64(dtype, vec![], &[-7.5]),
                    ),
                    (
                        format!("{dtype}.empty"),
                        Tensor::from_f64(dtype, vec![0, 4], &[]),
                    ),
                ]
            })
            .collect();
        let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
        write_safetensors(&path, &refs).expect("write");
        for (name, t) in &tensors {
            assert_eq!(&read_safetensors(&path, name).expect(name), t, "{name}");
        }
        let mut expected: Vec<String> = tensors.iter().map(|(n, _)| n.clone()).collect();
        expected.sort();
        assert_eq!(safetensors_names(&path).expect("names"), expected);
        // Only the target is left in the directory.
        assert_eq!(fs::read_dir(dir.path()).expect("read_dir").count(), 1);
    }

    #[test]
    fn reads_a_hand_built_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let bytes = file_bytes(
            r#"{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
            &data,
        );
        let path = write_file(&dir, &bytes);
        assert_eq!(
            safetensors_names(&path).expect("names"),
            vec!["w".to_string()]
        );
        let t = read_safetensors(&path, "w").expect("read");
        assert_eq!(t, Tensor::from_f64(DType::F32, vec![2], &[1.5, -2.0]));
    }

    #[test]
    fn missing_tensors_suggest_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.safetensors");
        let t = Tensor::from_f64(DType::F32, vec![1], &[1.0]);
        let names: Vec<String> = (0..12).map(|i| format!("layer{i:02}.weight")).collect();
        let refs: Vec<(&str, &Tensor)> = names.iter().map(|n| (n.as_str(), &t)).collect();
        write_safetensors(&path, &refs).expect("write");

        let d = expect_err(
            read_safetensors(&path, "layer03.wieght"),
            Code::TensorNotFound,
            &["layer03.wieght"],
        );
        assert_eq!(d.help.as_deref(), Some("did you mean `layer03.weight`?"));

        let d = expect_err(
            read_safetensors(&path, "bias"),
            Code::TensorNotFound,
            &["bias"],
        );
        let help = d.help.expect("help");
        assert!(
            help.starts_with("available tensors: `layer00.weight`, "),
            "{help}"
        );
        assert!(help.contains("`layer09.weight` and 2 more"), "{help}");
        assert!(!help.contains("layer10"), "{help}");

        write_safetensors(&path, &[]).expect("write empty");
        assert!(safetensors_names(&path).expect("names").is_empty());
        let d = expect_err(read_safetensors(&path, "x"), Code::TensorNotFound, &["`x`"]);
        assert_eq!(d.help.as_deref(), Some("the file contains no tensors"));
    }

    #[test]
    fn rejects_unsupported_dtypes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bytes = file_bytes(
            r#"{"ids":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}"#,
            &[0; 8],
        );
        let path = write_file(&dir, &bytes);
        let d = expect_err(
            read_safetensors(&path, "ids"),
            Code::DtypeMismatch,
            &["I32", "ids"],
        );
        assert!(d.help.expect("help").contains("BF16"));
    }

    #[test]
    fn rejects_corrupted_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good_header = r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        let good = file_bytes(good_header, &[0; 8]);

        // Garbage where the JSON header should be.
        let mut bad = good.clone();
        bad[8..16].copy_from_slice(b"\xff\xfe{]}!@#");
        expect_err(
            read_safetensors(&bad_path(&dir, &bad), "w"),
            Code::SafetensorsInvalid,
            &["malformed header"],
        );
        // Offsets that disagree with shape × dtype.
        let bytes = file_bytes(
            r#"{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
            &[0; 8],
        );
        expect_err(
            safetensors_names(&bad_path(&dir, &bytes)),
            Code::SafetensorsInvalid,
            &["malformed header"],
        );
        // A shape whose element count overflows.
        let bytes = file_bytes(
            r#"{"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}}"#,
            &[0; 8],
        );
        expect_err(
            safetensors_names(&bad_path(&dir, &bytes)),
            Code::SafetensorsInvalid,
            &[],
        );
        // A header length far beyond the file, and beyond any sane limit.
        let mut bad = good.clone();
        bad[..8].copy_from_slice(&1000u64.to_le_bytes());
        expect_err(
            read_safetensors(&bad_path(&dir, &bad), "w"),
            Code::SafetensorsInvalid,
            &["truncated"],
        );
        bad[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        expect_err(
            read_safetensors(&bad_path(&dir, &bad), "w"),
            Code::SafetensorsInvalid,
            &["limit"],
        );
        // Truncated data, extra data, and a file too short for the length field.
        expect_err(
            read_safetensors(&bad_path(&dir, &good[..good.len() - 1]), "w"),
            Code::SafetensorsInvalid,
            &["truncated"],
        );
        let mut long = good.clone();
        long.push(0);
        expect_err(
            read_safetensors(&bad_path(&dir, &long), "w"),
            Code::SafetensorsInvalid,
            &["extra bytes"],
        );
        expect_err(
            read_safetensors(&bad_path(&dir, b"\x01\x00"), "w"),
            Code::SafetensorsInvalid,
            &["too short"],
        );
        // A missing file.
        let missing = dir.path().join("t.safetensors");
        fs::remove_file(&missing).expect("rm");
        expect_err(read_safetensors(&missing, "w"), Code::FileRead, &[]);
    }

    fn bad_path(dir: &tempfile::TempDir, bytes: &[u8]) -> PathBuf {
        write_file(dir, bytes)
    }

    #[test]
    fn write_errors_are_diagnostics() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Tensor::from_f64(DType::F32, vec![1], &[1.0]);
        let path = dir.path().join("t.safetensors");
        expect_err(
            write_safetensors(&path, &[("a", &t), ("a", &t)]),
            Code::FileWrite,
            &["twice"],
        );
        expect_err(
            write_safetensors(&dir.path().join("nope/t.safetensors"), &[("a", &t)]),
            Code::FileWrite,
            &[],
        );
        assert_eq!(fs::read_dir(dir.path()).expect("read_dir").count(), 0);
    }
}
