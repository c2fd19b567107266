//! `spec/errors.md` against the code and the binary.
//!
//! * The codes documented in the spec (its `### `code`` headings) are exactly `Code::ALL`, in
//!   the same order.
//! * Every example in the spec runs through the real `tdsl` binary, with the data files its
//!   `# file:` comments describe generated in a temporary directory, and fails with exit status 1,
//!   exactly the documented code, a `line:column` position for every diagnostic with a span, no
//!   panic and no output left behind.
//! * The rendered stderr of every example is an insta snapshot named after its code, so any
//!   change to a diagnostic's text is reviewed.
//! * Command-line misuse exits with status 2.

use crate::common::{repo, tdsl_in, CmdOut};
use std::collections::BTreeSet;
use std::path::Path;
use tdsl::Code;

/// Extra diagnostics some examples currently produce besides their own code: (example's code,
/// extra code). A wrong extent in an input declaration poisons the input, and the final "data was
/// given for an undeclared input" check then also fires for its (declared) name. The entry is
/// strict: once the cascade is fixed the test says so, and the entry should be removed.
const KNOWN_CASCADES: &[(&str, &str)] = &[];

fn spec_text() -> String {
    let path = repo().join("spec").join("errors.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// One `### `code`` section of the spec: the code and the lines up to the next heading.
struct Section {
    code: String,
    line: usize,
    body: Vec<String>,
}

/// The code sections of the spec, in order. Headings that start with `### ` but are not exactly
/// `### `tdsl::...`` are returned as errors.
fn sections(text: &str) -> (Vec<Section>, Vec<String>) {
    let mut out: Vec<Section> = Vec::new();
    let mut bad = Vec::new();
    let mut in_fence = false;
    let mut current: Option<Section> = None;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            in_fence = !in_fence;
        }
        let heading = !in_fence && line.starts_with('#');
        if heading {
            out.extend(current.take());
            if let Some(rest) = line.strip_prefix("### ") {
                match rest
                    .strip_prefix('`')
                    .and_then(|r| r.strip_suffix('`'))
                    .filter(|c| c.starts_with("tdsl::") && !c.contains(['`', ' ']))
                {
                    Some(code) => {
                        current = Some(Section {
                            code: code.to_string(),
                            line: i + 1,
                            body: Vec::new(),
                        })
                    }
                    None => bad.push(format!(
                        "spec/errors.md:{}: malformed code heading `{line}` (want ### `tdsl::...`)",
                        i + 1
                    )),
                }
            }
            continue;
        }
        if let Some(s) = &mut current {
            s.body.push(line.to_string());
        }
    }
    out.extend(current);
    (out, bad)
}

/// A data file an example needs: its name and what to put in it.
#[derive(Debug)]
struct Fixture {
    name: String,
    kind: String,
}

/// An example script of the spec and how to run it.
#[derive(Debug)]
struct Example {
    code: String,
    /// The subcommand and its arguments after the script.
    cmd: String,
    args: Vec<String>,
    files: Vec<Fixture>,
    script: String,
}

impl Example {
    fn command_line(&self) -> String {
        let mut s = format!("tdsl {} script.tdsl", self.cmd);
        for a in &self.args {
            s.push(' ');
            s.push_str(a);
        }
        s
    }

    /// The `--out DIR` argument, if any.
    fn out_dir(&self) -> Option<&str> {
        let i = self.args.iter().position(|a| a == "--out")?;
        self.args.get(i + 1).map(String::as_str)
    }
}

/// The example of a section: its one ```` ```tdsl ```` block and the directives in it.
fn example(s: &Section) -> Result<Example, String> {
    let mut blocks: Vec<Vec<&str>> = Vec::new();
    let mut open: Option<Vec<&str>> = None;
    for line in &s.body {
        match &mut open {
            None if line.trim_end() == "```tdsl" => open = Some(Vec::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.extend(open.take()),
            Some(b) => b.push(line),
        }
    }
    let where_ = format!("spec/errors.md:{} (`{}`)", s.line, s.code);
    if open.is_some() {
        return Err(format!("{where_}: unclosed ```tdsl block"));
    }
    let [block] = blocks.as_slice() else {
        return Err(format!(
            "{where_}: expected exactly one ```tdsl example, found {}",
            blocks.len()
        ));
    };
    let mut ex = Example {
        code: s.code.clone(),
        cmd: "check".to_string(),
        args: Vec::new(),
        files: Vec::new(),
        script: block.iter().map(|l| format!("{l}\n")).collect(),
    };
    for line in block {
        if let Some(rest) = line.strip_prefix("# cmd:") {
            let mut words = rest.split_whitespace().map(str::to_string);
            ex.cmd = words
                .next()
                .ok_or_else(|| format!("{where_}: `# cmd:` without a subcommand"))?;
            ex.args = words.collect();
        } else if let Some(rest) = line.strip_prefix("# file:") {
            let (name, kind) = rest.trim().split_once(": ").ok_or_else(|| {
                format!("{where_}: `# file:` wants `NAME: KIND ARGS`, got `{line}`")
            })?;
            ex.files.push(Fixture {
                name: name.trim().to_string(),
                kind: kind.trim().to_string(),
            });
        }
    }
    Ok(ex)
}

/// `4`, `2x4` → the dimensions.
fn dims(s: &str) -> Result<Vec<u64>, String> {
    s.split('x')
        .map(|d| {
            d.parse::<u64>()
                .map_err(|e| format!("bad shape `{s}`: {e}"))
        })
        .collect()
}

/// The little-endian encoding of the value 1 in a NumPy descr or safetensors dtype.
fn one(dtype: &str) -> Result<Vec<u8>, String> {
    Ok(match dtype {
        "<f4" | "F32" => 1f32.to_le_bytes().to_vec(),
        "<f8" | "F64" => 1f64.to_le_bytes().to_vec(),
        "<f2" | "F16" => half::f16::ONE.to_le_bytes().to_vec(),
        "<i4" | "I32" => 1i32.to_le_bytes().to_vec(),
        other => {
            return Err(format!(
                "fixture dtype `{other}` is not supported by this test"
            ))
        }
    })
}

/// `count` copies of the value 1 (nothing if `with_data` is false).
fn ones(dtype: &str, shape: &[u64], with_data: bool) -> Result<Vec<u8>, String> {
    let item = one(dtype)?;
    if !with_data {
        return Ok(Vec::new());
    }
    let count: u64 = shape.iter().product();
    Ok(item.repeat(count as usize))
}

/// A version 1.0 `.npy` file: magic, version, header padded to 64 bytes, then `data`.
fn npy(descr: &str, shape: &[u64], data: &[u8]) -> Vec<u8> {
    let tuple = match shape {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// A `.safetensors` file with one tensor: 8-byte header length, JSON header, then `data`.
fn safetensors(name: &str, dtype: &str, shape: &[u64], nbytes: usize, data: &[u8]) -> Vec<u8> {
    let header = serde_json::json!({
        name: { "dtype": dtype, "shape": shape, "data_offsets": [0, nbytes] }
    })
    .to_string();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// A scipy `.npz` csr matrix (as `scipy.sparse.save_npz` writes it, uncompressed) of the given
/// shape with int32 `indptr` and `indices` given as comma-separated lists and f32 ones as data.
fn npz_csr(shape: &[u64], indptr: &str, indices: &str) -> Result<Vec<u8>, String> {
    use std::io::Write;
    let list = |s: &str| -> Result<Vec<u8>, String> {
        let v = s
            .split(',')
            .map(|x| x.parse::<i32>().map_err(|e| format!("bad list `{s}`: {e}")))
            .collect::<Result<Vec<i32>, _>>()?;
        Ok(npy(
            "<i4",
            &[v.len() as u64],
            &v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
        ))
    };
    let nnz = indices.split(',').count() as u64;
    let shape_bytes: Vec<u8> = shape
        .iter()
        .flat_map(|&d| (d as i64).to_le_bytes())
        .collect();
    let members = [
        ("indices", list(indices)?),
        ("indptr", list(indptr)?),
        ("format", npy("|S3", &[], b"csr")),
        ("shape", npy("<i8", &[shape.len() as u64], &shape_bytes)),
        ("data", npy("<f4", &[nnz], &ones("<f4", &[nnz], true)?)),
    ];
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, bytes) in members {
        zip.start_file(
            format!("{name}.npy"),
            zip::write::SimpleFileOptions::default(),
        )
        .and_then(|()| zip.write_all(&bytes).map_err(Into::into))
        .map_err(|e| e.to_string())?;
    }
    Ok(zip.finish().map_err(|e| e.to_string())?.into_inner())
}

/// The bytes of a fixture of the kinds spec/errors.md describes.
fn fixture_bytes(kind: &str) -> Result<Vec<u8>, String> {
    let words: Vec<&str> = kind.split_whitespace().collect();
    match words.as_slice() {
        ["npy", descr, shape] | ["npy-header", descr, shape] => {
            let shape = dims(shape)?;
            let data = ones(descr, &shape, words[0] == "npy")?;
            Ok(npy(descr, &shape, &data))
        }
        ["safetensors", name, dtype, shape] | ["safetensors-header", name, dtype, shape] => {
            let shape = dims(shape)?;
            let nbytes = ones(dtype, &shape, true)?.len();
            let data = ones(dtype, &shape, words[0] == "safetensors")?;
            Ok(safetensors(name, dtype, &shape, nbytes, &data))
        }
        ["npz-csr", shape, indptr, indices] => npz_csr(&dims(shape)?, indptr, indices),
        ["text", rest @ ..] => Ok(format!("{}\n", rest.join(" ")).into_bytes()),
        _ => Err(format!("unknown fixture kind `{kind}`")),
    }
}

/// Runs an example in a fresh temporary directory; `json` adds `--message-format json`.
/// Returns the output and what the `--out` directory holds afterwards.
fn run_example(ex: &Example, json: bool) -> Result<(CmdOut, Vec<String>, String), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    for f in &ex.files {
        let bytes = fixture_bytes(&f.kind).map_err(|e| format!("`{}`: {e}", ex.code))?;
        std::fs::write(dir.path().join(&f.name), bytes).map_err(|e| e.to_string())?;
    }
    std::fs::write(dir.path().join("script.tdsl"), &ex.script).map_err(|e| e.to_string())?;
    let mut args: Vec<&str> = Vec::new();
    if json {
        args.extend(["--message-format", "json"]);
    }
    args.extend([ex.cmd.as_str(), "script.tdsl"]);
    args.extend(ex.args.iter().map(String::as_str));
    let out = tdsl_in(dir.path(), &args);
    let left = match ex.out_dir() {
        Some(d) => leftovers(&dir.path().join(d)),
        None => Vec::new(),
    };
    let scrubbed = scrub(&out.stderr, dir.path());
    Ok((out, left, scrubbed))
}

/// The entries of `dir`, if it is a directory.
fn leftovers(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Replaces the temporary directory's path (as given and canonical) by `[TMP]`.
fn scrub(s: &str, dir: &Path) -> String {
    let mut s = s.to_string();
    let mut paths = vec![dir.display().to_string()];
    if let Ok(c) = dir.canonicalize() {
        paths.push(c.display().to_string());
    }
    paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in paths {
        s = s.replace(&p, "[TMP]");
    }
    s
}

/// Problems with one example's run, or nothing.
fn check_example(ex: &Example) -> Result<String, Vec<String>> {
    let mut problems = Vec::new();
    let (human, left, stderr) = run_example(ex, false).map_err(|e| vec![e])?;
    let (json, _, _) = run_example(ex, true).map_err(|e| vec![e])?;
    let code = ex.code.as_str();
    if human.code != 1 {
        problems.push(format!("exit status {} instead of 1", human.code));
    }
    if !human.stderr.contains(code) {
        problems.push("stderr does not mention the code".to_string());
    }
    if !human.stdout.is_empty() {
        problems.push(format!("stdout is not empty: {}", human.stdout));
    }
    for (what, out) in [("human", &human), ("json", &json)] {
        if out.stderr.contains("panicked") {
            problems.push(format!("the {what} run panicked"));
        }
    }
    if !left.is_empty() {
        problems.push(format!(
            "the --out directory holds {left:?} after a failed run"
        ));
    }
    // What the JSON lines say: codes and positions.
    let mut codes = Vec::new();
    for line in json.stderr.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                problems.push(format!(
                    "a --message-format json line is not JSON ({e}): {line}"
                ));
                continue;
            }
        };
        let c = v["code"].as_str().unwrap_or("").to_string();
        let has_span = v["labels"].as_array().is_some_and(|l| !l.is_empty());
        if has_span {
            let (l, col) = (
                v["line"].as_u64().unwrap_or(0),
                v["column"].as_u64().unwrap_or(0),
            );
            let pos = format!("script.tdsl:{l}:{col}");
            if l == 0 || col == 0 {
                problems.push(format!("`{c}` has a span but position {l}:{col}"));
            } else if !human.stderr.contains(&pos) {
                problems.push(format!("`{c}` has a span but stderr lacks `{pos}`"));
            }
        }
        codes.push(c);
    }
    let own = codes.iter().filter(|c| *c == code).count();
    if own != 1 {
        problems.push(format!(
            "the code is reported {own} times, not once: {codes:?}"
        ));
    }
    let expected_extra: BTreeSet<&str> = KNOWN_CASCADES
        .iter()
        .filter(|(c, _)| *c == code)
        .map(|&(_, extra)| extra)
        .collect();
    let extra: BTreeSet<&str> = codes
        .iter()
        .map(String::as_str)
        .filter(|c| *c != code)
        .collect();
    if extra != expected_extra {
        if extra.is_superset(&expected_extra) {
            problems.push(format!("other codes reported too: {extra:?}"));
        } else {
            problems.push(format!(
                "KNOWN_CASCADES expects {expected_extra:?} besides the code, but the run reported {extra:?}; \
                 if a cascade was fixed, remove its entry"
            ));
        }
    }
    if problems.is_empty() {
        Ok(stderr)
    } else {
        Err(problems)
    }
}

#[test]
fn spec_documents_exactly_the_codes_in_order() {
    let (secs, mut problems) = sections(&spec_text());
    let documented: Vec<&str> = secs.iter().map(|s| s.code.as_str()).collect();
    let all: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
    let doc_set: BTreeSet<&str> = documented.iter().copied().collect();
    let all_set: BTreeSet<&str> = all.iter().copied().collect();
    for c in all_set.difference(&doc_set) {
        problems.push(format!("missing from spec/errors.md: `{c}`"));
    }
    for c in doc_set.difference(&all_set) {
        problems.push(format!("in spec/errors.md but not in Code::ALL: `{c}`"));
    }
    for s in &secs {
        if documented.iter().filter(|c| **c == s.code).count() > 1 {
            problems.push(format!(
                "spec/errors.md:{}: `{}` is documented more than once",
                s.line, s.code
            ));
        }
    }
    if problems.is_empty() && documented != all {
        problems.push(format!(
            "spec/errors.md lists the codes in another order than Code::ALL:\n  spec: {documented:?}\n  code: {all:?}"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_spec_example_fails_with_its_code() {
    let (secs, mut problems) = sections(&spec_text());
    let mut examples = Vec::new();
    for s in &secs {
        let untriggerable = s.body.iter().any(|l| l.contains("cannot be triggered"));
        match example(s) {
            Ok(ex) => examples.push(ex),
            Err(_) if untriggerable => {}
            Err(e) => problems.push(e),
        }
    }
    assert!(!examples.is_empty(), "no examples found in spec/errors.md");
    let mut rendered = Vec::new();
    for ex in &examples {
        // The unavailable-engine example runs on a machine that has a GPU.
        if ex.code == "tdsl::backend::unavailable" && crate::gpu::device().is_some() {
            continue;
        }
        match check_example(ex) {
            Ok(stderr) => rendered.push((ex, stderr)),
            Err(p) => problems.push(format!(
                "`{}` ({}):\n    {}\n  stderr:\n{}",
                ex.code,
                ex.command_line(),
                p.join("\n    "),
                run_example(ex, false).map(|r| r.2).unwrap_or_default()
            )),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for (ex, stderr) in rendered {
        insta::with_settings!({
            description => format!("{}\n\n{}", ex.command_line(), ex.script),
            omit_expression => true,
        }, {
            insta::assert_snapshot!(ex.code.replace("::", "__"), stderr);
        });
    }
}

#[test]
fn command_line_misuse_exits_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("script.tdsl"),
        "input x: f32[n=4] = zeros\noutput x\n",
    )
    .unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["frobnicate", "script.tdsl"], "unrecognized subcommand"),
        (
            &["check", "no_such_script.tdsl"],
            "cannot read script no_such_script.tdsl",
        ),
        (
            &["run", "script.tdsl", "--input", "x.npy"],
            "--input expects NAME=FILE",
        ),
        (
            &["check", "script.tdsl", "--input", "=x.npy"],
            "--input expects NAME=FILE",
        ),
        (
            &["check", "script.tdsl", "--no-such-flag"],
            "unexpected argument",
        ),
        (&["check"], "SCRIPT"),
    ];
    let mut problems = Vec::new();
    for (args, needle) in cases {
        let out = tdsl_in(dir.path(), args);
        let what = format!("tdsl {}", args.join(" "));
        if out.code != 2 {
            problems.push(format!("{what}: exit status {} instead of 2", out.code));
        }
        if !out.stderr.contains(needle) {
            problems.push(format!("{what}: stderr lacks `{needle}`:\n{}", out.stderr));
        }
        if out.stderr.contains("panicked") {
            problems.push(format!("{what}: panicked"));
        }
        if !out.stdout.is_empty() {
            problems.push(format!("{what}: stdout is not empty: {}", out.stdout));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
