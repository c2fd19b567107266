//! `npy`, `npz`, `safetensors`: file bytes through the readers of `tdsl::io`.
//!
//! The readers take paths, so each input is written to one reused file in a temporary folder
//! of the run's own. What a reader returns is checked for its promises (sparse tensors pass
//! `validate`), and on every 50th input written back with the crate's writer and read again:
//! a difference is an internal error.
//!
//! Structure-aware help for the mutator: `.npy` header lengths are recomputed (so edits inside
//! the header reach the dict parser), `.npz` members are edited, renamed, dropped or swapped
//! and the archive rebuilt (so CRCs match), and `.safetensors` headers are edited as JSON text
//! with the length prefix recomputed.

use std::io::{Cursor, Read, Write};

use tdsl::io::npz::{read_npz, write_npz};
use tdsl::io::safetensors::{
    read_safetensors, read_sparse_safetensors, safetensors_names, write_safetensors,
    write_sparse_safetensors,
};
use tdsl::io::{read_npy, write_npy};
use tdsl::Tensor;
use tdsl_sparse::storage::element_count;
use tdsl_sparse::SparseTensor;

use super::Ctx;
use crate::mutate::Mutator;
use crate::rng::Rng;

/// Largest tensor (elements) expanded to dense values or written back.
const SMALL: usize = 1 << 16;

/// `.npy` and `.npz` tokens: magic, header keys and values, scipy member names, zip magic.
pub const NPY_DICT: &[&[u8]] = &[
    b"\x93NUMPY",
    b"\x93NUMPY\x01\x00",
    b"\x93NUMPY\x02\x00",
    b"\x93NUMPY\x03\x00",
    b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
    b"'descr'",
    b"'fortran_order'",
    b"'shape'",
    b"'<f4'",
    b"'<f8'",
    b"'<f2'",
    b"'>f4'",
    b"'>f8'",
    b"'|V2'",
    b"'<V2'",
    b"'<i4'",
    b"'<i8'",
    b"'<u8'",
    b"'|i1'",
    b"'|S3'",
    b"'<U3'",
    b"'|b1'",
    b"'<c8'",
    b"'|O'",
    b"[('a', '<f4')]",
    b"True",
    b"False",
    b"()",
    b"(0,)",
    b"(1,)",
    b"(2, 3)",
    b"(3, 2, 2)",
    b"(-1,)",
    b"(18446744073709551615,)",
    b"(4294967296, 4294967296)",
    b"(2,3,)",
    b"b'csr'",
    b"csr",
    b"csc",
    b"coo",
    b"bsr",
    b"dia",
    b"format.npy",
    b"shape.npy",
    b"data.npy",
    b"indices.npy",
    b"indptr.npy",
    b"row.npy",
    b"col.npy",
    b"_is_array.npy",
    b"PK\x03\x04",
    b"PK\x01\x02",
    b"PK\x05\x06",
    b"PK\x06\x06",
    b"\n",
    b" ",
    b"{",
    b"}",
    b",",
    b":",
    b"'",
];

/// `.safetensors` tokens: JSON, header keys, dtypes, the sparse naming convention.
pub const SAFETENSORS_DICT: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"\"",
    b"\"dtype\"",
    b"\"shape\"",
    b"\"data_offsets\"",
    b"\"__metadata__\"",
    b"\"F32\"",
    b"\"F64\"",
    b"\"F16\"",
    b"\"BF16\"",
    b"\"I32\"",
    b"\"I64\"",
    b"\"U8\"",
    b"\"BOOL\"",
    b"\"F8_E4M3\"",
    b"[0,0]",
    b"[0,16]",
    b"[16,0]",
    b"[]",
    b"[0]",
    b"[2,2]",
    b"[18446744073709551615]",
    b"[4294967296,4294967296]",
    b"\"w\"",
    b"\"w.values\"",
    b"\"w.row_offsets\"",
    b"\"w.col_indices\"",
    b"\"w.col_offsets\"",
    b"\"w.row_indices\"",
    b"\"w.coords\"",
    b"\"w.block_offsets\"",
    b"\"w.block_col_indices\"",
    b"\"w.meta\"",
    b"\"w.format\"",
    b"\"w.shape\"",
    b"\"csr\"",
    b"\"csc\"",
    b"\"coo\"",
    b"\"bsr\"",
    b"\"2:4:axis=0\"",
    b"\"2:4:axis=1\"",
    b"\"2:4:axis=18446744073709551615\"",
    b"\"4,4\"",
    b"\"2,8\"",
    b"\"\"",
    b"\",\"",
    b"\"0,4\"",
    b"\"18446744073709551615,2\"",
    b"-1",
    b"0",
    b"1",
    b"1e400",
    b"null",
    b"true",
    b" ",
];

/// Records a reader's diagnostic: its code and the gist of its message (the path and the
/// numbers taken out), since most of a reader's errors share one code.
fn error(ctx: &mut Ctx, d: &tdsl::Diagnostic, path: &std::path::Path) {
    let p = path.display().to_string();
    let gist: String = d
        .message
        .replace(&p, "")
        .chars()
        .filter(|c| !c.is_ascii_digit())
        .take(48)
        .collect();
    ctx.mark(gist.as_bytes());
    ctx.diag(d, &p, "");
}

fn write_input(ctx: &mut Ctx, name: &str, input: &[u8]) -> Option<std::path::PathBuf> {
    let path = ctx.tmp_path(name);
    match std::fs::write(&path, input) {
        Ok(()) => Some(path),
        Err(e) => {
            ctx.internal(format!("fuzzer: cannot write {}: {e}", path.display()));
            None
        }
    }
}

/// Whether two tensors hold the same shape and values (NaN equal to NaN of the same bits).
fn same(a: &Tensor, b: &Tensor) -> bool {
    a.shape() == b.shape() && format!("{:?}", a.storage()) == format!("{:?}", b.storage())
}

fn same_sparse(a: &SparseTensor, b: &SparseTensor) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

fn dense_read(t: &Tensor, ctx: &mut Ctx) {
    ctx.mark(t.dtype().name().as_bytes());
    ctx.mark(&[t.shape().len().min(255) as u8]);
    if t.len() <= SMALL {
        std::hint::black_box(t.to_f64());
    }
}

/// Checks what a sparse reader returned: `validate` passes, and small tensors expand.
fn sparse_read(s: &SparseTensor, who: &str, ctx: &mut Ctx) -> bool {
    ctx.mark(format!("{:?}", s.layout).as_bytes());
    if let Err(e) = tdsl_sparse::validate::validate(s.as_ref()) {
        ctx.internal(format!(
            "{who} returned a tensor that fails validate: {}",
            e.message
        ));
        return false;
    }
    let small = element_count(&s.shape).is_ok_and(|n| n <= SMALL);
    if small {
        match tdsl_sparse::prune::to_dense_f64(s.as_ref()) {
            Ok(v) => {
                std::hint::black_box(v);
            }
            Err(e) => ctx.internal(format!(
                "{who} returned a valid tensor that does not expand: {}",
                e.message
            )),
        }
    }
    small
}

// ---- npy ---------------------------------------------------------------------------------------

pub fn npy(input: &[u8], ctx: &mut Ctx) {
    let Some(path) = write_input(ctx, "in.npy", input) else {
        return;
    };
    match read_npy(&path) {
        Ok(t) => {
            ctx.stage("read");
            dense_read(&t, ctx);
            if ctx.heavy && t.len() <= SMALL {
                let back = ctx.tmp_path("back.npy");
                match write_npy(&back, &t).and_then(|()| read_npy(&back)) {
                    Ok(u) if same(&t, &u) => ctx.stage("round-trip"),
                    Ok(u) => ctx.internal(format!(
                        "read_npy → write_npy → read_npy changed the tensor: {:?} {:?} → {:?} {:?}",
                        t.dtype(),
                        t.shape(),
                        u.dtype(),
                        u.shape()
                    )),
                    Err(d) => ctx.internal(format!(
                        "a tensor read from .npy cannot be written back: {}",
                        d.message
                    )),
                }
            }
        }
        Err(d) => {
            ctx.stage("error");
            error(ctx, &d, &path);
        }
    }
}

/// Makes the `.npy` header length field match the header as it now is (up to its first
/// newline), so edits inside the header reach the header parser.
pub fn npy_fixup(_rng: &mut Rng, input: &mut [u8]) {
    if input.len() < 10 || !input.starts_with(b"\x93NUMPY") {
        return;
    }
    let start = if input[6] == 1 { 10 } else { 12 };
    if input.len() < start {
        return;
    }
    let Some(nl) = input[start..].iter().position(|&b| b == b'\n') else {
        return;
    };
    let len = nl + 1;
    if start == 10 {
        if let Ok(l) = u16::try_from(len) {
            input[8..10].copy_from_slice(&l.to_le_bytes());
        }
    } else if let Ok(l) = u32::try_from(len) {
        input[8..12].copy_from_slice(&l.to_le_bytes());
    }
}

// ---- npz ---------------------------------------------------------------------------------------

pub fn npz(input: &[u8], ctx: &mut Ctx) {
    let Some(path) = write_input(ctx, "in.npz", input) else {
        return;
    };
    match read_npz(&path) {
        Ok(s) => {
            ctx.stage("read");
            let small = sparse_read(&s, "read_npz", ctx);
            if ctx.heavy && small {
                let back = ctx.tmp_path("back.npz");
                match write_npz(&back, &s).and_then(|()| read_npz(&back)) {
                    Ok(u) if same_sparse(&s, &u) => ctx.stage("round-trip"),
                    Ok(u) => ctx.internal(format!(
                        "read_npz → write_npz → read_npz changed the tensor: {:?} {:?} → {:?} {:?}",
                        s.layout, s.shape, u.layout, u.shape
                    )),
                    Err(d) => ctx.internal(format!(
                        "a tensor read from .npz cannot be written back: {}",
                        d.message
                    )),
                }
            }
        }
        Err(d) => {
            ctx.stage("error");
            error(ctx, &d, &path);
        }
    }
}

/// An archive's members (name, bytes), or `None` if the zip crate cannot list them.
pub(crate) fn zip_members(bytes: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    crate::engine::quietly(|| {
        let mut z = zip::ZipArchive::new(Cursor::new(bytes)).ok()?;
        let mut out = Vec::new();
        for i in 0..z.len().min(16) {
            let f = z.by_index(i).ok()?;
            let name = f.name().ok()?.to_string();
            let mut buf = Vec::new();
            f.take(1 << 20).read_to_end(&mut buf).ok()?;
            out.push((name, buf));
        }
        Some(out)
    })
    .flatten()
}

/// An archive of `members`, stored or deflated.
pub(crate) fn zip_archive(members: &[(String, Vec<u8>)], deflate: bool) -> Option<Vec<u8>> {
    let method = if deflate {
        zip::CompressionMethod::Deflated
    } else {
        zip::CompressionMethod::Stored
    };
    let options = zip::write::SimpleFileOptions::default().compression_method(method);
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (name, bytes) in members {
        w.start_file(name.as_str(), options).ok()?;
        w.write_all(bytes).ok()?;
    }
    w.finish().ok().map(Cursor::into_inner)
}

const MEMBER_NAMES: &[&str] = &[
    "format.npy",
    "shape.npy",
    "data.npy",
    "indices.npy",
    "indptr.npy",
    "row.npy",
    "col.npy",
    "_is_array.npy",
    "format",
    "data.npy.npy",
    "",
];

/// Edits the members of an `.npz` and rebuilds the archive (valid CRCs, so the edits reach
/// the `.npy` reader and the scipy checks).
pub fn npz_mutate(m: &Mutator, rng: &mut Rng, input: &mut Vec<u8>, pool: &[Vec<u8>]) -> bool {
    let Some(mut members) = zip_members(input) else {
        return false;
    };
    let n = members.len();
    let member_mutator = Mutator {
        dict: m.dict,
        text: false,
        max_len: m.max_len.min(1 << 16),
    };
    match rng.below(8) {
        0..=3 if n > 0 => {
            let k = rng.below(n);
            member_mutator.mutate(rng, &mut members[k].1, &[]);
            if rng.one_in(2) {
                npy_fixup(rng, &mut members[k].1);
            }
        }
        4 if n > 0 => {
            let k = rng.below(n);
            members[k].0 = rng.pick(MEMBER_NAMES).to_string();
        }
        5 if n > 0 => {
            members.remove(rng.below(n));
        }
        6 if n > 0 => {
            let (a, b) = (rng.below(n), rng.below(n));
            let tmp = members[a].1.clone();
            members[a].1 = members[b].1.clone();
            members[b].1 = tmp;
        }
        _ => {
            // A member of another archive of the pool, replacing the one of the same name or added.
            let from: &Vec<u8> = rng.pick(pool);
            let Some(other) = zip_members(from) else {
                return false;
            };
            if other.is_empty() {
                return false;
            }
            let (name, bytes) = rng.pick(&other).clone();
            match members.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = bytes,
                None => members.push((name, bytes)),
            }
        }
    }
    match zip_archive(&members, rng.one_in(2)) {
        Some(bytes) => {
            *input = bytes;
            true
        }
        None => false,
    }
}

// ---- safetensors -------------------------------------------------------------------------------

pub fn safetensors(input: &[u8], ctx: &mut Ctx) {
    let Some(path) = write_input(ctx, "in.safetensors", input) else {
        return;
    };
    let names = match safetensors_names(&path) {
        Ok(n) => n,
        Err(d) => {
            ctx.stage("error");
            error(ctx, &d, &path);
            return;
        }
    };
    ctx.stage("names");
    if let Err(d) = read_safetensors(&path, "no_such_tensor") {
        ctx.mark(d.code.as_str().as_bytes());
        std::hint::black_box(d.help);
    }
    for name in names.iter().take(8) {
        match read_safetensors(&path, name) {
            Ok(t) => {
                ctx.stage("dense");
                dense_read(&t, ctx);
                if ctx.heavy && t.len() <= SMALL {
                    let back = ctx.tmp_path("back.safetensors");
                    match write_safetensors(&back, &[(name, &t)])
                        .and_then(|()| read_safetensors(&back, name))
                    {
                        Ok(u) if same(&t, &u) => ctx.stage("round-trip"),
                        Ok(_) => ctx.internal(format!(
                            "tensor `{name}`: read_safetensors → write_safetensors → read_safetensors changed it"
                        )),
                        Err(d) => ctx.internal(format!(
                            "tensor `{name}` read from .safetensors cannot be written back: {}",
                            d.message
                        )),
                    }
                }
            }
            Err(d) => {
                ctx.stage("dense-error");
                error(ctx, &d, &path);
            }
        }
        let Some(base) = name.strip_suffix(".values") else {
            continue;
        };
        match read_sparse_safetensors(&path, base) {
            Ok(Some(s)) => {
                ctx.stage("sparse");
                let small = sparse_read(&s, "read_sparse_safetensors", ctx);
                if ctx.heavy && small {
                    let back = ctx.tmp_path("back-sparse.safetensors");
                    match write_sparse_safetensors(&back, &[(base, &s)])
                        .and_then(|()| read_sparse_safetensors(&back, base))
                    {
                        Ok(Some(u)) if same_sparse(&s, &u) => ctx.stage("sparse-round-trip"),
                        Ok(_) => ctx.internal(format!(
                            "sparse tensor `{base}`: read → write_sparse_safetensors → read changed it"
                        )),
                        Err(d) => ctx.internal(format!(
                            "sparse tensor `{base}` read from .safetensors cannot be written back: {}",
                            d.message
                        )),
                    }
                }
            }
            Ok(None) => ctx.internal(format!(
                "read_sparse_safetensors found no `{base}` though `{name}` is listed"
            )),
            Err(d) => {
                ctx.stage("sparse-error");
                error(ctx, &d, &path);
            }
        }
    }
}

/// The end of the JSON object that starts at `from`, if its braces balance.
fn json_end(bytes: &[u8], from: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_str = false;
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(from) {
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' => depth += 1,
            b'}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Makes the 8-byte header length match the JSON object after it.
pub fn safetensors_fixup(_rng: &mut Rng, input: &mut [u8]) {
    if input.len() < 9 || input[8] != b'{' {
        return;
    }
    if let Some(end) = json_end(input, 8) {
        let len = (end - 8) as u64;
        input[..8].copy_from_slice(&len.to_le_bytes());
    }
}

/// Edits the header as JSON text (two times in three) or the data, and rebuilds the file with
/// the right header length.
pub fn safetensors_mutate(
    m: &Mutator,
    rng: &mut Rng,
    input: &mut Vec<u8>,
    pool: &[Vec<u8>],
) -> bool {
    if input.len() < 8 {
        return false;
    }
    let n = u64::from_le_bytes(input[..8].try_into().unwrap_or([0; 8]));
    let Some(end) = usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_add(8))
        .filter(|&e| e <= input.len())
    else {
        return false;
    };
    let mut header = input[8..end].to_vec();
    let mut data = input[end..].to_vec();
    if rng.below(3) < 2 {
        let text = Mutator {
            dict: m.dict,
            text: true,
            max_len: m.max_len,
        };
        // Splice from other headers, not from whole files.
        let headers: Vec<Vec<u8>> = (0..4)
            .filter_map(|_| {
                let o = rng.pick(pool);
                let n = usize::try_from(u64::from_le_bytes(o.get(..8)?.try_into().ok()?)).ok()?;
                o.get(8..8usize.checked_add(n)?).map(<[u8]>::to_vec)
            })
            .collect();
        text.mutate(rng, &mut header, &headers);
    } else {
        m.mutate(rng, &mut data, &[]);
    }
    let mut out = Vec::with_capacity(8 + header.len() + data.len());
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&data);
    *input = out;
    true
}
