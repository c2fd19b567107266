//! rearrange! with the same axis twice on one side.

fn main() {
    let x = tdsl::Tensor::zeros(tdsl::DType::F32, &[2, 3, 3]).unwrap();
    let _ = tdsl::rearrange!(x, "b h h -> b h");
}
