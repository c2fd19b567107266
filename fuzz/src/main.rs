//! `tdsl-fuzz`: see README.md and `tdsl-fuzz --help`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tdsl_fuzz::engine::{self, Run};
use tdsl_fuzz::{Config, TARGETS};

const USAGE: &str = "\
usage: tdsl-fuzz TARGET [--runs N] [--seed S] [--max-len L] [--time SECS] [--trace]
                        [--corpus DIR] [--crashes DIR] [--quiet]
       tdsl-fuzz TARGET --replay FILE     run one input (a saved crash) with the normal panic output
       tdsl-fuzz TARGET --minimize FILE   shrink a crashing input; writes FILE.min
       tdsl-fuzz --seed-corpus [DIR]      (re)write the seed corpus (default: fuzz/corpus)
       tdsl-fuzz --list                   the targets

TARGET is one of the targets (--list) or `all` (each in turn). --runs: inputs per target
(default 10000; `1e6` and `1_000_000` work); --seed: the PRNG seed (default 1); --max-len:
longest input in bytes (default 4096 for text, 1 MiB for files); --time: stop a target after
this many seconds; --trace: write each input to crashes/TARGET-current before running it (what
is left there after an abort, such as a stack overflow, is the culprit).
Exit status: 0 clean, 1 a crash or hang was found, 2 bad usage.";

fn number(s: &str) -> Option<u64> {
    let s = s.replace('_', "");
    if let Ok(n) = s.parse() {
        return Some(n);
    }
    let f: f64 = s.parse().ok()?;
    (f >= 0.0 && f.fract() == 0.0 && f < 1.8e19).then_some(f as u64)
}

struct Args {
    target: Option<String>,
    cfg: Config,
    replay: Option<PathBuf>,
    minimize: Option<PathBuf>,
    seed_corpus: Option<Option<PathBuf>>,
    list: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        target: None,
        cfg: Config {
            progress: true,
            ..Config::default()
        },
        replay: None,
        minimize: None,
        seed_corpus: None,
        list: false,
    };
    let mut it = std::env::args().skip(1).peekable();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "--runs" => {
                a.cfg.runs = number(&value("--runs")?).ok_or("--runs: not a count")?;
            }
            "--seed" => a.cfg.seed = number(&value("--seed")?).ok_or("--seed: not a number")?,
            "--max-len" => {
                let n = number(&value("--max-len")?).ok_or("--max-len: not a count")?;
                a.cfg.max_len = Some(n as usize);
            }
            "--time" => {
                let s: f64 = value("--time")?
                    .parse()
                    .map_err(|_| "--time: not a number of seconds")?;
                a.cfg.time_limit = Some(Duration::from_secs_f64(s.max(0.0)));
            }
            "--trace" => a.cfg.trace = true,
            "--quiet" => a.cfg.progress = false,
            "--corpus" => a.cfg.corpus_dir = PathBuf::from(value("--corpus")?),
            "--crashes" => a.cfg.crash_dir = PathBuf::from(value("--crashes")?),
            "--replay" => a.replay = Some(PathBuf::from(value("--replay")?)),
            "--minimize" => a.minimize = Some(PathBuf::from(value("--minimize")?)),
            "--seed-corpus" => {
                let dir = it.next_if(|s| !s.starts_with('-')).map(PathBuf::from);
                a.seed_corpus = Some(dir);
            }
            "--list" => a.list = true,
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s if a.target.is_none() => a.target = Some(s.to_string()),
            s => return Err(format!("unexpected argument {s}")),
        }
    }
    Ok(a)
}

fn seed_corpus(dir: PathBuf) -> ExitCode {
    for t in &TARGETS {
        let d = dir.join(t.name);
        if let Err(e) = std::fs::create_dir_all(&d) {
            eprintln!("cannot create {}: {e}", d.display());
            return ExitCode::from(2);
        }
        let seeds = tdsl_fuzz::seeds::seeds(t.name);
        let bytes: usize = seeds.iter().map(|(_, b)| b.len()).sum();
        for (name, b) in &seeds {
            if let Err(e) = std::fs::write(d.join(name), b) {
                eprintln!("cannot write {}: {e}", d.join(name).display());
                return ExitCode::from(2);
            }
        }
        println!(
            "{}: {} seeds, {bytes} bytes in {}",
            t.name,
            seeds.len(),
            d.display()
        );
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if e.is_empty() {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if args.list {
        for t in &TARGETS {
            println!("{:12} {}", t.name, t.about);
        }
        return ExitCode::SUCCESS;
    }
    if let Some(dir) = args.seed_corpus {
        return seed_corpus(dir.unwrap_or_else(|| args.cfg.corpus_dir.clone()));
    }
    let Some(name) = args.target else {
        eprintln!("error: name a target\n\n{USAGE}");
        return ExitCode::from(2);
    };
    let targets: Vec<&'static tdsl_fuzz::Target> = if name == "all" {
        TARGETS.iter().collect()
    } else {
        match tdsl_fuzz::target(&name) {
            Some(t) => vec![t],
            None => {
                let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
                eprintln!(
                    "error: no target `{name}`; the targets are {}, all",
                    names.join(", ")
                );
                return ExitCode::from(2);
            }
        }
    };
    if let Some(file) = args.replay.as_ref().or(args.minimize.as_ref()) {
        let [t] = targets[..] else {
            eprintln!("error: --replay and --minimize take one target, not `all`");
            return ExitCode::from(2);
        };
        let input = match std::fs::read(file) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: cannot read {}: {e}", file.display());
                return ExitCode::from(2);
            }
        };
        if args.minimize.is_some() {
            return match engine::minimize(t, input.clone()) {
                Some((min, loc)) => {
                    let out = PathBuf::from(format!("{}.min", file.display()));
                    let _ = std::fs::write(&out, &min);
                    println!(
                        "{}: {} → {} bytes, still panicking at {loc}; written to {}",
                        t.name,
                        input.len(),
                        min.len(),
                        out.display()
                    );
                    ExitCode::SUCCESS
                }
                None => {
                    println!("{}: the input does not panic", t.name);
                    ExitCode::SUCCESS
                }
            };
        }
        let (r, dt) = engine::replay(t, input);
        return match r {
            Run::Done(o) => {
                println!(
                    "{}: no crash ({:.1} ms){}",
                    t.name,
                    dt.as_secs_f64() * 1e3,
                    o.internal
                        .map(|i| format!("; internal error: {i}"))
                        .unwrap_or_default()
                );
                if dt > args.cfg.hang {
                    println!(
                        "{}: a hang (over {:.1} s)",
                        t.name,
                        args.cfg.hang.as_secs_f64()
                    );
                    return ExitCode::from(1);
                }
                ExitCode::SUCCESS
            }
            Run::Panicked(_, msg) => {
                println!("{}: crash: {msg}", t.name);
                ExitCode::from(1)
            }
        };
    }
    let mut failed = false;
    for t in targets {
        let s = tdsl_fuzz::fuzz(t, &args.cfg);
        println!("{s}");
        println!("  {}", s.stages_line());
        for (path, what) in &s.findings {
            println!("  {}: {what}", path.display());
        }
        failed |= s.failed();
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
