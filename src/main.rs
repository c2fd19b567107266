//! The `tdsl` binary: all of it lives in `tdsl::cli`.

/// Buffers aligned to cache lines (`tdsl::CacheLineAlloc`): wide loads never straddle two.
#[global_allocator]
static ALLOC: tdsl::CacheLineAlloc = tdsl::CacheLineAlloc;

fn main() -> std::process::ExitCode {
    tdsl::cli::main()
}
