//! reduce! with a misspelt reduce op.

fn main() {
    let x = tdsl::Tensor::zeros(tdsl::DType::F32, &[2, 4, 8]).unwrap();
    let _ = tdsl::reduce!(x, "b s d -> b d", mea);
}
