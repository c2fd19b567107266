//! Seed inputs: what `tdsl-fuzz --seed-corpus` writes to `corpus/TARGET/` (and what a run
//! uses when that folder is missing). Scripts come from the repository's examples and test
//! corpus; files are written by tdsl's own writers, plus hand-made variants (scipy's int64
//! indices, Fortran order, big-endian, `.npy` version 2, stored archives).

use std::path::{Path, PathBuf};

use half::{bf16, f16};
use tdsl::io::npz::write_npz;
use tdsl::io::safetensors::{write_safetensors, write_sparse_safetensors};
use tdsl::io::write_npy;
use tdsl::{DType, Tensor};
use tdsl_sparse::prune::{sparsify, Select};
use tdsl_sparse::{Layout, SparseTensor, Values};

/// Seed files: name and bytes.
pub type Seeds = Vec<(String, Vec<u8>)>;

/// Scripts beyond the repository's, for features the examples do not show.
const EXTRA_SCRIPTS: &[(&str, &str)] = &[
    (
        "sparsify_formats",
        "input w: f32[r=8, c=8] = randn(seed=3)\n\
         a = sparsify(w, bsr(2, 2), density=0.25)\n\
         b = sparsify(w, csr, threshold=0.5)\n\
         c = sparsify(w, coo, density=0.1)\n\
         d = sparsify(w, \"2:4\")\n\
         e = sparsify(w, \"2:4(r)\")\n\
         output a, b, c, d, e\n",
    ),
    (
        "sparsify_auto",
        "input x: f32[n=16, k=32] = randn(seed=0)\n\
         input w: f32[k, m=16] = randn(seed=1)\n\
         s = sparsify(w, auto, density=0.1)\n\
         y = einsum(x, s, \"n k, k m -> n m\")\n\
         output y\n",
    ),
    (
        "pack_unpack",
        "input cls: f32[b=2, d=4] = ones\n\
         input patches: f32[b, p=3, d] = randn(seed=2)\n\
         y = pack(cls, patches, \"b * d\")\n\
         c, q = unpack(y, \"b * d\", cls, patches)\n\
         output c, q\n",
    ),
    (
        "where_index_clamp",
        "input s: f32[i=4, j=4] = randn(seed=5)\n\
         m = where(index(s, 'j') <= index(s, 'i'), s, -1e9)\n\
         c = clamp(m, -1, 1)\n\
         d = clip(c, max=6)\n\
         e = cast(d, bf16)\n\
         output e\n",
    ),
    (
        "sparse_inputs",
        "let k = 8\n\
         input a: f16[n=4, k] @ csr = randn(seed=1, density=0.5)\n\
         input b: f32[k, m=4] @ bsr(2, 2) = randn(seed=2, density=0.5)\n\
         input t: f32[m, k] @ 2:4 = randn(seed=3)\n\
         input z: f64[n, m] @ coo = zeros\n\
         y = einsum(a, b, \"n k, k m -> n m\") + z\n\
         u = einsum(t, a, \"m k, n k -> m n\")\n\
         output y, u\n",
    ),
    (
        "elementwise",
        "input x: f32[8] = arange\n\
         y = exp(x) / (1 + exp(x)) - sigmoid(x) * relu(x - 2) + gelu(x) ** 2\n\
         z = max(log1p(abs(x)), sqrt(x)) == rsqrt(x + 1) != (x >= 3)\n\
         output y, z; w = -x; output w\n",
    ),
    (
        "numpy_einsum",
        "input a: f32[3, 4] = rand\ninput b: f32[4, 5] = rand(seed=9)\n\
         c = einsum(a, b, \"ij,jk->ik\")\nd = einsum(c, \"ij->\")\noutput c, d\n",
    ),
    (
        "continuation",
        "input x: f32[b=2,\n  d=4] = randn(seed=0)\n\
         y = reduce(\n  rearrange(x, 'b (h e) -> b h e', h=2),\n  'b h e -> b h',\n  'mean'\n)\n\
         z = y + \\\n  1\noutput z # done\n",
    ),
];

/// REPL transcripts beyond the scripts.
const REPL_SESSIONS: &[(&str, &str)] = &[
    (
        "session_basic",
        "let d = 4\ninput x: f32[n=3, d] = randn(seed=0)\nx * 2\ny = reduce(x, \"n d -> d\", \"sum\")\n:vars\ny\n",
    ),
    (
        "session_errors",
        "input x: f32[n=3]\ny = rearrange(x, \"a -> a b\")\ny = x + 1\ny = x\nz = y; w = z * z\n:cost\n",
    ),
    (
        "session_sparse",
        "input w: f32[k=8, m=8] @ csr = randn(seed=1, density=0.25)\ninput x: f32[n=4, k]\neinsum(x, w, \"n k, k m -> n m\")\ns = sparsify(x, auto)\n",
    ),
    (
        "session_multi",
        "input a: f32[i=2, j=3] = ones; input b: f32[j, k=4] = ones\nc = einsum(a, b, \"i j, j k -> i k\"); output c\n:plan c\nc + \n",
    ),
];

/// Pattern inputs: `OP\nPATTERN\nKWARGS\nSHAPES` (see the `pattern` target).
const PATTERNS: &[&str] = &[
    "rearrange\nb h w c -> b (h w) c\n\n2 3 4 5",
    "rearrange\nb (h d) -> b h d\nh=4\n2 12",
    "rearrange\n(b 2) c -> b c 2\n\n4 3",
    "rearrange\n... h w -> ... (h w)\n\n2 3 4 5",
    "rearrange\nb 1 c -> b c\n\n2 1 3",
    "rearrange\nb () c -> b c ()\n\n2 1 3",
    "rearrange\nb c -> c b",
    "rearrange\nb (h1 h2) (w1 w2) c -> (b h1 w1) h2 w2 c\nh2=2 w2=2\n1 4 4 3",
    "rearrange\na b -> a b c",
    "rearrange\na a -> a",
    "rearrange\na b",
    "rearrange\n(a (b c)) -> a b c\nb=2 c=3\n12",
    "reduce sum\nb h w c -> b c\n\n2 3 4 5",
    "reduce max\nb (h 2) (w 2) c -> b h w c\n\n1 4 4 3",
    "reduce mean\n... c -> c\n\n2 3 4",
    "reduce min\nb c -> b ()\n\n2 3",
    "reduce prod\nb c -> b 1\n\n2 3",
    "reduce median\nb c -> b\n\n2 3",
    "repeat\nh w -> h w c\nc=3\n2 3",
    "repeat\nh w -> (h 2) (w 2)\n\n2 3",
    "repeat\nh w -> h w c\n\n2 3",
    "repeat\n... -> ... c\nc=0\n2",
    "repeat\nb c -> b (c k)\nk=18446744073709551615\n2 3",
    "einsum\ni k, k j -> i j\n\n2 3; 3 4",
    "einsum\nb h i d, b h j d -> b h i j\n\n2 2 3 4; 2 2 5 4",
    "einsum\ni i -> i\n\n3 3",
    "einsum\ni j ->\n\n2 3",
    "einsum\n... i, ... i -> ...\n\n2 3 4; 3 4",
    "einsum\n(h d) n, h m -> h n m d\nh=2\n6 3; 2 5",
    "einsum\nij,jk->ik\n\n2 3; 3 4",
    "einsum\n...ij,...jk\n\n5 2 3; 3 4",
    "einsum\nii\n\n3 3",
    "einsum\nb i, b j -> b i j\n\n1 3; 4 5",
    "einsum\ni, i -> i\n\n1; 4",
    "einsum\ni j, j k, k l -> i l\n\n2 3; 3 4; 4 5",
    "einsum\na b c d e f g h i j k l m n o p q r s t u v w x y z ->\n",
    "rearrange\nb c -> é b\n",
    "einsum\n→, i -> i\n\n3; 3",
    "rearrange\nb ... c ... -> b c\n\n2 3 4",
    "rearrange\n((a b)) -> a b\n",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the fuzz crate lives in the workspace")
        .to_path_buf()
}

/// `*.tdsl` files of `dir`, by name.
fn tdsl_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "tdsl"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
        .into_iter()
        .filter_map(|p| {
            let stem = p.file_stem()?.to_string_lossy().into_owned();
            Some((stem, std::fs::read(&p).ok()?))
        })
        .collect()
}

fn scripts() -> Vec<(String, Vec<u8>)> {
    let root = repo();
    let mut out: Vec<(String, Vec<u8>)> = tdsl_files(&root.join("examples"))
        .into_iter()
        .map(|(n, b)| (format!("example_{n}.tdsl"), b))
        .collect();
    out.extend(
        tdsl_files(&root.join("tests").join("corpus"))
            .into_iter()
            .map(|(n, b)| (format!("corpus_{n}.tdsl"), b)),
    );
    out.extend(
        EXTRA_SCRIPTS
            .iter()
            .map(|(n, t)| (format!("extra_{n}.tdsl"), t.as_bytes().to_vec())),
    );
    out
}

/// Every seed of `target`: (file name, bytes).
pub fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    match target {
        "script" => scripts(),
        "repl" => {
            let mut out: Vec<(String, Vec<u8>)> = REPL_SESSIONS
                .iter()
                .map(|(n, t)| (format!("{n}.txt"), t.as_bytes().to_vec()))
                .collect();
            // The examples typed line by line.
            out.extend(
                tdsl_files(&repo().join("examples"))
                    .into_iter()
                    .map(|(n, b)| (format!("example_{n}.txt"), b)),
            );
            out
        }
        "pattern" => PATTERNS
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("pattern_{i:02}.txt"), p.as_bytes().to_vec()))
            .collect(),
        "npy" => files(npy_seeds),
        "npz" => files(npz_seeds),
        "safetensors" => files(safetensors_seeds),
        _ => Vec::new(),
    }
}

/// Runs a seed writer in a temporary folder of our own and collects what it wrote.
fn files(write: fn(&Path) -> Seeds) -> Seeds {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tdsl-fuzz-seeds-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    if std::fs::create_dir_all(&dir).is_err() {
        return Vec::new();
    }
    let out = write(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// Deterministic values with zeros, ties, negatives.
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 5 {
                0 | 1 => 0.0,
                k => (k as f64 - 2.5) * ((x >> 8) % 4 + 1) as f64 / 2.0,
            }
        })
        .collect()
}

fn tensor(dtype: DType, shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f64(dtype, shape.to_vec(), &values(n, seed))
}

/// A `.npy` file as NumPy writes it, with any descr (for what tdsl's writer never writes).
fn npy_bytes(version: u8, descr: &str, fortran: bool, shape: &[usize], data: &[u8]) -> Vec<u8> {
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
    let order = if fortran { "True" } else { "False" };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {tuple}, }}");
    let prefix = if version == 1 { 10 } else { 12 };
    while !(prefix + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY".to_vec();
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

fn npy_seeds(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let shapes: &[&[usize]] = &[&[], &[3], &[2, 3], &[2, 1, 2], &[0, 4]];
    for (d, dtype) in DType::ALL.into_iter().enumerate() {
        for (s, shape) in shapes.iter().enumerate() {
            let t = tensor(dtype, shape, (d * 10 + s) as u64);
            let path = dir.join("t.npy");
            if write_npy(&path, &t).is_ok() {
                if let Ok(b) = std::fs::read(&path) {
                    out.push((format!("{}_{}d_{s}.npy", dtype.name(), shape.len()), b));
                }
            }
        }
    }
    let f4 = le(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], f32::to_le_bytes);
    let f8be = le(&[1.0f64, -2.0, f64::NAN], f64::to_be_bytes);
    let bf = le(
        &[bf16::from_f32(1.5), bf16::from_f32(-0.25)],
        bf16::to_le_bytes,
    );
    let h = le(&[f16::from_f32(0.5), f16::INFINITY], f16::to_le_bytes);
    let i8s = le(&[1i64, -2, 3], i64::to_le_bytes);
    out.push((
        "fortran_f4.npy".into(),
        npy_bytes(1, "<f4", true, &[2, 3], &f4),
    ));
    out.push((
        "big_endian_f8.npy".into(),
        npy_bytes(1, ">f8", false, &[3], &f8be),
    ));
    out.push(("v2_f4.npy".into(), npy_bytes(2, "<f4", false, &[3, 2], &f4)));
    out.push(("v3_f4.npy".into(), npy_bytes(3, "<f4", false, &[6], &f4)));
    out.push(("bf16_v2.npy".into(), npy_bytes(1, "|V2", false, &[2], &bf)));
    out.push(("f2.npy".into(), npy_bytes(1, "<f2", false, &[2], &h)));
    out.push(("int64.npy".into(), npy_bytes(1, "<i8", false, &[3], &i8s)));
    out.push(("bytes.npy".into(), npy_bytes(1, "|S3", false, &[], b"csr")));
    out.push((
        "truncated.npy".into(),
        npy_bytes(1, "<f4", false, &[4, 4], &f4),
    ));
    out
}

fn sparse(dtype: DType, shape: &[usize], layout: Layout, seed: u64) -> Option<SparseTensor> {
    let n: usize = shape.iter().product();
    let v = values(n, seed);
    let vals = match dtype {
        DType::F32 => Values::F32(v.iter().map(|&x| x as f32).collect()),
        DType::F64 => Values::F64(v),
        DType::F16 => Values::F16(v.iter().map(|&x| f16::from_f64(x)).collect()),
        DType::BF16 => Values::BF16(v.iter().map(|&x| bf16::from_f64(x)).collect()),
    };
    sparsify(vals.as_ref(), shape, layout, Select::All).ok()
}

/// The scipy members of a csr matrix with int64 indices (as scipy writes big matrices).
fn scipy_csr(
    shape: [i64; 2],
    data: &[f64],
    indices: &[i64],
    indptr: &[i64],
) -> Vec<(String, Vec<u8>)> {
    vec![
        (
            "indices.npy".into(),
            npy_bytes(
                1,
                "<i8",
                false,
                &[indices.len()],
                &le(indices, i64::to_le_bytes),
            ),
        ),
        (
            "indptr.npy".into(),
            npy_bytes(
                1,
                "<i8",
                false,
                &[indptr.len()],
                &le(indptr, i64::to_le_bytes),
            ),
        ),
        ("format.npy".into(), npy_bytes(1, "|S3", false, &[], b"csr")),
        (
            "shape.npy".into(),
            npy_bytes(1, "<i8", false, &[2], &le(&shape, i64::to_le_bytes)),
        ),
        (
            "data.npy".into(),
            npy_bytes(1, "<f8", false, &[data.len()], &le(data, f64::to_le_bytes)),
        ),
    ]
}

fn npz_seeds(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let layouts = [
        ("csr", Layout::Csr),
        ("csc", Layout::Csc),
        ("coo", Layout::Coo),
        ("bsr", Layout::Bsr { br: 2, bc: 2 }),
    ];
    for (l, (lname, layout)) in layouts.into_iter().enumerate() {
        for (d, dtype) in DType::ALL.into_iter().enumerate() {
            let Some(s) = sparse(dtype, &[4, 6], layout, (l * 4 + d) as u64) else {
                continue;
            };
            let path = dir.join("t.npz");
            if write_npz(&path, &s).is_ok() {
                if let Ok(b) = std::fs::read(&path) {
                    out.push((format!("{lname}_{}.npz", dtype.name()), b));
                }
            }
        }
    }
    let members = scipy_csr([3, 4], &[1.0, 2.0, 3.0], &[3, 0, 1], &[0, 2, 2, 3]);
    if let Some(b) = crate::targets::zip_archive(&members, false) {
        out.push(("scipy_csr_int64_stored.npz".into(), b));
    }
    if let Some(b) = crate::targets::zip_archive(&members, true) {
        out.push(("scipy_csr_int64_deflated.npz".into(), b));
    }
    let mut unicode = scipy_csr([2, 2], &[1.0, 1.0], &[1, 1], &[0, 2, 2]);
    unicode[2].1 = npy_bytes(
        1,
        "<U3",
        false,
        &[],
        &le(&['c' as u32, 's' as u32, 'r' as u32], u32::to_le_bytes),
    );
    unicode.push((
        "_is_array.npy".into(),
        npy_bytes(1, "|b1", false, &[], &[1]),
    ));
    if let Some(b) = crate::targets::zip_archive(&unicode, false) {
        out.push(("scipy_csr_unicode_duplicates.npz".into(), b));
    }
    out
}

fn safetensors_seeds(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let path = dir.join("t.safetensors");
    let a = tensor(DType::F32, &[2, 3], 1);
    let b = tensor(DType::F16, &[4], 2);
    let c = tensor(DType::BF16, &[], 3);
    let d = tensor(DType::F64, &[1, 2, 2], 4);
    if write_safetensors(&path, &[("a", &a), ("b", &b), ("c", &c), ("d", &d)]).is_ok() {
        if let Ok(bytes) = std::fs::read(&path) {
            out.push(("dense_all_dtypes.safetensors".into(), bytes));
        }
    }
    if write_safetensors(&path, &[("w", &a)]).is_ok() {
        if let Ok(bytes) = std::fs::read(&path) {
            out.push(("dense_one.safetensors".into(), bytes));
        }
    }
    let layouts = [
        ("csr", Layout::Csr, vec![4, 8]),
        ("csc", Layout::Csc, vec![4, 8]),
        ("coo", Layout::Coo, vec![4, 8]),
        ("coo3", Layout::Coo, vec![2, 2, 4]),
        ("bsr", Layout::Bsr { br: 2, bc: 4 }, vec![4, 8]),
        ("two_four", Layout::TwoFour { axis: 1 }, vec![4, 8]),
        ("two_four_axis0", Layout::TwoFour { axis: 0 }, vec![8, 2]),
    ];
    for (l, (lname, layout, shape)) in layouts.into_iter().enumerate() {
        let dtype = DType::ALL[l % 4];
        let Some(s) = sparse(dtype, &shape, layout, l as u64 + 7) else {
            continue;
        };
        if write_sparse_safetensors(&path, &[("w", &s)]).is_ok() {
            if let Ok(bytes) = std::fs::read(&path) {
                out.push((
                    format!("sparse_{lname}_{}.safetensors", dtype.name()),
                    bytes,
                ));
            }
        }
    }
    out
}
