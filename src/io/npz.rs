//! scipy.sparse `.npz` files (`scipy.sparse.save_npz` / `load_npz`) read into and written
//! from [`SparseTensor`]s, for the csr, csc, coo and bsr formats.
//!
//! An `.npz` file is a zip archive of `.npy` members, stored or deflate-compressed
//! (`save_npz(compressed=True)`, the default). scipy writes the members `format` (a 0-d byte
//! string such as `b'csr'`), `shape` (int64, length 2), `data`, and `indices` + `indptr` (csr,
//! csc, bsr, where bsr's `data` is `nnzb × R × C`) or `row` + `col` (coo); sparse *arrays* add
//! `_is_array`, which we ignore. spec/formats.md has the mapping.
//!
//! Reading:
//! - Every member goes through the `.npy` reader's checks ([`npy::read_any`]); a member is
//!   never read past the size the archive declares for it.
//! - Index arrays may be int32 or int64 (or any integer type); values outside i32 are a
//!   [`Code::SparseData`] diagnostic. `data` is f32, f64, f16, or bf16 stored as `V2`.
//! - scipy does not store whether a csr/csc/bsr matrix has sorted indices, and allows
//!   duplicates (which it sums) in all four formats. So we sort within each row (column, block
//!   row), and coo entries row-major, and sum duplicates ([`canonicalize`]); then the tensor
//!   must pass [`validate`]. Any problem with the arrays' contents is `tdsl::data::sparse`;
//!   problems with the archive or its members are `tdsl::io::npz_invalid`.
//!
//! Writing: version 1.0 `.npy` members, deflate-compressed, atomically (temporary file, then
//! rename), in the member order and with the dtypes scipy uses (indices and offsets int32,
//! shape int64). 2:4 tensors have no scipy format and are an error (convert them first), as
//! are coo tensors of rank other than 2 (scipy's `save_npz` writes only `row` and `col`).

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use tdsl_sparse::storage::ValuesRef;
use tdsl_sparse::validate::{canonicalize, validate};
use tdsl_sparse::{Layout, SparseTensor, Values};
use zip::result::ZipError;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

use super::npy::{self, AnyArray, AnyData};
use crate::diag::{Code, Diagnostic};
use crate::tensor::Storage;

/// Reads a sparse matrix saved by `scipy.sparse.save_npz` (csr, csc, coo or bsr).
pub fn read_npz(path: &Path) -> Result<SparseTensor, Diagnostic> {
    let file = File::open(path).map_err(|e| {
        Diagnostic::new(
            Code::FileRead,
            format!("cannot read `{}`: {e}", path.display()),
        )
    })?;
    let mut zip = ZipArchive::new(BufReader::new(file)).map_err(|e| {
        invalid(
            path,
            format!("it is not a zip archive (an .npz file is one): {e}"),
        )
    })?;
    let format = match member(&mut zip, path, "format")? {
        AnyArray {
            data: AnyData::Text(t),
            shape,
        } if shape.is_empty() && t.len() == 1 => t[0].clone(),
        other => {
            return Err(invalid(
                path,
                format!(
                    "member `format.npy` is {}, not a 0-d string such as b'csr'",
                    describe(&other)
                ),
            ))
        }
    };
    let shape = ints(path, "shape", member(&mut zip, path, "shape")?, 1)?;
    let shape: Vec<usize> = shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<_, _>>()
        .map_err(|_| sparse(path, format!("the shape {shape:?} has a negative extent")))?;
    if shape.len() != 2 {
        return Err(sparse(
            path,
            format!("the shape {shape:?} is not 2-d (tdsl reads scipy matrices of rank 2)"),
        ));
    }
    let data = member(&mut zip, path, "data")?;
    let data_shape = data.shape.clone();
    let values = match data.data {
        AnyData::Float(s) => match s {
            Storage::F32(v) => Values::F32(v),
            Storage::F64(v) => Values::F64(v),
            Storage::F16(v) => Values::F16(v),
            Storage::BF16(v) => Values::BF16(v),
        },
        other => {
            return Err(Diagnostic::new(
                Code::DtypeMismatch,
                format!(
                    "member `data.npy` of `{}` holds {}; tdsl reads f32, f64, f16 and bf16 data",
                    path.display(),
                    describe(&AnyArray {
                        shape: data_shape.clone(),
                        data: other
                    })
                ),
            ))
        }
    };
    let (layout, ptr, idx) = match format.as_str() {
        "csr" | "csc" | "bsr" => {
            let indices = i32s(path, "indices", member(&mut zip, path, "indices")?)?;
            let indptr = i32s(path, "indptr", member(&mut zip, path, "indptr")?)?;
            let layout = match format.as_str() {
                "csr" => Layout::Csr,
                "csc" => Layout::Csc,
                _ => {
                    let [_, br, bc] = data_shape[..] else {
                        return Err(sparse(
                            path,
                            format!(
                                "bsr data has shape {data_shape:?}, not (blocks, rows, columns)"
                            ),
                        ));
                    };
                    Layout::Bsr { br, bc }
                }
            };
            let stored = if matches!(layout, Layout::Bsr { .. }) {
                data_shape[0]
            } else {
                one_d(path, "data", &data_shape)?
            };
            if stored != indices.len() {
                return Err(sparse(
                    path,
                    format!(
                        "data has {stored} entries but indices has {}",
                        indices.len()
                    ),
                ));
            }
            (layout, indptr, indices)
        }
        "coo" => {
            let row = i32s(path, "row", member(&mut zip, path, "row")?)?;
            let col = i32s(path, "col", member(&mut zip, path, "col")?)?;
            let n = one_d(path, "data", &data_shape)?;
            if row.len() != n || col.len() != n {
                return Err(sparse(
                    path,
                    format!(
                        "coo row, col and data have {}, {} and {n} entries",
                        row.len(),
                        col.len()
                    ),
                ));
            }
            let nnz = i32::try_from(n)
                .map_err(|_| sparse(path, format!("{n} entries do not fit in i32 offsets")))?;
            let idx = row.iter().zip(&col).flat_map(|(&r, &c)| [r, c]).collect();
            (Layout::Coo, vec![0, nnz], idx)
        }
        other => {
            return Err(sparse(
                path,
                format!("scipy format `{other}` is not supported (csr, csc, coo and bsr are)"),
            ))
        }
    };
    let s = SparseTensor {
        shape,
        layout,
        ptr,
        idx,
        values,
    };
    canonicalize(s).map_err(|e| sparse(path, e))
}

/// Writes a csr, csc, coo (rank 2) or bsr tensor as `scipy.sparse.save_npz` does, atomically.
pub fn write_npz(path: &Path, s: &SparseTensor) -> Result<(), Diagnostic> {
    let write_error = |what: String| {
        Diagnostic::new(
            Code::FileWrite,
            format!("cannot write `{}`: {what}", path.display()),
        )
    };
    validate(s.as_ref()).map_err(|e| sparse(path, format!("the tensor is invalid: {e}")))?;
    let (rows, cols) = match s.shape[..] {
        [r, c] => (r, c),
        _ => {
            return Err(write_error(format!(
                "scipy stores only matrices, and this {} tensor has shape {:?}",
                s.layout, s.shape
            )))
        }
    };
    let stored = s.ptr.last().map_or(0, |&p| p as usize);
    let mut members: Vec<(&str, Vec<u8>)> = Vec::new();
    let (format, per_entry) = match s.layout {
        Layout::Csr => ("csr", 1),
        Layout::Csc => ("csc", 1),
        Layout::Bsr { br, bc } => ("bsr", br * bc),
        Layout::Coo => ("coo", 1),
        Layout::TwoFour { .. } => {
            return Err(write_error(
                "2:4 tensors have no scipy format; convert to csr first".into(),
            ))
        }
    };
    let data_shape = match s.layout {
        Layout::Bsr { br, bc } => vec![stored, br, bc],
        _ => vec![stored],
    };
    match s.layout {
        Layout::Coo => {
            let coords = &s.idx[..2 * stored];
            let row: Vec<i32> = coords.iter().step_by(2).copied().collect();
            let col: Vec<i32> = coords.iter().skip(1).step_by(2).copied().collect();
            members.push(("row", npy_bytes("<i4", &[stored], &le_i32(&row))));
            members.push(("col", npy_bytes("<i4", &[stored], &le_i32(&col))));
        }
        _ => {
            members.push((
                "indices",
                npy_bytes("<i4", &[stored], &le_i32(&s.idx[..stored])),
            ));
            members.push(("indptr", npy_bytes("<i4", &[s.ptr.len()], &le_i32(&s.ptr))));
        }
    }
    members.push((
        "format",
        npy_bytes(&format!("|S{}", format.len()), &[], format.as_bytes()),
    ));
    let shape: Vec<u8> = [rows as i64, cols as i64]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    members.push(("shape", npy_bytes("<i8", &[2], &shape)));
    let values = s.values.as_ref().prefix(stored * per_entry);
    let (descr, bytes) = match values {
        ValuesRef::F32(v) => ("<f4", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        ValuesRef::F64(v) => ("<f8", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        ValuesRef::F16(v) => ("<f2", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        ValuesRef::BF16(v) => (
            "<V2",
            v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
        ),
    };
    members.push(("data", npy_bytes(descr, &data_shape, &bytes)));
    npy::write_atomically(path, |w| {
        let mut zip = ZipWriter::new(w);
        let options = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
        for (name, bytes) in &members {
            zip.start_file(format!("{name}.npy"), options)
                .map_err(std::io::Error::other)?;
            zip.write_all(bytes)?;
        }
        zip.finish().map_err(std::io::Error::other)?;
        Ok(())
    })
}

/// A version 1.0 `.npy` file as NumPy writes it: the header padded with spaces to a multiple
/// of 64 bytes and ended by a newline.
pub(crate) fn npy_bytes(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let tuple = match shape {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple}, }}");
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn le_i32(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Reads member `key.npy`, never past the size the archive declares for it.
fn member<R: Read + std::io::Seek>(
    zip: &mut ZipArchive<R>,
    path: &Path,
    key: &str,
) -> Result<AnyArray, Diagnostic> {
    let name = format!("{key}.npy");
    let mut file = match zip.by_name(&name) {
        Ok(f) => f,
        Err(ZipError::FileNotFound) => {
            return Err(invalid(
                path,
                format!("it has no member `{name}` (scipy.sparse.save_npz writes one)"),
            ))
        }
        Err(e) => return Err(invalid(path, format!("cannot open member `{name}`: {e}"))),
    };
    let declared = file.size();
    let mut bytes = Vec::new();
    (&mut file)
        .take(declared)
        .read_to_end(&mut bytes)
        .map_err(|e| invalid(path, format!("cannot read member `{name}`: {e}")))?;
    if bytes.len() as u64 != declared {
        return Err(invalid(
            path,
            format!(
                "member `{name}` is truncated: {} of {declared} bytes",
                bytes.len()
            ),
        ));
    }
    let label = PathBuf::from(format!("{}:{name}", path.display()));
    npy::read_any(&bytes[..], declared, &label).map_err(|mut d| {
        if d.code == Code::NpyInvalid {
            d.code = Code::NpzInvalid;
        }
        d
    })
}

/// An integer member of rank `rank`, as i64.
fn ints(path: &Path, key: &str, a: AnyArray, rank: usize) -> Result<Vec<i64>, Diagnostic> {
    match a {
        AnyArray {
            data: AnyData::Int(v),
            shape,
        } if shape.len() == rank => Ok(v),
        other => Err(invalid(
            path,
            format!(
                "member `{key}.npy` is {}, not a {rank}-d integer array",
                describe(&other)
            ),
        )),
    }
}

/// A 1-d integer member converted to i32, with an overflow check.
fn i32s(path: &Path, key: &str, a: AnyArray) -> Result<Vec<i32>, Diagnostic> {
    let v = ints(path, key, a, 1)?;
    v.iter()
        .enumerate()
        .map(|(i, &x)| {
            i32::try_from(x).map_err(|_| {
                sparse(
                    path,
                    format!("{key}[{i}] = {x} does not fit in an int32 index"),
                )
            })
        })
        .collect()
}

fn one_d(path: &Path, key: &str, shape: &[usize]) -> Result<usize, Diagnostic> {
    match shape {
        [n] => Ok(*n),
        _ => Err(sparse(path, format!("{key} has shape {shape:?}, not 1-d"))),
    }
}

/// "a 2-d int array", "a 0-d string array", for messages.
fn describe(a: &AnyArray) -> String {
    let kind = match &a.data {
        AnyData::Float(_) => "float",
        AnyData::Int(_) => "integer",
        AnyData::Text(_) => "string",
    };
    format!("a {}-d {kind} array", a.shape.len())
}

fn invalid(path: &Path, what: impl std::fmt::Display) -> Diagnostic {
    Diagnostic::new(
        Code::NpzInvalid,
        format!("invalid .npz file `{}`: {what}", path.display()),
    )
}

fn sparse(path: &Path, what: impl std::fmt::Display) -> Diagnostic {
    Diagnostic::new(
        Code::SparseData,
        format!("bad sparse data in `{}`: {what}", path.display()),
    )
}
