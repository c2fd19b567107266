//! The `tdsl` binary: all of it lives in `tdsl::cli`.

fn main() -> std::process::ExitCode {
    tdsl::cli::main()
}
