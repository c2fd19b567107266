//! einsum! whose pattern names two operands, called with one.

fn main() {
    let a = tdsl::Tensor::zeros(tdsl::DType::F32, &[2, 3, 4]).unwrap();
    let _ = tdsl::einsum!("b i k, b k j -> b i j", a);
}
