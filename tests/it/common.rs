//! Shared helpers: compile and run scripts through the library and through the `tdsl` binary.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use tdsl::check::Program;
use tdsl::{Diagnostics, Tensor};

/// Output of one `tdsl` invocation.
#[derive(Debug)]
pub struct CmdOut {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the `tdsl` binary with `args` in `dir`, without colours.
pub fn tdsl_in(dir: &Path, args: &[&str]) -> CmdOut {
    let out = Command::new(env!("CARGO_BIN_EXE_tdsl"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        // Predicted times are for the nominal machine, so snapshots do not depend on this one.
        .env("TDSL_MACHINE", "nominal")
        .output()
        .expect("the tdsl binary runs");
    CmdOut {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Writes `script` to `dir/script.tdsl` and runs `tdsl CMD script.tdsl ARGS...` there.
pub fn tdsl_script(dir: &Path, cmd: &str, script: &str, args: &[&str]) -> CmdOut {
    std::fs::write(dir.join("script.tdsl"), script).expect("write script");
    let mut all = vec![cmd, "script.tdsl"];
    all.extend_from_slice(args);
    tdsl_in(dir, &all)
}

/// The files of repository directory `dir` ending in `.ext`, sorted.
pub fn files_in(dir: &str, ext: &str) -> Vec<PathBuf> {
    let mut paths: Vec<_> = std::fs::read_dir(repo().join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    paths.sort();
    paths
}

/// Repository root (for examples/ and spec/).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Compiles a script with no bound data.
pub fn compile(src: &str) -> Result<Program, Diagnostics> {
    tdsl::compile(src, &Default::default())
}

/// Compiles and runs a script on its initialisers with the reference interpreter.
pub fn run(src: &str) -> Result<Vec<Tensor>, Diagnostics> {
    let p = compile(src)?;
    let inputs = tdsl::bind::bind_inputs(&p, Default::default())?;
    Ok(tdsl::interp::run(&p, &inputs))
}

/// The codes of a failed compile, in order.
pub fn codes(src: &str) -> Vec<&'static str> {
    match compile(src) {
        Ok(_) => Vec::new(),
        Err(d) => d.iter().map(|d| d.code.as_str()).collect(),
    }
}
