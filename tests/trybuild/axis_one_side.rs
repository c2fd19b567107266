//! rearrange! with an axis on the left side only: `d` is dropped.

fn main() {
    let x = tdsl::Tensor::zeros(tdsl::DType::F32, &[2, 16]).unwrap();
    let _ = tdsl::rearrange!(x, "b (h d) -> b h", h = 8);
}
