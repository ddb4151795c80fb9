//! The commands quoted in `README.md` and `docs/*.md` still work, the way
//! rustdoc runs the examples in doc comments.
//!
//! In each document, fenced blocks marked `sh` hold one command per line,
//! and blocks marked `console` hold commands after `$ ` followed by their
//! output; a line ending in `\` continues on the next. Every command runs,
//! whatever its program (`allocmux`, `env $(allocmux preload ...) CMD`,
//! `go tool pprof` against a live endpoint, `kill %1`): each block as one
//! bash script with job control, as a terminal would run the lines pasted
//! one after another, stopping at the first that fails; its background
//! jobs are stopped when it ends. The blocks of a document run in order,
//! in one temporary directory per document (so a profile one command
//! writes is there for the next), and documents run side by side, with the `allocmux` of this build first
//! on `PATH` and its embedded shim, as an installed one runs. A block that
//! runs `go`, or names a library under /usr/lib this machine lacks, is
//! skipped where it is missing (never under CI).
//! A block marked `no_run` (`sh,no_run`: an install, a long benchmark,
//! commands for the reader's own crate) is only checked: an `allocmux`
//! subcommand exists and `allocmux SUB --help` lists each of its flags;
//! `cargo` commands name packages, examples, benches and tests that
//! exist.
//!
//! Every repository path the documents, BENCHMARKS.md, scripts/README.md
//! and the crates' documentation name exists (`named_paths_exist`, which
//! reads files only): one that starts with a top-level directory
//! (`alloc-shim/src/hooks.rs`), a root file (`README.md`), a link's target.
//!
//! A failure names the document, the line and the command.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root: the CLI crate's parent.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the CLI crate is inside the workspace")
        .to_path_buf()
}

/// The documents whose commands are checked.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut docs = vec![root.join("README.md")];
    let mut in_docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    in_docs.sort();
    docs.extend(in_docs);
    docs
}

/// One command quoted in a document.
#[derive(Debug)]
struct Quoted {
    /// The block it is in, counted from 0 in the document.
    block: usize,
    /// 1-based line of the command's first line.
    line: usize,
    /// The command as a shell would read it (continuations joined).
    text: String,
    /// From a block marked `no_run`.
    no_run: bool,
}

/// The commands of the `sh` and `console` blocks of a Markdown text.
fn quoted_commands(markdown: &str) -> Vec<Quoted> {
    let mut out = Vec::new();
    // The open block's kind (`sh` or `console`) and no_run flag; `Some`
    // with kind "" for a block of another language, which is skipped.
    let mut block: Option<(&str, bool)> = None;
    let mut blocks = 0;
    // A command continued with a trailing backslash.
    let mut pending: Option<Quoted> = None;
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            if block.is_some() {
                block = None;
                blocks += 1;
                continue;
            }
            let mut tags = info.split(',').map(str::trim);
            let kind = match tags.next().unwrap_or("") {
                "sh" | "bash" | "shell" => "sh",
                "console" => "console",
                _ => "",
            };
            block = Some((kind, tags.any(|t| t == "no_run")));
            continue;
        }
        let Some((kind, no_run)) = block else {
            continue;
        };
        let command = if let Some(mut q) = pending.take() {
            q.text.push(' ');
            q.text.push_str(line.trim());
            q
        } else {
            let text = match kind {
                "sh" if !trimmed.is_empty() && !trimmed.starts_with('#') => trimmed,
                "console" => match trimmed.strip_prefix("$ ") {
                    Some(c) => c,
                    None => continue,
                },
                _ => continue,
            };
            Quoted {
                block: blocks,
                line: i + 1,
                text: text.to_string(),
                no_run,
            }
        };
        if let Some(head) = command.text.strip_suffix('\\') {
            pending = Some(Quoted {
                text: head.trim_end().to_string(),
                ..command
            });
        } else {
            out.push(command);
        }
    }
    out
}

/// Splits a command line into words as `sh` would for simple commands:
/// whitespace separates, single and double quotes group, a backslash
/// escapes. Enough to find the program and its flags.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                word.extend(chars.by_ref().take_while(|&c| c != '\''));
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The words of a command after its leading `NAME=value` assignments.
fn without_assignments(words: &[String]) -> &[String] {
    let n = words
        .iter()
        .take_while(|w| {
            w.split_once('=').is_some_and(|(name, _)| {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        })
        .count();
    &words[n..]
}

/// The workspace's packages, by the `name` of each member's `[package]`.
fn packages() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for entry in fs::read_dir(root()).unwrap() {
        let Ok(toml) = fs::read_to_string(entry.unwrap().path().join("Cargo.toml")) else {
            continue;
        };
        if let Some(package) = toml.split("[package]").nth(1) {
            let name = package
                .lines()
                .find_map(|l| l.trim().strip_prefix("name"))
                .and_then(|l| l.split('"').nth(1));
            names.extend(name.map(str::to_string));
        }
    }
    names
}

/// Whether some crate of the workspace has an example, bench or test
/// target of that name: `DIR/NAME.rs` (or `DIR/NAME/main.rs`), or one its
/// manifest declares (`[[test]]` and the like, `name = "NAME"`).
fn target_exists(dir: &str, name: &str) -> bool {
    let table = match dir {
        "examples" => "[[example]]",
        "benches" => "[[bench]]",
        _ => "[[test]]",
    };
    let declared = |manifest: &str| {
        let mut inside = false;
        manifest.lines().map(str::trim).any(|l| {
            if l.starts_with('[') {
                inside = l == table;
            }
            inside
                && l.strip_prefix("name")
                    .and_then(|v| v.split('"').nth(1))
                    .is_some_and(|n| n == name)
        })
    };
    fs::read_dir(root()).unwrap().any(|entry| {
        let krate = entry.unwrap().path();
        let d = krate.join(dir);
        d.join(format!("{name}.rs")).is_file()
            || d.join(name).join("main.rs").is_file()
            || fs::read_to_string(krate.join("Cargo.toml")).is_ok_and(|m| declared(&m))
    })
}

/// What is wrong with a `cargo` command: a package, example, bench or test
/// it names that the workspace does not have.
fn check_cargo(args: &[String]) -> Result<(), String> {
    let packages = packages();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, value) = match a.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (a.as_str(), None),
        };
        let kind = match flag {
            "-p" | "--package" => "package",
            "--example" => "examples",
            "--bench" => "benches",
            "--test" => "tests",
            "--path" => "path",
            "--" => break,
            _ => continue,
        };
        let Some(value) = value.or_else(|| it.next().cloned()) else {
            return Err(format!("`{flag}` without a value"));
        };
        let found = match kind {
            "package" => packages.contains(&value),
            "path" => root().join(&value).join("Cargo.toml").is_file(),
            dir => target_exists(dir, &value),
        };
        if !found {
            return Err(format!("the workspace has no {kind} `{value}`"));
        }
    }
    Ok(())
}

/// The help text of `allocmux SUB`, or why there is none.
fn help(sub: &str) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_allocmux"))
        .args([sub, "--help"])
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("`allocmux {sub}` is not a command"))
    }
}

/// Whether `help` lists `flag` (`-o` or `--force`) as an option, not as
/// the prefix of a longer one.
fn lists_flag(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(at, _)| {
        let before = help[..at].chars().next_back();
        let after = help[at + flag.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '-')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_')
    })
}

/// What is wrong with an `allocmux` command that is not run: its
/// subcommand, or a flag its help does not list.
fn check_allocmux(args: &[String]) -> Result<(), String> {
    let Some(sub) = args.first() else {
        return Err("no subcommand".into());
    };
    let help = help(sub)?;
    for a in args[1..].iter().take_while(|a| *a != "--") {
        if !a.starts_with('-') || a == "-" {
            continue;
        }
        let flag = a.split_once('=').map_or(a.as_str(), |(f, _)| f);
        if !lists_flag(&help, flag) {
            return Err(format!("`allocmux {sub}` has no option `{flag}`"));
        }
    }
    Ok(())
}

/// Whether `go` can be run here.
fn have_go() -> bool {
    Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs the commands of one block as one bash script in `dir`; the line
/// of the command that failed, and why.
fn run_block(commands: &[&Quoted], dir: &Path, cache: &Path) -> Result<(), (usize, String)> {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_allocmux")).parent().unwrap();
    let path = std::env::join_paths(std::iter::once(bin_dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let marks = tempfile::tempdir().unwrap();
    let mark = marks.path().join("line");
    // Job control (`set -m`): `cmd &` is a job of its own, `kill %1`
    // signals all of it, and at the end every job still running is
    // stopped, whole. A job the block stopped itself may still be listed
    // then: its failed `kill` is no failure of the block (`|| true`, under
    // `set -e`).
    let mut script = String::from(
        "set -em\ntrap 'for j in $(jobs -p); do kill -TERM -- -$j 2>/dev/null || true; done; wait' EXIT\n",
    );
    for q in commands {
        let mut text = q.text.clone();
        // The demo at its full size takes minutes with the unoptimised
        // workload of a test build; a smaller size runs the same steps.
        if words(&text).get(1).is_some_and(|w| w == "demo") {
            text.push_str(" --size 20000 --rounds 6");
        }
        script.push_str(&format!("echo {} > \"$DOCS_LINE_FILE\"\n{text}\n", q.line));
    }
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(&script).current_dir(dir);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ALLOCMUX_") {
            cmd.env_remove(name);
        }
    }
    let out = cmd
        .env("PATH", path)
        .env("XDG_CACHE_HOME", cache)
        .env("PPROF_TMPDIR", dir)
        .env("DOCS_LINE_FILE", &mark)
        .output()
        .unwrap();
    if out.status.success() {
        return Ok(());
    }
    let line = fs::read_to_string(&mark)
        .ok()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(commands[0].line);
    Err((
        line,
        format!(
            "exited with {}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

/// Checks a command without running it: the `allocmux` subcommand and
/// flags it names, the `cargo` targets.
fn check(q: &Quoted) -> Result<(), String> {
    let words = words(&q.text);
    let command = without_assignments(&words);
    match command.first().map(String::as_str) {
        Some("allocmux") => check_allocmux(&command[1..]),
        Some("cargo") => check_cargo(&command[1..]),
        _ => Ok(()),
    }
}

/// The repository's top level, fixed by the design: a path a document
/// names is one of the repository's when it starts with one of these
/// directories (`alloc-shim/src/hooks.rs`), or is one of [`ROOT_FILES`].
/// Fixed rather than read from the tree, so that a directory that goes
/// away fails the paths that name it instead of no longer seeing them.
const TOP_DIRS: [&str; 7] = [
    ".ci",
    "alloc-shim",
    "docs",
    "flamegraph",
    "profiler",
    "scripts",
    "workloads",
];

/// The files at the root of the repository. A name that looks like one
/// (capitalised, `.md`: `CHANGELOG.md`) must be one of them.
const ROOT_FILES: [&str; 6] = [
    "BENCHMARKS.md",
    "Cargo.lock",
    "Cargo.toml",
    "LICENSE-APACHE",
    "LICENSE-MIT",
    "README.md",
];

/// The texts whose repository paths are checked: the documents, and the
/// other Markdown files that quote figures and scripts, and the crate
/// documentation (`//!`) of every crate's `src/lib.rs`.
fn path_documents() -> Vec<PathBuf> {
    let root = root();
    let mut docs = documents();
    docs.push(root.join("BENCHMARKS.md"));
    docs.push(root.join("scripts/README.md"));
    for top in TOP_DIRS {
        let top = root.join(top);
        let Ok(entries) = fs::read_dir(&top) else {
            continue;
        };
        let mut crates: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
        crates.push(top);
        crates.sort();
        docs.extend(
            crates
                .into_iter()
                .map(|c| c.join("src/lib.rs"))
                .filter(|l| l.is_file()),
        );
    }
    docs
}

/// Whether `c` can be part of a path as documents write them.
fn path_char(c: char) -> bool {
    c.is_alphanumeric() || "_-./*".contains(c)
}

/// The path that starts at the beginning of `text`, as far as it goes:
/// `{a,b}` alternatives are expanded (`backend/{system,jemalloc}`), and a
/// final `.` or `/` (the end of a sentence, a directory) is dropped.
fn path_at(text: &str) -> Vec<String> {
    let mut paths = vec![String::new()];
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if path_char(c) {
            paths.iter_mut().for_each(|p| p.push(c));
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let group = rest
            .strip_prefix('{')
            .and_then(|r| r.split_once('}'))
            .filter(|(g, _)| g.chars().all(|c| path_char(c) || c == ','));
        let Some((group, after)) = group else {
            break;
        };
        paths = paths
            .iter()
            .flat_map(|p| group.split(',').map(move |alt| format!("{p}{alt}")))
            .collect();
        rest = after;
    }
    paths
        .into_iter()
        .map(|p| p.trim_end_matches(['.', '/']).to_string())
        .collect()
}

/// Every repository path a text names, relative to the repository's root,
/// with its line: those that start with a top-level directory and the
/// root files, anywhere in the text (backticks, links, commands), and,
/// in Markdown, the targets of links, relative to `dir`, the document's
/// directory (other than web addresses and anchors).
fn named_paths(text: &str, dir: &Path, markdown: bool) -> Vec<(usize, String)> {
    let mut paths = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if !markdown && !line.trim_start().starts_with("//!") {
            continue;
        }
        for (at, c) in line.char_indices() {
            let before = line[..at].chars().next_back();
            if before.is_some_and(|b| path_char(b) || b == '{' || b == ',') {
                continue; // inside a word or a longer path: `target/docs/`
            }
            let rest = &line[at..];
            let rooted = TOP_DIRS
                .iter()
                .any(|top| rest.strip_prefix(top).is_some_and(|r| r.starts_with('/')));
            let found = path_at(rest);
            if rooted {
                paths.extend(found.into_iter().map(|p| (i + 1, p)));
            } else if c.is_ascii_uppercase() {
                // A root file by its name alone: `README.md`, `BENCHMARKS.md`
                // (but not a link's text, whose target is checked).
                let name = &found[0];
                let link_text = rest[name.len()..].starts_with("](");
                if !name.contains('/') && name.ends_with(".md") && !link_text {
                    paths.push((i + 1, name.clone()));
                }
            }
        }
        if !markdown {
            continue;
        }
        for (at, _) in line.match_indices("](") {
            let target: String = line[at + 2..].chars().take_while(|&c| c != ')').collect();
            let target = target.split('#').next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            // Lexically, as a browser resolves it: `../scripts/README.md`.
            let mut resolved = dir.to_path_buf();
            for part in target.split('/') {
                match part {
                    "." | "" => {}
                    ".." => {
                        resolved.pop();
                    }
                    part => resolved.push(part),
                }
            }
            paths.push((i + 1, resolved.display().to_string()));
        }
    }
    paths
}

/// Whether `path` (relative to the root) exists; a `*` in its last
/// component must match some entry (`docs/*.md`).
fn path_exists(path: &str) -> bool {
    let full = root().join(path);
    let Some((head, tail)) = path.rsplit_once('/').filter(|(_, t)| t.contains('*')) else {
        return !path.contains('*') && full.exists();
    };
    let (prefix, suffix) = tail.split_once('*').unwrap();
    fs::read_dir(root().join(head)).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.len() >= prefix.len() + suffix.len()
                && name.starts_with(prefix)
                && name.ends_with(suffix)
        })
    })
}

/// The repository paths a text names that do not exist, as failures of
/// the document `name`.
fn missing_paths(name: &str, text: &str, dir: &Path, markdown: bool) -> Vec<String> {
    named_paths(text, dir, markdown)
        .into_iter()
        .filter(|(_, p)| !path_exists(p))
        .map(|(line, p)| format!("{name}:{line}: `{p}` does not exist"))
        .collect()
}

/// A system library a block names (`-a NAME=/usr/lib/...`) that this
/// machine lacks: such a block is skipped, except under CI.
fn missing_library(block: &[&Quoted]) -> Option<String> {
    block
        .iter()
        .flat_map(|q| words(&q.text))
        .filter_map(|w| {
            let path = w.rsplit_once('=').map_or(w.as_str(), |(_, p)| p);
            (path.starts_with("/usr/lib/") && !Path::new(path).exists()).then(|| path.to_string())
        })
        .next()
}

/// Runs and checks the commands of one document; what failed, and how
/// many commands ran.
fn run_document(doc: &Path, cache: &Path, go: bool) -> (Vec<String>, usize) {
    let name = doc.strip_prefix(root()).unwrap().display().to_string();
    let text = fs::read_to_string(doc).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let quoted = quoted_commands(&text);
    let mut failures = Vec::new();
    let mut ran = 0;
    for q in &quoted {
        if let Err(why) = check(q) {
            failures.push(format!("{name}:{}: `{}`: {why}", q.line, q.text));
        }
    }
    let mut blocks: Vec<Vec<&Quoted>> = Vec::new();
    for q in quoted.iter().filter(|q| !q.no_run) {
        match blocks.last_mut() {
            Some(b) if b[0].block == q.block => b.push(q),
            _ => blocks.push(vec![q]),
        }
    }
    for block in blocks {
        if !go
            && block
                .iter()
                .any(|q| words(&q.text).iter().any(|w| w == "go"))
        {
            eprintln!("skipping {name}:{}: Go is not installed", block[0].line);
            continue;
        }
        if let Some(missing) = missing_library(&block) {
            assert!(
                std::env::var_os("CI").is_none(),
                "{name}:{}: CI must have {missing}",
                block[0].line
            );
            eprintln!(
                "skipping {name}:{}: {missing} is not installed",
                block[0].line
            );
            continue;
        }
        match run_block(&block, dir.path(), cache) {
            Ok(()) => ran += block.len(),
            Err((line, why)) => {
                let text = &block
                    .iter()
                    .find(|q| q.line == line)
                    .unwrap_or(&block[0])
                    .text;
                failures.push(format!("{name}:{line}: `{text}`: {why}"));
            }
        }
    }
    (failures, ran)
}

/// Documents are independent (a directory each, and no two documents use
/// the same port), and their commands spend most of their time waiting on
/// programs, servers and `sleep`: so they run side by side, a few at once,
/// each document's blocks still in order.
#[test]
fn quoted_commands_run() {
    const AT_ONCE: usize = 3;
    let cache = tempfile::tempdir().unwrap();
    let go = have_go();
    assert!(go || std::env::var_os("CI").is_none(), "CI must have Go");
    let docs = documents();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<(Vec<String>, usize)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..AT_ONCE)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(doc) = docs.get(i) else { break done };
                        done.push((i, run_document(doc, cache.path(), go)));
                    }
                })
            })
            .collect();
        let mut all: Vec<_> = workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        // Failures in the documents' order, whichever ran first.
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, r)| r).collect()
    });
    let failures: Vec<String> = results.iter().flat_map(|(f, _)| f.clone()).collect();
    let ran: usize = results.iter().map(|(_, n)| n).sum();
    assert!(
        failures.is_empty(),
        "{} quoted command(s) fail:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(
        ran > 0,
        "no command was run: are the documents' blocks marked?"
    );
}

#[test]
fn blocks_are_read_as_documented() {
    let md = "text\n```sh\n# a comment\nallocmux run -- true   # note\n```\n\
              ```console\n$ allocmux report a.prof \\\n    --top 3\noutput line\n```\n\
              ```sh,no_run\ncargo install allocmux-cli\n```\n```rust\nlet x = 1;\n```\n";
    let q = quoted_commands(md);
    let got: Vec<(usize, &str, bool)> = q
        .iter()
        .map(|q| (q.line, q.text.as_str(), q.no_run))
        .collect();
    assert_eq!(
        got,
        [
            (4, "allocmux run -- true   # note", false),
            (7, "allocmux report a.prof --top 3", false),
            (12, "cargo install allocmux-cli", true),
        ]
    );
    assert_eq!(
        words("A=1 allocmux run -a 'x y' \"q\\\"\" -- true # c"),
        ["A=1", "allocmux", "run", "-a", "x y", "q\"", "--", "true"]
    );
    assert_eq!(
        without_assignments(&words("A=1 B=x allocmux run")),
        ["allocmux", "run"]
    );
    assert!(lists_flag("  -o, --output <FILE>\n  --force", "--force"));
    assert!(!lists_flag("  --force-all", "--force"));
    assert!(check_cargo(&words("-p allocmux-nonexistent")).is_err());
    assert!(check_cargo(&words("-p allocmux-cli")).is_ok());
    // A test target declared in a manifest, and one a file makes.
    assert!(check_cargo(&words("test -p allocmux-cli --test integration")).is_ok());
    assert!(check_cargo(&words("test -p allocmux --test fuzz_profile")).is_ok());
    assert!(check_cargo(&words("test --test no_such_target")).is_err());
}

/// Every repository path the documents and the crates' documentation
/// name exists. Reads files only: no command runs.
#[test]
fn named_paths_exist() {
    let mut failures = Vec::new();
    let mut named = 0;
    for doc in path_documents() {
        let name = doc.strip_prefix(root()).unwrap();
        let dir = name.parent().unwrap();
        let text = fs::read_to_string(&doc).unwrap();
        let markdown = doc.extension().is_some_and(|e| e == "md");
        named += named_paths(&text, dir, markdown).len();
        failures.extend(missing_paths(
            &name.display().to_string(),
            &text,
            dir,
            markdown,
        ));
    }
    assert!(
        failures.is_empty(),
        "{} named path(s) do not exist:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The extractor sees the documents' paths at all.
    assert!(named > 100, "only {named} repository paths found");
}

/// The top-level directories the path check knows are the repository's:
/// each exists, and every workspace member is under one.
#[test]
fn top_dirs_are_the_repository() {
    for top in TOP_DIRS {
        assert!(root().join(top).is_dir(), "{top}/ is not in the repository");
    }
    for file in ROOT_FILES {
        assert!(
            root().join(file).is_file(),
            "{file} is not in the repository"
        );
    }
    let manifest = fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members = manifest.split("members = [").nth(1).unwrap();
    let members = members.split(']').next().unwrap();
    for member in members.split('"').skip(1).step_by(2) {
        let top = member.split('/').next().unwrap();
        assert!(
            TOP_DIRS.contains(&top),
            "{member}: `{top}/` is not in TOP_DIRS"
        );
    }
}

#[test]
fn paths_are_found_as_documented() {
    let text = "run `bash scripts/bench.sh`, see scripts/results/.\n\
                The hooks (`alloc-shim/src/hooks.rs:12`) and \
                `alloc-shim/src/backend/{system,jemalloc}`; not target/docs/x.\n\
                [guide](rust-workflow.md#budgets), [suite](../scripts/README.md), \
                [site](https://example.com/docs/x.md), README.md and CHANGELOG.md.\n\
                [NOTES.md](../scripts/NOTES.md)\n";
    let found: Vec<(usize, String)> = named_paths(text, Path::new("docs"), true);
    let expected = [
        (1, "scripts/bench.sh"),
        (1, "scripts/results"),
        (2, "alloc-shim/src/hooks.rs"),
        (2, "alloc-shim/src/backend/system"),
        (2, "alloc-shim/src/backend/jemalloc"),
        (3, "README.md"),
        (3, "CHANGELOG.md"),
        (3, "docs/rust-workflow.md"),
        (3, "scripts/README.md"),
        (4, "scripts/NOTES.md"),
    ];
    let mut found_sorted = found.clone();
    found_sorted.sort();
    let mut expected: Vec<(usize, String)> =
        expected.iter().map(|(l, p)| (*l, p.to_string())).collect();
    expected.sort();
    assert_eq!(found_sorted, expected);
    // A made-up path fails; a real one, a directory and a pattern pass.
    let missing = missing_paths(
        "x.md",
        "See `profiler/src/no_such_module.rs` and CHANGELOG.md; \
         `alloc-shim/src/hooks.rs`, `profiler/recorder/`, `docs/*.md`.",
        Path::new(""),
        true,
    );
    assert_eq!(
        missing,
        [
            "x.md:1: `profiler/src/no_such_module.rs` does not exist",
            "x.md:1: `CHANGELOG.md` does not exist",
        ]
    );
    assert!(!path_exists("docs/*.no_such_extension"));
    // Crate documentation: only its `//!` lines.
    let rust = "//! See `docs/made-up.md`.\nconst X: &str = \"docs/also-made-up.md\";\n";
    assert_eq!(
        named_paths(rust, Path::new("profiler/src"), false),
        [(1, "docs/made-up.md".to_string())]
    );
}
