//! The Rust API as a Rust user meets it (issue 12): each item of that issue has tests here, and
//! the README's Rust section is a doc-test (`tdsl::ReadmeDoctests`).

use ndarray::{array, Array2, Ix2};
use tdsl::{Code, Diagnostics, Program, Tensor, TensorView};

fn codes(d: &Diagnostics) -> Vec<Code> {
    d.iter().map(|d| d.code).collect()
}

fn linear() -> Program {
    Program::compile(
        "input x: f32[batch, d]\ninput w: f32[d, k]\ny = einsum(x, w, \"batch d, d k -> batch k\")\noutput y\n",
    )
    .unwrap()
}

// 1. Oversized work is a diagnostic through every entry point, never an abort.

#[test]
fn oversized_work_is_too_large_not_an_abort() {
    let x = Tensor::zeros(tdsl::DType::F32, &[1000, 1000]).unwrap();
    let p =
        Program::compile("input x: f32[i, j]\ny = einsum(x, x, \"i j, k l -> i j k l\")\noutput y")
            .unwrap();
    assert_eq!(codes(&p.run([("x", &x)]).unwrap_err()), [Code::TooLarge]);

    let small = Tensor::zeros(tdsl::DType::F32, &[2, 3]).unwrap();
    let e = tdsl::repeat!(small, "i j -> i j c", c = 1000000000000).unwrap_err();
    assert_eq!(codes(&e), [Code::TooLarge]);

    let p = Program::compile(
        "input x: f32[a=1000000, b=1000000, c=1000000] = ones\ny = x * 2\noutput y",
    )
    .unwrap();
    assert_eq!(codes(&p.runner().run().unwrap_err()), [Code::TooLarge]);

    let e = Tensor::zeros(tdsl::DType::F64, &[1000000, 1000000, 1000000]).unwrap_err();
    assert_eq!(e.code, Code::TooLarge);
    let e = Tensor::zeros(tdsl::DType::F32, &[usize::MAX, 2]).unwrap_err();
    assert_eq!(e.code, Code::TooLarge);
}

// 2. A binding mistake is reported once, by its root cause.

#[test]
fn a_missing_input_is_named_with_the_inputs() {
    let w = Tensor::zeros(tdsl::DType::F32, &[3, 4]).unwrap();
    let e = linear().run([("w", &w)]).unwrap_err();
    assert_eq!(codes(&e), [Code::MissingInput]);
    assert_eq!(e.0[0].message, "`x` is not bound; the inputs are `x`, `w`");
    assert!(e.0[0]
        .help
        .as_deref()
        .unwrap()
        .contains("program.bind(\"x\""));
}

#[test]
fn a_misspelled_input_suggests_the_right_name_once() {
    let x = Tensor::zeros(tdsl::DType::F32, &[2, 3]).unwrap();
    let w = Tensor::zeros(tdsl::DType::F32, &[3, 4]).unwrap();
    let e = linear().run([("xx", &x), ("w", &w)]).unwrap_err();
    assert_eq!(codes(&e), [Code::UnknownInput]);
    assert_eq!(
        e.0[0].message,
        "`xx` is not an input of this program; its inputs are `x`, `w`"
    );
    assert_eq!(e.0[0].help.as_deref(), Some("did you mean `x`?"));
}

#[test]
fn a_wrong_rank_is_the_only_error() {
    let x = Tensor::zeros(tdsl::DType::F32, &[1, 2, 3]).unwrap();
    let w = Tensor::zeros(tdsl::DType::F32, &[3, 4]).unwrap();
    let e = linear().run([("x", &x), ("w", &w)]).unwrap_err();
    assert_eq!(codes(&e), [Code::ShapeMismatch]);
    assert!(e.0[0].message.contains("rank 2"), "{}", e.0[0].message);
}

// 4. Errors render like the CLI's, with help for API users.

#[test]
fn errors_render_with_source_caret_and_api_help() {
    let w = Tensor::zeros(tdsl::DType::F32, &[3, 4]).unwrap();
    let e = linear().run([("w", &w)]).unwrap_err();
    let shown = e.to_string();
    assert!(shown.contains("tdsl::io::missing_input"), "{shown}");
    assert!(shown.contains("input x: f32[batch, d]"), "{shown}");
    assert!(shown.contains("no tensor bound"), "{shown}");
    assert!(shown.contains("program.bind(\"x\", &tensor)"), "{shown}");
    assert!(!shown.contains("--input"), "{shown}");
    // `?` out of `main` prints Debug: the same report, not the struct.
    assert_eq!(format!("{e:?}"), shown);

    let e = Program::compile("input x: f32[n=2]\ny = rearrange(x, \"a -> a b\")\noutput y")
        .unwrap_err();
    let shown = e.to_string();
    assert!(shown.contains("<program>:2:"), "{shown}");
    assert!(shown.contains("y = rearrange(x, \"a -> a b\")"), "{shown}");

    // Unknown extents tell API users how to bind, not which flag to pass.
    let p = Program::compile("input x: f32[n]\nlet m = 3\ny = x * 2\noutput y").unwrap();
    let e = p.runner().run().unwrap_err();
    assert!(!e.to_string().contains("--input"), "{e}");
}

#[test]
fn macro_errors_render_against_the_pattern() {
    let x = Tensor::zeros(tdsl::DType::F32, &[2, 6]).unwrap();
    let e = tdsl::rearrange!(x, "b (h d) -> b h d", h = 4).unwrap_err();
    let shown = e.to_string();
    assert!(shown.contains("tdsl::pattern::indivisible"), "{shown}");
    assert!(shown.contains("b (h d) -> b h d"), "{shown}");
}

// 6. Tensors cannot be built inconsistent (fields are private: tests/trybuild/
//    tensor_fields_private.rs), so the reference run cannot panic on them.

#[test]
fn checked_constructors_reject_inconsistent_data() {
    assert!(Tensor::from_vec(vec![1.0f32; 5], &[2, 3]).is_err());
    assert!(TensorView::new(&[1.0f32; 5], &[2, 3]).is_err());
    let t = Tensor::from_vec(vec![1.0f32; 6], &[2, 3]).unwrap();
    let p = Program::compile("input x: f32[a, b]\ny = x * 2\noutput y").unwrap();
    let out = p.bind("x", &t).run_reference().unwrap();
    assert_eq!(out["y"].as_slice::<f32>(), Some(&[2.0f32; 6][..]));
}

// 7. ndarray of any rank, in and out; dtype promotion in macros; one compile per signature.

#[test]
fn static_rank_arrays_in_and_out() {
    let a: Array2<f32> = array![[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let ptr = a.as_ptr();
    let v = TensorView::try_from(a.view()).unwrap();
    assert_eq!(v.as_slice::<f32>().map(|s| s.as_ptr()), Some(ptr));
    let t = Tensor::from(a.clone());
    assert_eq!(t.shape(), [2, 3]);

    let p = Program::compile("input a: f32[i, j]\ny = reduce(a, \"i j -> j\", \"sum\")\noutput y")
        .unwrap();
    // Arrays bind as they are: borrowed when row-major, packed once when strided.
    let out = p.run([("a", &a)]).unwrap();
    assert_eq!(out["y"].as_slice::<f32>(), Some(&[5.0, 7.0, 9.0][..]));
    let at = a.t();
    let out = p.run([("a", &at)]).unwrap();
    assert_eq!(out["y"].as_slice::<f32>(), Some(&[6.0, 15.0][..]));
    let out = p.run([("a", a.clone())]).unwrap();
    let y = out["y"].to_array::<f32, ndarray::Ix1>().unwrap();
    assert_eq!(y, array![5.0f32, 7.0, 9.0]);
    // The wrong static rank is `None`, not a panic.
    assert!(out["y"].to_array::<f32, Ix2>().is_none());
    let back: Array2<f32> = t.into_array::<f32, Ix2>().unwrap();
    assert_eq!(back, a);
}

#[test]
fn mixed_dtypes_in_a_macro_promote_as_scripts_do() {
    let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let b = Tensor::from_vec(vec![3.0f64, 4.0], &[2]).unwrap();
    let c = tdsl::einsum!("i, i ->", a, b).unwrap();
    assert_eq!(c.dtype(), tdsl::DType::F64);
    assert_eq!(c.as_slice::<f64>(), Some(&[11.0][..]));
}

#[test]
fn threads_on_a_cold_cache_compile_once() {
    let p = Program::compile(
        "input a: f32[i, k]\ninput b: f32[k, j]\ny = tanh(einsum(a, b, \"i k, k j -> i j\"))\noutput y",
    )
    .unwrap();
    let a = Tensor::from_vec(vec![0.5f32; 64 * 32], &[64, 32]).unwrap();
    let b = Tensor::from_vec(vec![0.25f32; 32 * 16], &[32, 16]).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..20 {
                    let out = p.run([("a", &a), ("b", &b)]).unwrap();
                    let y = out["y"].as_slice::<f32>().unwrap();
                    assert!(y.iter().all(|&v| (v - 4.0f32.tanh()).abs() < 1e-6));
                }
            });
        }
    });
    let stats = p.stats();
    assert_eq!(stats.runs, 80);
    assert_eq!(stats.plans, 1, "{stats:?}");
}
