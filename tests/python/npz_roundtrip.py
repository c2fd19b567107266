"""Writes scipy.sparse .npz fixtures for tdsl's npz reader.

For every case this writes NAME.npz with scipy.sparse.save_npz and NAME.dense.npy with the
dense matrix (same dtype) into the directory given by --out. The Rust test
`sparse_io::scipy_fixtures_match_their_dense_arrays` reads them when TDSL_NPZ_FIXTURES names
that directory:

    python tests/python/npz_roundtrip.py --out /tmp/npz
    TDSL_NPZ_FIXTURES=/tmp/npz cargo test --test it sparse_io
    python tests/python/npz_roundtrip.py --check /tmp/npz

The test writes every matrix back with tdsl's writer into DIR/tdsl/; --check loads those with
scipy.sparse.load_npz and compares them with the dense arrays (tdsl writes bf16 as '<V2', which
scipy cannot use, so there are no bf16 cases here).

Cases: csr, csc, coo and bsr (2x3 and 1x1 blocks) matrices and arrays; f32, f64 and f16
data (scipy refuses to build f16 matrices, so the data array of an f32 matrix is cast to f16
before saving, which save_npz stores as is); compressed (the default) and uncompressed; int64
indices; an all-zero matrix; and csr/coo matrices with unsorted indices and duplicate entries,
which tdsl sorts and sums on read. Values are small multiples of 1/2, exact in every dtype, so
summing duplicates in any order gives the same result.
"""

import argparse
import os

import numpy as np
import scipy.sparse as sp


def values(rng, shape, density):
    """A dense matrix of small multiples of 1/2 with about `density` nonzeros."""
    v = rng.integers(-6, 7, size=shape) / 2.0
    mask = rng.random(shape) < density
    return np.where(mask, v, 0.0)


def cast_data(m, dtype):
    """Sets the stored values' dtype (f16 only this way: scipy will not build f16 matrices)."""
    m.data = m.data.astype(dtype)
    return m


def save(out, name, m, dense, compressed=True):
    sp.save_npz(os.path.join(out, name + ".npz"), m, compressed=compressed)
    np.save(os.path.join(out, name + ".dense.npy"), dense)


def check(d):
    """Loads every DIR/tdsl/NAME.npz and compares it with DIR/NAME.dense.npy: with
    scipy.sparse.load_npz for f32/f64, and for f16 (which load_npz refuses, for scipy's own files
    too) by building the matrix from the raw arrays with the data widened."""
    written = sorted(f for f in os.listdir(os.path.join(d, "tdsl")) if f.endswith(".npz"))
    if not written:
        raise SystemExit(f"no .npz files in {d}/tdsl (run the Rust test first)")
    for f in written:
        path = os.path.join(d, "tdsl", f)
        dense = np.load(os.path.join(d, f[: -len(".npz")] + ".dense.npy"))
        with np.load(path) as z:
            fmt = z["format"].item().decode("ascii")
            assert z["data"].dtype == dense.dtype, (f, z["data"].dtype, dense.dtype)
            assert z["indices" if fmt != "coo" else "row"].dtype == np.int32, f
            data = z["data"].astype(np.float64)
            cls = getattr(sp, fmt + "_matrix")
            if fmt == "coo":
                m = cls((data, (z["row"], z["col"])), shape=tuple(z["shape"]))
            else:
                m = cls((data, z["indices"], z["indptr"]), shape=tuple(z["shape"]))
        if dense.dtype != np.float16:
            m = sp.load_npz(path)
        if m.format in ("csr", "csc", "bsr"):
            assert m.has_sorted_indices, f
        np.testing.assert_array_equal(m.toarray().astype(np.float64), dense.astype(np.float64), err_msg=f)
    print(f"checked {len(written)} .npz files written by tdsl")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", help="directory to write the fixtures into")
    group.add_argument("--check", help="fixture directory whose tdsl/ files scipy should load")
    args = ap.parse_args()
    if args.check:
        check(args.check)
        return
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(0)
    count = 0
    for dtype in (np.float32, np.float64, np.float16):
        tag = np.dtype(dtype).name
        build = np.float32 if dtype == np.float16 else dtype
        for fmt in ("csr", "csc", "coo", "bsr23", "bsr11"):
            for kind in ("matrix", "array"):
                d = values(rng, (6, 9), 0.3)
                d[2, :] = 0  # an empty row
                base = sp.csr_array(d.astype(build)) if kind == "array" else sp.csr_matrix(d.astype(build))
                if fmt == "bsr23":
                    m = base.tobsr(blocksize=(2, 3))
                elif fmt == "bsr11":
                    m = base.tobsr(blocksize=(1, 1))
                else:
                    m = base.asformat(fmt)
                cast_data(m, dtype)
                for compressed in (True, False):
                    name = f"{fmt}-{kind}-{tag}-{'z' if compressed else 'stored'}"
                    save(args.out, name, m, d.astype(dtype), compressed)
                    count += 1

        # int64 indices (scipy uses them for large matrices; force them here).
        d = values(rng, (5, 4), 0.5)
        m = cast_data(sp.csr_matrix(d.astype(build)), dtype)
        m.indices = m.indices.astype(np.int64)
        m.indptr = m.indptr.astype(np.int64)
        save(args.out, f"csr-int64-{tag}", m, d.astype(dtype))

        # Unsorted indices and duplicates: csr built from raw arrays, coo with repeats.
        data = np.array([1.0, 2.0, 0.5, 1.5, -1.0], dtype=build)
        indices = np.array([3, 0, 3, 1, 1], dtype=np.int32)
        indptr = np.array([0, 3, 3, 5], dtype=np.int32)
        m = cast_data(sp.csr_matrix((data, indices, indptr), shape=(3, 4)), dtype)
        dense = np.zeros((3, 4))
        for r in range(3):
            for k in range(indptr[r], indptr[r + 1]):
                dense[r, indices[k]] += float(data[k])
        save(args.out, f"csr-unsorted-dup-{tag}", m, dense.astype(dtype))
        row = np.array([2, 0, 2, 1, 0], dtype=np.int32)
        col = np.array([1, 3, 1, 0, 3], dtype=np.int32)
        m = cast_data(sp.coo_matrix((data, (row, col)), shape=(3, 4)), dtype)
        dense = np.zeros((3, 4))
        for r, c, v in zip(row, col, data):
            dense[r, c] += float(v)
        save(args.out, f"coo-unsorted-dup-{tag}", m, dense.astype(dtype))

        # All zeros.
        m = cast_data(sp.csr_matrix((4, 5), dtype=build), dtype)
        save(args.out, f"csr-empty-{tag}", m, np.zeros((4, 5), dtype=dtype))
        count += 4
    print(f"wrote {count} .npz fixtures to {args.out}")


if __name__ == "__main__":
    main()
