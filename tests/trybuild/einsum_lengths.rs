//! einsum! axis lengths are checked at compile time as in scripts: one that names no label,
//! and a group with two unknown labels.

fn main() {
    let x = tdsl::Tensor::zeros(tdsl::DType::F32, &[2, 8]).unwrap();
    let w = tdsl::Tensor::zeros(tdsl::DType::F32, &[8, 3]).unwrap();
    let _ = tdsl::einsum!("b (h d), (h d) o -> b h o", x, w, g = 4);
    let _ = tdsl::einsum!("b (h d), (h d) o -> b h o", x, w);
    let _ = tdsl::einsum!("b (h d), (h d) o -> b h o", x, w, h = 4);
}
