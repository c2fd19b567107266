//! Plans as text: the loop IR of every example and benchmark workload is snapshot-tested, and
//! the planner's structural promises are asserted directly (fusion, pass counts, GEMM calls).

use crate::common::repo;
use tdsl_loop::{Iter, LibCall, Stmt};

fn plan_text(path: &std::path::Path) -> (tdsl::plan::lower::Plan, String) {
    let text = std::fs::read_to_string(path).unwrap();
    let program = tdsl::compile(&text, &Default::default())
        .unwrap_or_else(|d| panic!("{}: {d}", path.display()));
    let plan = tdsl::plan::lower::plan_program(&program)
        .unwrap_or_else(|d| panic!("{}: {d}", path.display()));
    tdsl_loop::verify::verify(&plan.loops).unwrap_or_else(|e| panic!("{}: {e:?}", path.display()));
    let printed = tdsl_loop::print::print_program(&plan.loops);
    (plan, printed)
}

#[test]
fn plan_snapshots() {
    for dir in ["examples", "bench"] {
        let mut paths: Vec<_> = std::fs::read_dir(repo().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "tdsl"))
            .collect();
        paths.sort();
        for p in paths {
            let (_, printed) = plan_text(&p);
            let name = format!("plan_{dir}_{}", p.file_stem().unwrap().to_string_lossy());
            insta::assert_snapshot!(name, printed);
        }
    }
}

/// Every kernel the planner makes knows its source: the statement it computes (when it computes
/// an assignment) and a byte range that lies inside the script, pointing at the expression.
#[test]
fn every_kernel_points_at_its_source() {
    for dir in ["examples", "bench"] {
        for e in std::fs::read_dir(repo().join(dir)).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_none_or(|x| x != "tdsl") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let program = tdsl::compile(&text, &Default::default()).unwrap();
            let plan = tdsl::plan::lower::plan_program(&program).unwrap();
            for k in &plan.loops.kernels {
                let s = k.source.unwrap_or_else(|| {
                    panic!("{}: kernel {} has no source", path.display(), k.name)
                });
                assert!(
                    s.start < s.end && s.end as usize <= text.len(),
                    "{}: {s:?}",
                    path.display()
                );
                if let Some(i) = s.statement {
                    let a = &program.assigns[i as usize];
                    assert!(
                        k.origin.starts_with(&a.name),
                        "{}: kernel {} ({}) says statement {}",
                        path.display(),
                        k.name,
                        k.origin,
                        a.name
                    );
                    assert!(
                        a.span.start <= s.start && s.end <= a.span.end,
                        "{}",
                        path.display()
                    );
                }
            }
        }
    }
}

/// Loops that read a buffer, counted over a kernel: a rough "passes over the data" measure.
fn loops_reading(stmts: &[Stmt], buf: u32) -> usize {
    let mut n = 0;
    for s in stmts {
        if let Stmt::Loop(l) = s {
            let direct = l.body.iter().any(|s| match s {
                Stmt::Update { value, .. } | Stmt::Store { value, .. } => expr_reads(value, buf),
                _ => false,
            });
            n += usize::from(direct) + loops_reading(&l.body, buf);
        }
    }
    n
}

fn expr_reads(e: &tdsl_loop::Expr, buf: u32) -> bool {
    let mut found = false;
    e.visit(&mut |x| {
        if let tdsl_loop::Expr::Load { buf: b, .. } = x {
            found |= b.0 == buf;
        }
    });
    found
}

#[test]
fn fused_row_dot_is_one_pass() {
    let (plan, _) = plan_text(&repo().join("bench/rowdot.tdsl"));
    assert_eq!(plan.loops.kernels.len(), 1, "one kernel");
    let body = &plan.loops.kernels[0].body;
    assert_eq!(loops_reading(body, 0), 1, "x is read in one pass");
    assert_eq!(loops_reading(body, 1), 1, "y is read in one pass");
}

#[test]
fn softmax_reads_its_input_in_two_passes() {
    let (plan, _) = plan_text(&repo().join("bench/softmax.tdsl"));
    assert_eq!(
        plan.loops.kernels.len(),
        1,
        "one kernel, no intermediate buffers"
    );
    assert!(plan
        .loops
        .buffers
        .iter()
        .all(|b| b.role != tdsl_loop::Role::Temp));
    // The sum's loop stores each `exp` where the result goes; the write reads it back.
    let body = &plan.loops.kernels[0].body;
    assert_eq!(loops_reading(body, 0), 2, "max, sum of exp");
    assert_eq!(loops_reading(body, 1), 2, "sum of exp, write");
}

#[test]
fn matrix_products_become_gemm_calls() {
    for name in ["gemm_1024", "bmm", "attn_scores", "chain"] {
        let (plan, _) = plan_text(&repo().join(format!("bench/{name}.tdsl")));
        let gemms = plan
            .loops
            .kernels
            .iter()
            .flat_map(|k| &k.body)
            .filter(|s| matches!(s, Stmt::Call(LibCall::Gemm { .. })))
            .count();
        assert!(gemms >= 1, "{name} uses GEMM");
        assert!(
            plan.loops.kernels.iter().all(|k| k
                .body
                .iter()
                .all(|s| !matches!(s, Stmt::Loop(l) if !matches!(l.iter, Iter::Range { .. })))),
            "{name}: dense loops only"
        );
    }
}

#[test]
fn permutations_are_single_copy_kernels() {
    for name in ["permute_nhwc", "split_heads", "transpose"] {
        let (plan, _) = plan_text(&repo().join(format!("bench/{name}.tdsl")));
        assert_eq!(plan.loops.kernels.len(), 1, "{name}");
        assert_eq!(plan.loops.buffers.len(), 2, "{name}: no temporaries");
    }
}

/// Work on stored entries: format-keeping elementwise ops and a sampled product (SDDMM) are
/// loop nests over the compressed levels that write new values beside the operand's `ptr` and
/// `idx` (no `densify` before them); the snapshots pin the loop nests.
#[test]
fn sparse_stored_entry_plans() {
    for name in ["sparse_elementwise", "sparse_sddmm"] {
        let path = repo().join(format!("tests/corpus/{name}.tdsl"));
        let (plan, printed) = plan_text(&path);
        assert!(printed.contains("for v1 in compressed ptr="), "{printed}");
        // Only outputs are expanded, after the kernels that compute them.
        let first_densify = plan
            .loops
            .kernels
            .iter()
            .position(|k| matches!(k.body.as_slice(), [Stmt::Call(LibCall::Densify { .. })]));
        let first_levels = plan
            .loops
            .kernels
            .iter()
            .position(|k| print_kernel_has_levels(&plan.loops, k));
        assert!(
            first_levels < first_densify.or(Some(usize::MAX)),
            "{printed}"
        );
        insta::assert_snapshot!(format!("plan_corpus_{name}"), printed);
    }
}

fn print_kernel_has_levels(p: &tdsl_loop::LoopProgram, k: &tdsl_loop::Kernel) -> bool {
    tdsl_loop::print::print_kernel(p, k).contains("compressed")
}

/// Einsums whose operands differ in dtype (an f16 or bf16 weight times f32 activations, f32
/// times f64) are GEMM calls, not scalar loop nests, and agree with the interpreter.
#[test]
fn mixed_precision_einsums_are_gemms() {
    for (da, db) in [
        ("f32", "f16"),
        ("bf16", "f32"),
        ("f32", "f64"),
        ("f16", "bf16"),
    ] {
        let src = format!(
            "input x: {da}[b=20, i=40] = randn(seed=1)\ninput w: {db}[i, o=24] = randn(seed=2)\ny = einsum(x, w, \"b i, i o -> b o\")\noutput y\n"
        );
        let p = tdsl::compile(&src, &Default::default()).unwrap();
        let plan = tdsl::plan::lower::plan_program(&p).unwrap();
        let text = tdsl_loop::print::print_program(&plan.loops);
        assert!(text.contains("gemm m=20 n=24 k=40"), "{da} x {db}:\n{text}");
        let inputs = tdsl::bind::bind_inputs(&p, Default::default()).unwrap();
        let want = tdsl::interp::run(&p, &inputs);
        let shapes = vec![want[0].shape().to_vec()];
        let got = tdsl::runtime::run_jit(&plan, &inputs, &shapes).unwrap();
        for (g, w) in got[0].to_f64().iter().zip(want[0].to_f64()) {
            assert!(
                (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                "{da} x {db}: {g} vs {w}"
            );
        }
    }
}

/// A loop around a statement: its variables, its iterations (`u64::MAX`: as many as a sparse
/// operand stores) and the variables its position is computed from (a sparse level's).
struct Enclosing {
    vars: Vec<tdsl_loop::VarId>,
    extent: u64,
    from: Vec<tdsl_loop::VarId>,
}

/// The enclosing loops that repeat a fused reduction without changing it: for each `let` of an
/// accumulator, every loop around it of more than one iteration whose variables neither the
/// `let` nor the sibling loops that update the accumulator use.
fn repeated_reductions(stmts: &[Stmt], outer: &mut Vec<Enclosing>, found: &mut Vec<String>) {
    for (i, s) in stmts.iter().enumerate() {
        match s {
            Stmt::Loop(l) => {
                let terms = |ix: &tdsl_loop::Index| ix.terms.iter().map(|t| t.0).collect();
                let (vars, extent, from) = match &l.iter {
                    Iter::Range { extent } => (vec![l.var], *extent, vec![]),
                    Iter::Compressed {
                        coord, ptr_index, ..
                    } => (vec![l.var, *coord], u64::MAX, terms(ptr_index)),
                    Iter::TwoFour {
                        coord, meta_index, ..
                    } => (vec![l.var, *coord], u64::MAX, terms(meta_index)),
                    Iter::Singleton { pos_index, .. } => (vec![l.var], 1, terms(pos_index)),
                };
                outer.push(Enclosing { vars, extent, from });
                repeated_reductions(&l.body, outer, found);
                outer.pop();
            }
            Stmt::Let { acc, .. } => {
                let mut reduction = vec![s.clone()];
                reduction.extend(
                    stmts[i + 1..]
                        .iter()
                        .filter(|t| {
                            let mut updates = false;
                            t.visit(&mut |u| {
                                updates |= matches!(u, Stmt::Update { acc: a, .. } if a == acc);
                            });
                            updates
                        })
                        .cloned(),
                );
                if reduction.len() == 1 {
                    // A value named once (a hoisted expression), not a reduction.
                    continue;
                }
                // A used level of a sparse operand uses the loops its position comes from.
                let mut used = tdsl_loop::walk::stmt_vars(&reduction);
                for e in outer.iter().rev() {
                    if e.vars.iter().any(|v| used.contains(v)) {
                        used.extend(e.from.iter().copied());
                    }
                }
                for e in outer.iter() {
                    if e.extent > 1 && !e.vars.iter().any(|v| used.contains(v)) {
                        let v = e.vars[0].0;
                        found.push(format!("a{} repeated by the loop over v{v}", acc.0));
                    }
                }
            }
            _ => {}
        }
    }
}

/// A reduction fused into a kernel runs once per element of its result: no enclosing loop whose
/// variable it does not use repeats it. Fused into the loop over `b`, `x - mean(x over b)`
/// would read all of `x` once per row (quadratic work); such a reduction gets a buffer of its
/// own. Checked on the generated programs of every family and on the shapes that showed it.
#[test]
fn no_fused_reduction_is_repeated_by_a_loop_it_does_not_use() {
    let mut scripts = crate::diff::generated_scripts(150);
    scripts.extend([
        // Centring over the batch (batch norm's mean), and softmax over a middle axis.
        "input x: f32[b=64, c=32] = randn(seed=0)\ny = x - reduce(x, \"b c -> 1 c\", \"mean\")\noutput y\n".to_string(),
        "input x: f32[b=2, s=16, d=8] = randn(seed=0)\ne = exp(x - reduce(x, \"b s d -> b 1 d\", \"max\"))\ny = e / reduce(e, \"b s d -> b 1 d\", \"sum\")\noutput y\n".to_string(),
        // A reduction inside another's loop that does not use it.
        "input x: f32[i=8, j=16] = randn(seed=0)\ninput w: f32[k=4, j] = randn(seed=1)\ny = reduce(x * reduce(w, \"k j -> 1 j\", \"sum\"), \"i j -> i\", \"sum\")\noutput y\n".to_string(),
    ]);
    let (mut planned, mut bad) = (0, Vec::new());
    for script in &scripts {
        let Ok(program) = tdsl::compile(script, &Default::default()) else {
            continue;
        };
        let Ok(plan) = tdsl::plan::lower::plan_program(&program) else {
            continue;
        };
        planned += 1;
        // Fusion's reductions only: an einsum's kernels sum what its path leaves (a factor that
        // does not depend on a sampled entry's column is summed per entry), and a reduction
        // that is itself the kernel's value over a `repeat` sums once per repeated element.
        let fused = |o: &str| !o.contains("einsum") && !o.ends_with(": reduce");
        for k in plan.loops.kernels.iter().filter(|k| fused(&k.origin)) {
            let mut found = Vec::new();
            repeated_reductions(&k.body, &mut Vec::new(), &mut found);
            if !found.is_empty() {
                bad.push(format!(
                    "{script}\nkernel {} ({}): {found:?}\n{}",
                    k.name,
                    k.origin,
                    tdsl_loop::print::print_kernel(&plan.loops, k)
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} repeated:\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert!(planned >= 500, "{planned} of {} planned", scripts.len());
}

/// Whether an expression applies `sqrt` anywhere.
fn has_sqrt(e: &tdsl_loop::Expr) -> bool {
    let mut found = false;
    e.visit(&mut |x| found |= matches!(x, tdsl_loop::Expr::Unary(tdsl_loop::UnOp::Sqrt, _)));
    found
}

/// A costly function of a broadcast operand runs once per element of that operand, not once per
/// element of the result: batch norm's `sqrt(var + eps)` is a kernel over the channels, and the
/// normalisation over the batch divides by its result. Layer norm's `sqrt` of a row's variance
/// (an accumulator) stays in the row's kernel, computed once per row by the loop passes.
#[test]
fn costly_functions_of_broadcast_operands_run_once_per_element() {
    let (plan, printed) = plan_text(&repo().join("bench/layers/batchnorm.tdsl"));
    let mut sqrt_stores = Vec::new();
    for k in &plan.loops.kernels {
        k.body.iter().for_each(|s| {
            s.visit(&mut |s| {
                if let Stmt::Store { buf, value, .. } = s {
                    if has_sqrt(value) {
                        sqrt_stores.push(plan.loops.buffer(*buf).elems);
                    }
                }
            })
        });
    }
    assert_eq!(sqrt_stores, vec![1024], "{printed}");
    let (plan, printed) = plan_text(&repo().join("bench/layers/layernorm.tdsl"));
    assert_eq!(plan.loops.kernels.len(), 1, "{printed}");
    let hoisted = plan.loops.kernels[0].body.iter().any(|s| {
        let mut found = false;
        s.visit(&mut |s| found |= matches!(s, Stmt::Let { init, .. } if has_sqrt(init)));
        found
    });
    assert!(hoisted, "{printed}");
}

/// A reduction over the outer axis of a matrix (`b c -> c`, batch norm's statistics) is cut
/// into parts along the rows, each summing a contiguous slab into its own partial result, then
/// the parts are combined in order: threads stream whole rows instead of every thread reading
/// every row in pieces.
#[test]
fn reductions_over_the_outer_axis_sum_slabs_of_rows_in_parts() {
    let (plan, printed) = plan_text(&repo().join("bench/layers/batchnorm.tdsl"));
    let origins: Vec<&str> = plan
        .loops
        .kernels
        .iter()
        .map(|k| k.origin.as_str())
        .collect();
    for stat in ["mu", "y"] {
        for step in [
            "reduce (parts init)",
            "reduce",
            "reduce (combine parts)",
            "reduce (mean)",
        ] {
            let want = format!("{stat}: {step}");
            assert!(origins.contains(&want.as_str()), "{want}\n{printed}");
        }
    }
    let parts = plan
        .loops
        .buffers
        .iter()
        .filter(|b| b.elems == 16 * 1024)
        .count();
    assert_eq!(parts, 2, "{printed}");
}

/// Softmax evaluates its `exp` once per element: the loop that sums a row's `exp(x − max)`
/// stores each value where the result goes, and the loop that divides by the sum reads it back
/// (`passes::reuse_stored_values`). With an f16 result the stored value would round, so the
/// second loop computes it again. A division by a power of two is a multiplication
/// (`passes::exact_reciprocals`).
#[test]
fn softmax_evaluates_its_exp_once_per_element() {
    let exps = |src: &str| {
        let p = tdsl::compile(src, &Default::default()).unwrap();
        let plan = tdsl::plan::lower::plan_program(&p).unwrap();
        tdsl_loop::verify::verify(&plan.loops).unwrap();
        let mut n = 0;
        for k in &plan.loops.kernels {
            k.body.iter().for_each(|s| {
                s.visit(&mut |s| {
                    for e in s.exprs() {
                        e.visit(&mut |x| {
                            n += matches!(x, tdsl_loop::Expr::Unary(tdsl_loop::UnOp::Exp, _))
                                as usize;
                            assert!(!matches!(
                                x,
                                tdsl_loop::Expr::Binary(tdsl_loop::BinOp::Div, _, c)
                                    if matches!(**c, tdsl_loop::Expr::Const(8.0))
                            ));
                        })
                    }
                })
            });
        }
        n
    };
    let softmax = |dt: &str| {
        format!(
            "input x: {dt}[h=2, s=64, t=96] = randn(seed=0)\nsc = x / 8\n\
             p = exp(sc - reduce(sc, \"h s t -> h s 1\", \"max\"))\n\
             y = p / reduce(p, \"h s t -> h s 1\", \"sum\")\noutput y\n"
        )
    };
    assert_eq!(exps(&softmax("f32")), 1);
    assert_eq!(exps(&softmax("f64")), 1);
    assert_eq!(exps(&softmax("f16")), 2);
    let (plan, printed) = plan_text(&repo().join("bench/layers/lm_softmax.tdsl"));
    let mut n = 0;
    plan.loops.kernels.iter().for_each(|k| {
        k.body.iter().for_each(|s| {
            s.visit(&mut |s| {
                s.exprs().iter().for_each(|e| {
                    e.visit(&mut |x| {
                        n += matches!(x, tdsl_loop::Expr::Unary(tdsl_loop::UnOp::Exp, _)) as usize
                    })
                })
            })
        })
    });
    assert_eq!(n, 1, "{printed}");
}

/// A reduction of a fused computation to single values (a loss) is cut into parts, a row
/// each, that run side by side, then combined in order: the parts kernel's loop is parallel, and
/// the results agree with the interpreter. The `exp` inside `lse`'s sum is not written to a
/// buffer of the whole input: the loss's sum over the vocabulary does not enclose it.
#[test]
fn reductions_to_single_values_run_in_parts_and_agree_with_the_interpreter() {
    let loss = "input logits: f32[n=64, v=2048] = randn(seed=0)\n\
                input onehot: f32[n, v] = rand(seed=1)\n\
                m = reduce(logits, \"n v -> n 1\", \"max\")\n\
                lse = log(reduce(exp(logits - m), \"n v -> n 1\", \"sum\")) + m\n\
                loss = reduce(reduce(onehot * (lse - logits), \"n v -> n\", \"sum\"), \"n -> 1\", \"mean\")\n\
                output loss\n";
    let peak = "input x: f64[a=96, b=1024] = randn(seed=2)\n\
                y = reduce(abs(x) * 2 - 1, \"a b -> 1\", \"max\")\noutput y\n";
    for src in [loss, peak] {
        let p = tdsl::compile(src, &Default::default()).unwrap();
        let plan = tdsl::plan::lower::plan_program(&p).unwrap();
        tdsl_loop::verify::verify(&plan.loops).unwrap();
        let printed = tdsl_loop::print::print_program(&plan.loops);
        let parts = plan
            .loops
            .kernels
            .iter()
            .find(|k| k.origin.ends_with("(parts)"))
            .unwrap_or_else(|| panic!("no parts kernel:\n{printed}"));
        // One part per row.
        let rows = p.inputs[0].ty.shape.extents()[0];
        match parts.body.as_slice() {
            [Stmt::Loop(l)] => {
                assert!(l.parallel, "{printed}");
                assert_eq!(l.iter, Iter::Range { extent: rows }, "{printed}");
            }
            _ => panic!("{printed}"),
        }
        let whole = p.inputs[0].ty.shape.extents().iter().product::<u64>();
        assert!(
            plan.loops
                .buffers
                .iter()
                .all(|b| b.role != tdsl_loop::Role::Temp || b.elems < whole),
            "{printed}"
        );
        let inputs = tdsl::bind::bind_inputs(&p, Default::default()).unwrap();
        let want = tdsl::interp::run(&p, &inputs);
        let got = tdsl::runtime::run_jit(&plan, &inputs, &[vec![1]]).unwrap();
        let (g, w) = (got[0].to_f64()[0], want[0].to_f64()[0]);
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "{g} against {w}\n{printed}"
        );
    }
}

/// An output that lays out a product's result as it lies (grouped-query attention's
/// `rearrange(o, "b s hk g d -> b s (hk g d)")`) is written by the product itself: no kernel
/// copies a temporary into it (`passes::forward_copies`), and no temporary is left unused.
#[test]
fn an_output_laid_out_as_a_product_lies_is_written_by_the_product() {
    let (plan, printed) = plan_text(&repo().join("tests/corpus/gqa_rebatch.tdsl"));
    let y = plan.output_bufs[0];
    let writers: Vec<_> = plan
        .loops
        .kernels
        .iter()
        .filter(|k| tdsl_loop::walk::stmt_reads_writes(&k.body).1.contains(&y))
        .collect();
    assert_eq!(writers.len(), 1, "{printed}");
    assert!(
        matches!(writers[0].body[..], [Stmt::Call(LibCall::Gemm { .. })]),
        "{printed}"
    );
    let mut used = std::collections::BTreeSet::new();
    for k in &plan.loops.kernels {
        used.extend(tdsl_loop::walk::stmt_buffers(&k.body));
    }
    assert_eq!(used.len(), plan.loops.buffers.len(), "{printed}");
}
