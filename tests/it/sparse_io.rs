//! Sparse tensors in files: scipy `.npz` (csr, csc, coo, bsr) and the safetensors naming
//! convention (every layout, 2:4 included).
//!
//! * Round trips write -> read -> equal for every format and dtype, padded tensors included.
//! * Malformed files (truncated, not a zip, missing members, unsorted offsets, indices out of
//!   range, inconsistent lengths, int64 indices beyond int32, bad 2:4 metadata, bad metadata
//!   entries) give a diagnostic with the expected code and never panic.
//! * scipy's own files: with `TDSL_NPZ_FIXTURES=DIR` (written by
//!   `tests/python/npz_roundtrip.py --out DIR`), every `NAME.npz` there is read and compared with
//!   `NAME.dense.npy`, and written back to `DIR/tdsl/` for `npz_roundtrip.py --check DIR`, which
//!   loads those with scipy. Without the variable that test checks nothing.

use std::io::Write;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use tdsl::io::npz::{read_npz, write_npz};
use tdsl::io::safetensors::{read_sparse_safetensors, write_sparse_safetensors};
use tdsl::{Code, Diagnostic};
use tdsl_sparse::prune::{capacity, sparsify, to_dense_f64, write_padded, Select};
use tdsl_sparse::{Layout, SparseTensor, Values, ValuesMut, ValuesRef};

const DTYPES: [&str; 4] = ["f32", "f64", "f16", "bf16"];

/// Values of a dtype (the test values are exact in all four).
fn values(dtype: &str, v: &[f64]) -> Values {
    match dtype {
        "f32" => Values::F32(v.iter().map(|&x| x as f32).collect()),
        "f64" => Values::F64(v.to_vec()),
        "f16" => Values::F16(v.iter().map(|&x| f16::from_f64(x)).collect()),
        _ => Values::BF16(v.iter().map(|&x| bf16::from_f64(x)).collect()),
    }
}

/// A deterministic dense tensor with zeros, ties and empty rows.
fn dense(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 7 {
                0..=3 => 0.0,
                k => (k as f64 - 4.5) * ((x >> 8) % 4 + 1) as f64 / 2.0,
            }
        })
        .collect()
}

fn sparse(dtype: &str, shape: &[usize], layout: Layout, select: Select, seed: u64) -> SparseTensor {
    let n: usize = shape.iter().product();
    let d = values(dtype, &dense(n, seed));
    sparsify(d.as_ref(), shape, layout, select).expect("sparsify")
}

fn expect_code<T: std::fmt::Debug>(r: Result<T, Diagnostic>, code: Code, needle: &str) {
    let d = r.expect_err("expected a diagnostic");
    assert_eq!(d.code, code, "{d:?}");
    assert!(
        d.message.contains(needle),
        "{needle:?} not in {:?}",
        d.message
    );
}

// ---- npz -------------------------------------------------------------------------------------

#[test]
fn npz_round_trips_every_format_and_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let layouts = [
        (vec![5, 7], Layout::Csr),
        (vec![5, 7], Layout::Csc),
        (vec![5, 7], Layout::Coo),
        (vec![4, 6], Layout::Bsr { br: 2, bc: 3 }),
        (vec![4, 6], Layout::Bsr { br: 1, bc: 1 }),
        (vec![8, 8], Layout::Bsr { br: 4, bc: 4 }),
        (vec![1, 9], Layout::Csr),
        (vec![9, 1], Layout::Csc),
        (vec![0, 3], Layout::Csr),
    ];
    for (k, (shape, layout)) in layouts.iter().enumerate() {
        for dtype in DTYPES {
            for select in [Select::All, Select::Density(0.5), Select::Density(0.0)] {
                let s = sparse(dtype, shape, *layout, select, k as u64);
                let path = dir.path().join(format!("m{k}-{dtype}.npz"));
                write_npz(&path, &s).unwrap_or_else(|d| panic!("{layout} {dtype}: {d}"));
                let back = read_npz(&path).unwrap_or_else(|d| panic!("{layout} {dtype}: {d}"));
                // Density may store explicit zeros, which scipy keeps and so do we.
                assert_eq!(back, s, "{layout} {dtype} {select:?}");
            }
        }
    }
    // No temporary files left behind.
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(name.ends_with(".npz") && !name.starts_with('.'), "{name}");
    }
}

#[test]
fn npz_writes_capacity_padded_tensors_without_the_padding() {
    let dir = tempfile::tempdir().unwrap();
    let shape = [6, 5];
    let s = sparse("f32", &shape, Layout::Csr, Select::Threshold(1.0), 3);
    let (p, i, v) = capacity(&shape, Layout::Csr, Select::Threshold(1.0)).unwrap();
    let (mut ptr, mut idx, mut vals) = (vec![0; p], vec![0; i], vec![0f32; v]);
    write_padded(&s, &mut ptr, &mut idx, ValuesMut::F32(&mut vals)).unwrap();
    let padded = SparseTensor {
        shape: shape.to_vec(),
        layout: Layout::Csr,
        ptr,
        idx,
        values: Values::F32(vals),
    };
    assert!(padded.idx.len() > s.idx.len());
    let path = dir.path().join("p.npz");
    write_npz(&path, &padded).unwrap();
    assert_eq!(read_npz(&path).unwrap(), s);
}

#[test]
fn npz_refuses_what_scipy_cannot_hold() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npz");
    let tf = sparse("f32", &[2, 8], Layout::TwoFour { axis: 1 }, Select::All, 1);
    expect_code(write_npz(&path, &tf), Code::FileWrite, "2:4");
    let coo3 = sparse("f32", &[2, 3, 4], Layout::Coo, Select::All, 1);
    expect_code(write_npz(&path, &coo3), Code::FileWrite, "only matrices");
    let mut bad = sparse("f32", &[3, 3], Layout::Csr, Select::All, 1);
    bad.ptr[0] = 1;
    expect_code(write_npz(&path, &bad), Code::SparseData, "indptr[0] = 1");
    assert!(!path.exists());
}

/// A `.npy` member as NumPy writes it.
fn npy(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let tuple = match shape {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
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

fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

/// An `.npz` with the given members (stored, or deflated when `compressed`).
fn npz(dir: &Path, name: &str, members: &[(&str, Vec<u8>)], compressed: bool) -> PathBuf {
    let path = dir.join(name);
    let file = std::fs::File::create(&path).unwrap();
    let mut zip = zip::ZipWriter::new(file);
    let method = if compressed {
        zip::CompressionMethod::Deflated
    } else {
        zip::CompressionMethod::Stored
    };
    let options = zip::write::SimpleFileOptions::default().compression_method(method);
    for (m, bytes) in members {
        zip.start_file(format!("{m}.npy"), options).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
    path
}

/// The members of an `.npz` file: name (without `.npy`) and bytes.
type Members = Vec<(&'static str, Vec<u8>)>;

/// scipy's members of a csr matrix, with int64 indices as scipy writes for big matrices.
fn csr_members(
    shape: [i64; 2],
    data: &[f64],
    indices: &[i64],
    indptr: &[i64],
) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "indices",
            npy("<i8", &[indices.len()], &le(indices, i64::to_le_bytes)),
        ),
        (
            "indptr",
            npy("<i8", &[indptr.len()], &le(indptr, i64::to_le_bytes)),
        ),
        ("format", npy("|S3", &[], b"csr")),
        ("shape", npy("<i8", &[2], &le(&shape, i64::to_le_bytes))),
        (
            "data",
            npy("<f8", &[data.len()], &le(data, f64::to_le_bytes)),
        ),
    ]
}

#[test]
fn npz_reads_int64_unicode_unsorted_and_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    // Row 0: columns 2, 0, 2 (unsorted, duplicate); row 1 empty; row 2: column 1.
    let mut members = csr_members([3, 3], &[1.0, 2.0, 4.0, 8.0], &[2, 0, 2, 1], &[0, 3, 3, 4]);
    members[2] = (
        "format",
        npy(
            "<U3",
            &[],
            &le(&['c', 's', 'r'], |c| (c as u32).to_le_bytes()),
        ),
    );
    for compressed in [false, true] {
        let path = npz(dir.path(), "u.npz", &members, compressed);
        let s = read_npz(&path).unwrap();
        assert_eq!(
            (s.ptr.as_slice(), s.idx.as_slice()),
            (&[0, 2, 2, 3][..], &[0, 2, 1][..])
        );
        assert_eq!(s.values, Values::F64(vec![2.0, 5.0, 8.0]));
    }
    // coo: sorted row-major, duplicates summed; uint8 and int16 index arrays are fine too.
    let coo = vec![
        ("row", npy("|u1", &[3], &[1, 0, 1])),
        (
            "col",
            npy("<i2", &[3], &le(&[0i16, 1, 0], i16::to_le_bytes)),
        ),
        ("format", npy("|S3", &[], b"coo")),
        ("shape", npy("<i8", &[2], &le(&[2i64, 2], i64::to_le_bytes))),
        (
            "data",
            npy("<f4", &[3], &le(&[1f32, 2.0, 3.0], f32::to_le_bytes)),
        ),
    ];
    let s = read_npz(&npz(dir.path(), "c.npz", &coo, true)).unwrap();
    assert_eq!(s.layout, Layout::Coo);
    assert_eq!(
        (s.ptr.as_slice(), s.idx.as_slice()),
        (&[0, 2][..], &[0, 1, 1, 0][..])
    );
    assert_eq!(s.values, Values::F32(vec![2.0, 4.0]));
}

#[test]
fn npz_malformed_files_are_diagnostics() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = csr_members([2, 3], &[1.0, 2.0], &[0, 2], &[0, 1, 2]);
    assert!(read_npz(&npz(d, "good.npz", &good, true)).is_ok());

    // Not a zip; truncated zip; a truncated member.
    std::fs::write(d.join("text.npz"), b"hello").unwrap();
    expect_code(
        read_npz(&d.join("text.npz")),
        Code::NpzInvalid,
        "not a zip archive",
    );
    let bytes = std::fs::read(d.join("good.npz")).unwrap();
    for cut in [bytes.len() / 2, bytes.len() - 10, 30] {
        std::fs::write(d.join("cut.npz"), &bytes[..cut]).unwrap();
        let r = read_npz(&d.join("cut.npz"));
        assert!(r.is_err(), "truncated at {cut}");
    }
    let mut short = good.clone();
    let n = short[4].1.len() - 4;
    short[4].1.truncate(n);
    expect_code(
        read_npz(&npz(d, "s.npz", &short, false)),
        Code::NpzInvalid,
        "truncated",
    );
    expect_code(
        read_npz(&d.join("missing.npz")),
        Code::FileRead,
        "missing.npz",
    );

    // Missing members.
    for skip in ["indptr", "indices", "format", "shape", "data"] {
        let some: Vec<_> = good.iter().filter(|(m, _)| *m != skip).cloned().collect();
        expect_code(
            read_npz(&npz(d, "m.npz", &some, true)),
            Code::NpzInvalid,
            &format!("no member `{skip}.npy`"),
        );
    }
    let coo_no_col = vec![
        ("row", npy("<i4", &[0], &[])),
        ("format", npy("|S3", &[], b"coo")),
        ("shape", npy("<i8", &[2], &le(&[2i64, 2], i64::to_le_bytes))),
        ("data", npy("<f4", &[0], &[])),
    ];
    expect_code(
        read_npz(&npz(d, "nc.npz", &coo_no_col, true)),
        Code::NpzInvalid,
        "col.npy",
    );

    // Bad contents.
    let cases: Vec<(Members, Code, &str)> = vec![
        (
            csr_members([2, 3], &[1.0, 2.0], &[0, 2], &[0, 2, 1]),
            Code::SparseData,
            "indptr[2] = 1 is less than indptr[1] = 2",
        ),
        (
            csr_members([2, 3], &[1.0, 2.0], &[0, 3], &[0, 1, 2]),
            Code::SparseData,
            "indices[1] = 3 is out of range",
        ),
        (
            csr_members([2, 3], &[1.0, 2.0, 3.0], &[0, 2], &[0, 1, 2]),
            Code::SparseData,
            "data has 3 entries but indices has 2",
        ),
        (
            csr_members([2, 3], &[1.0, 2.0], &[0, 2], &[0, 1]),
            Code::SparseData,
            "indptr has 2 entries",
        ),
        (
            csr_members([2, 3], &[1.0, 2.0], &[0, 2], &[0, 1, 3]),
            Code::SparseData,
            "indptr[2] = 3 exceeds",
        ),
        (
            csr_members([2, 3], &[1.0, 2.0], &[0, 1 << 33], &[0, 1, 2]),
            Code::SparseData,
            "indices[1] = 8589934592 does not fit in an int32",
        ),
        (
            csr_members([2, -3], &[1.0, 2.0], &[0, 2], &[0, 1, 2]),
            Code::SparseData,
            "negative extent",
        ),
        (
            csr_members([2, 3], &[1.0, 2.0], &[0, 2], &[1, 1, 2]),
            Code::SparseData,
            "indptr[0] = 1 is not 0",
        ),
    ];
    for (k, (members, code, needle)) in cases.into_iter().enumerate() {
        let path = npz(d, &format!("bad{k}.npz"), &members, true);
        expect_code(read_npz(&path), code, needle);
    }
    let mut dia = good.clone();
    dia[2] = ("format", npy("|S3", &[], b"dia"));
    expect_code(
        read_npz(&npz(d, "dia.npz", &dia, true)),
        Code::SparseData,
        "`dia`",
    );
    let mut ints = good.clone();
    ints[4] = ("data", npy("<i4", &[2], &le(&[1i32, 2], i32::to_le_bytes)));
    expect_code(
        read_npz(&npz(d, "i.npz", &ints, true)),
        Code::DtypeMismatch,
        "data.npy",
    );
    let mut garbage = good.clone();
    garbage[0] = ("indices", b"\x93NUMPY\x01\x00\x04\x00{}  ".to_vec());
    expect_code(
        read_npz(&npz(d, "g.npz", &garbage, true)),
        Code::NpzInvalid,
        "indices.npy",
    );
    let mut float_idx = good.clone();
    float_idx[0] = (
        "indices",
        npy("<f8", &[2], &le(&[0.0f64, 2.0], f64::to_le_bytes)),
    );
    expect_code(
        read_npz(&npz(d, "f.npz", &float_idx, true)),
        Code::NpzInvalid,
        "integer",
    );
    let bsr_flat = vec![
        ("indices", npy("<i4", &[1], &le(&[0i32], i32::to_le_bytes))),
        (
            "indptr",
            npy("<i4", &[2], &le(&[0i32, 1], i32::to_le_bytes)),
        ),
        ("format", npy("|S3", &[], b"bsr")),
        ("shape", npy("<i8", &[2], &le(&[2i64, 2], i64::to_le_bytes))),
        ("data", npy("<f4", &[4], &le(&[1f32; 4], f32::to_le_bytes))),
    ];
    expect_code(
        read_npz(&npz(d, "b.npz", &bsr_flat, true)),
        Code::SparseData,
        "bsr data",
    );
}

// ---- safetensors -----------------------------------------------------------------------------

#[test]
fn safetensors_round_trips_every_layout_and_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (vec![5, 7], Layout::Csr),
        (vec![5, 7], Layout::Csc),
        (vec![5, 7], Layout::Coo),
        (vec![2, 3, 4], Layout::Coo),
        (vec![4, 6], Layout::Bsr { br: 2, bc: 3 }),
        (vec![4, 6], Layout::Bsr { br: 1, bc: 1 }),
        (vec![3, 8], Layout::TwoFour { axis: 1 }),
        (vec![36, 3], Layout::TwoFour { axis: 0 }),
        (vec![2, 44, 3], Layout::TwoFour { axis: 1 }),
        (vec![2, 3, 40], Layout::TwoFour { axis: 2 }),
    ];
    for dtype in DTYPES {
        let tensors: Vec<(String, SparseTensor)> = cases
            .iter()
            .enumerate()
            .map(|(k, (shape, layout))| {
                (
                    format!("layer{k}.w"),
                    sparse(dtype, shape, *layout, Select::All, k as u64),
                )
            })
            .collect();
        let refs: Vec<(&str, &SparseTensor)> =
            tensors.iter().map(|(n, s)| (n.as_str(), s)).collect();
        let path = dir.path().join(format!("{dtype}.safetensors"));
        write_sparse_safetensors(&path, &refs).unwrap();
        for (name, s) in &tensors {
            let back = read_sparse_safetensors(&path, name).unwrap();
            assert_eq!(back.as_ref(), Some(s), "{name} {dtype}");
        }
        assert_eq!(read_sparse_safetensors(&path, "nothing").unwrap(), None);
        // The arrays are plain tensors too.
        let names = tdsl::io::safetensors_names(&path).unwrap();
        assert!(
            names.contains(&"layer0.w.row_offsets".to_string()),
            "{names:?}"
        );
        assert!(names.contains(&"layer6.w.meta".to_string()), "{names:?}");
    }
}

/// A safetensors file with the given tensors (dtype, shape, bytes) and metadata.
fn st(
    dir: &Path,
    tensors: &[(&str, safetensors::Dtype, Vec<usize>, Vec<u8>)],
    meta: &[(&str, &str)],
) -> PathBuf {
    let path = dir.join("bad.safetensors");
    let views: Vec<(&str, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, d, s, b)| {
            (
                *n,
                safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
            )
        })
        .collect();
    let meta = meta
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    safetensors::serialize_to_file(views, Some(meta), &path).unwrap();
    path
}

#[test]
fn safetensors_malformed_sparse_tensors_are_diagnostics() {
    use safetensors::Dtype::{F32, I32, I64};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let i32s = |v: &[i32]| le(v, i32::to_le_bytes);
    let f32s = |v: &[f32]| le(v, f32::to_le_bytes);
    let csr = |offsets: &[i32], cols: &[i32]| {
        vec![
            ("w.row_offsets", I32, vec![offsets.len()], i32s(offsets)),
            ("w.col_indices", I32, vec![cols.len()], i32s(cols)),
            (
                "w.values",
                F32,
                vec![cols.len()],
                f32s(&vec![1.0; cols.len()]),
            ),
        ]
    };
    let meta = [("w.format", "csr"), ("w.shape", "2,3")];
    assert!(
        read_sparse_safetensors(&st(d, &csr(&[0, 1, 2], &[0, 2]), &meta), "w")
            .unwrap()
            .is_some()
    );
    let r = |t: &[(&str, safetensors::Dtype, Vec<usize>, Vec<u8>)], m: &[(&str, &str)]| {
        read_sparse_safetensors(&st(d, t, m), "w")
    };
    expect_code(
        r(&csr(&[0, 2, 1], &[0, 2]), &meta),
        Code::SparseData,
        "indptr[2] = 1 is less",
    );
    expect_code(
        r(&csr(&[0, 1, 2], &[0, 3]), &meta),
        Code::SparseData,
        "out of range",
    );
    expect_code(
        r(&csr(&[0, 2, 2], &[2, 0]), &meta),
        Code::SparseData,
        "sorted and unique",
    );
    expect_code(
        r(&csr(&[0, 1], &[0]), &meta),
        Code::SparseData,
        "indptr has 2 entries",
    );
    expect_code(
        r(&csr(&[0, 1, 2], &[0, 2]), &meta[..1]),
        Code::SafetensorsInvalid,
        "w.shape",
    );
    expect_code(
        r(&csr(&[0, 1, 2], &[0, 2]), &meta[1..]),
        Code::SafetensorsInvalid,
        "w.format",
    );
    expect_code(
        r(
            &csr(&[0, 1, 2], &[0, 2]),
            &[("w.format", "csr"), ("w.shape", "2,x")],
        ),
        Code::SparseData,
        "is not a list of extents",
    );
    expect_code(
        r(
            &csr(&[0, 1, 2], &[0, 2]),
            &[("w.format", "dia"), ("w.shape", "2,3")],
        ),
        Code::SparseData,
        "not one of",
    );
    expect_code(
        r(&csr(&[0, 1, 2], &[0, 2])[1..], &meta),
        Code::TensorNotFound,
        "w.row_offsets",
    );
    let mut wide = csr(&[0, 1, 2], &[0, 2]);
    wide[1] = (
        "w.col_indices",
        I64,
        vec![2],
        le(&[0i64, 1 << 40], i64::to_le_bytes),
    );
    expect_code(
        r(&wide, &meta),
        Code::SparseData,
        "does not fit in an int32",
    );
    let mut narrow = csr(&[0, 1, 2], &[0, 2]);
    narrow[1] = (
        "w.col_indices",
        I64,
        vec![2],
        le(&[0i64, 2], i64::to_le_bytes),
    );
    assert!(r(&narrow, &meta).unwrap().is_some());

    // 2:4: a group whose metadata claims positions (1, 1): it would need a third nonzero
    // slot to say anything else, so it is rejected; and wrong value and metadata shapes.
    let tf = |meta_word: i32, values: usize| {
        vec![
            ("w.meta", I32, vec![1, 1], i32s(&[meta_word])),
            ("w.values", F32, vec![1, values], f32s(&vec![1.0; values])),
        ]
    };
    let tmeta = [("w.format", "2:4:axis=1"), ("w.shape", "1,8")];
    assert!(r(&tf(0b1110_0100, 4), &tmeta).unwrap().is_some());
    expect_code(
        r(&tf(0b1110_0101, 4), &tmeta),
        Code::SparseData,
        "positions 1 and 1",
    );
    expect_code(
        r(&tf(0b1110_0100, 3), &tmeta),
        Code::SparseData,
        "stores [1, 4]",
    );
    expect_code(
        r(
            &tf(0b1110_0100, 4),
            &[("w.format", "2:4:axis=1"), ("w.shape", "1,6")],
        ),
        Code::SparseData,
        "multiple of 4",
    );
    let coo = vec![
        ("w.coords", I32, vec![2, 3], i32s(&[0, 0, 0, 1, 1, 1])),
        ("w.values", F32, vec![2], f32s(&[1.0, 2.0])),
    ];
    expect_code(
        r(&coo, &[("w.format", "coo"), ("w.shape", "2,2")]),
        Code::SparseData,
        "need [2, 2]",
    );
    assert!(r(&coo, &[("w.format", "coo"), ("w.shape", "2,2,2")])
        .unwrap()
        .is_some());
}

// ---- scipy's own files -------------------------------------------------------------------------

/// Reads every `NAME.npz` in `$TDSL_NPZ_FIXTURES` (from `tests/python/npz_roundtrip.py`) and
/// compares it with `NAME.dense.npy`; then writes it to `$TDSL_NPZ_FIXTURES/tdsl/NAME.npz`
/// (which `npz_roundtrip.py --check` loads with scipy) and reads that back.
#[test]
fn scipy_fixtures_match_their_dense_arrays() {
    let Some(dir) = std::env::var_os("TDSL_NPZ_FIXTURES") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let mut seen = 0;
    let out = dir.join("tdsl");
    std::fs::create_dir_all(&out).unwrap();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("TDSL_NPZ_FIXTURES={}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "npz"))
        .collect();
    entries.sort();
    for npz_path in entries {
        let stem = npz_path.file_stem().unwrap().to_string_lossy().into_owned();
        let s = read_npz(&npz_path).unwrap_or_else(|d| panic!("{stem}: {d}"));
        let dense = tdsl::io::read_npy(&dir.join(format!("{stem}.dense.npy")))
            .unwrap_or_else(|d| panic!("{stem}: {d}"));
        assert_eq!(s.shape, dense.shape(), "{stem}");
        assert_eq!(
            s.values.dtype_name(),
            dense.storage().dtype().to_string(),
            "{stem}"
        );
        assert_eq!(to_dense_f64(s.as_ref()).unwrap(), dense.to_f64(), "{stem}");
        let again = out.join(format!("{stem}.npz"));
        write_npz(&again, &s).unwrap();
        assert_eq!(read_npz(&again).unwrap(), s, "{stem}");
        seen += 1;
    }
    assert!(seen > 0, "no .npz files in {}", dir.display());
}

#[test]
fn sparsify_output_reads_back_through_both_formats_with_values_intact() {
    // A small end-to-end check that values are not reordered: the dense reconstruction of
    // each file equals the pruned dense tensor.
    let dir = tempfile::tempdir().unwrap();
    let shape = [6, 8];
    let d = dense(48, 11);
    let s = sparsify(
        ValuesRef::F64(&d),
        &shape,
        Layout::Csc,
        Select::Threshold(0.5),
    )
    .unwrap();
    let want = to_dense_f64(s.as_ref()).unwrap();
    let p = dir.path().join("a.npz");
    write_npz(&p, &s).unwrap();
    assert_eq!(to_dense_f64(read_npz(&p).unwrap().as_ref()).unwrap(), want);
    let q = dir.path().join("a.safetensors");
    write_sparse_safetensors(&q, &[("a", &s)]).unwrap();
    let back = read_sparse_safetensors(&q, "a").unwrap().unwrap();
    assert_eq!(to_dense_f64(back.as_ref()).unwrap(), want);
}
