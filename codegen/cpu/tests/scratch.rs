mod common;
use common::*;
use tdsl_loop::*;
#[test]
fn dump() {
    let be = tdsl_cpu::CpuBackend::new().unwrap();
    let n = 1000;
    let p = program(
        vec![
            buffer("a", ElemType::F32, n, Role::Input(0)),
            buffer("b", ElemType::F32, n, Role::Input(1)),
            buffer("s", ElemType::F32, 1, Role::Output(0)),
        ],
        vec![kernel(
            "dot",
            vec![
                let_(0, ElemType::F32, c(0.0)),
                range(
                    0,
                    n,
                    false,
                    4,
                    vec![update(
                        0,
                        AccOp::Add,
                        bin(
                            BinOp::Mul,
                            load(0, ix(0, &[(0, 1)])),
                            load(1, ix(0, &[(0, 1)])),
                        ),
                    )],
                ),
                store(2, ix(0, &[]), acc(0)),
            ],
        )],
    );
    println!("{}", be.clif(&p, 0).unwrap());
    println!("{}", be.disasm(&p, 0).unwrap());
}
