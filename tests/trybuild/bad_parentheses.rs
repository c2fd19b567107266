//! rearrange! with an unclosed parenthesis.

fn main() {
    let x = tdsl::Tensor::zeros(tdsl::DType::F32, &[2, 16]).unwrap();
    let _ = tdsl::rearrange!(x, "b (h d -> b h d", h = 8);
}
