//! repeat! with an axis length that names no axis, and a new axis with no length.

fn main() {
    let x = tdsl::Tensor::zeros(tdsl::DType::F32, &[2, 3]).unwrap();
    let _ = tdsl::repeat!(x, "h w -> h w c", c = 3, k = 2);
    let _ = tdsl::repeat!(x, "h w -> h w c");
}
