//! Real programs behave exactly as without the shim under every backend
//! (same stdout, stderr and exit status), and leave a complete profile.
//!
//! A missing program is skipped with a message, except on CI (`CI` set),
//! where the test fails and names the package to install.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

/// The output of a run under the shim must equal the reference run's.
fn assert_same_output(what: &str, backend: &str, reference: &Output, got: &Output) {
    let mut diffs = Vec::new();
    if got.status.code() != reference.status.code()
        || got.status.success() != reference.status.success()
    {
        diffs.push(format!(
            "exit status: {} without the shim, {} under it",
            reference.status, got.status
        ));
    }
    if got.stdout != reference.stdout {
        diffs.push(format!(
            "stdout without the shim:\n{}\nstdout under it:\n{}",
            text(&reference.stdout),
            text(&got.stdout)
        ));
    }
    if got.stderr != reference.stderr {
        diffs.push(format!(
            "stderr without the shim:\n{}\nstderr under it:\n{}",
            text(&reference.stderr),
            text(&got.stderr)
        ));
    }
    assert!(
        diffs.is_empty(),
        "{what} under {backend} behaves differently:\n{}",
        diffs.join("\n")
    );
}

/// Every process ran on the chosen backend, and at least one exited
/// normally with a complete profile that counted mallocs.
fn assert_recorded(what: &str, backend: &str, profiles: &[(String, ProcessProfile)]) {
    let all = || {
        profiles
            .iter()
            .map(|(f, p)| format!("{f}: {}", summary(p)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        profiles.iter().all(|(_, p)| p.allocator == backend),
        "{what} under {backend}: a process used another backend:\n{}",
        all()
    );
    assert!(
        profiles
            .iter()
            .any(|(_, p)| p.state == State::Exited && p.totals.calls_of(Func::Malloc) > 0),
        "{what} under {backend}: no profile with state exited and mallocs counted ({} profiles):\n{}",
        profiles.len(),
        all()
    );
}

/// Runs the command made by `make` without the shim, then under each
/// backend, and compares.
fn same_under_every_backend(what: &str, make: impl Fn() -> Command, input: Option<&[u8]>) {
    let reference = run_reference(&mut make(), input);
    assert!(
        reference.status.success() && !reference.stdout.is_empty(),
        "{what} fails without the shim ({}), so this test cannot compare:\nstdout:\n{}\nstderr:\n{}",
        reference.status,
        text(&reference.stdout),
        text(&reference.stderr)
    );
    for backend in BACKENDS {
        let (out, profiles) = run_under_with(backend, &mut make(), &[], input);
        assert_same_output(what, backend, &reference, &out);
        assert_recorded(what, backend, &profiles);
    }
    // With call stacks recorded: unwinding through the program (JIT code
    // included) must not change what it does either. Sampling every 4 KiB
    // on average: the smallest program here (a bash pipeline) allocates
    // some tens of KiB in all, so it is sampled for all practical purposes
    // (at 64 KiB it sometimes was not, and the check below failed).
    for (backend, stacks) in [
        ("system", "exact"),
        ("jemalloc", "sample"),
        ("mimalloc", "exact"),
    ] {
        let (out, profiles) = run_under_with(
            backend,
            &mut make(),
            &[
                ("ALLOCMUX_STACKS", stacks),
                ("ALLOCMUX_SAMPLE_BYTES", "4096"),
            ],
            input,
        );
        let what = format!("{what} with {stacks} stacks");
        assert_same_output(&what, backend, &reference, &out);
        assert_recorded(&what, backend, &profiles);
        assert!(
            profiles.iter().any(|(_, p)| !p.stacks.stacks.is_empty()),
            "{what} under {backend}: no process recorded a stack"
        );
    }
}

#[test]
fn python() {
    let Some(python) = require("/usr/bin/python3", "python3") else {
        return;
    };
    let script = r#"
import hashlib, json
d = {str(i): {"v": i * i, "s": "x" * (i % 50), "l": list(range(i % 20))} for i in range(20000)}
t = json.dumps(d, sort_keys=True)
e = json.loads(t)
e.update({k + "!": v["v"] for k, v in list(e.items())[:5000]})
print(len(e), sum(len(k) for k in e), hashlib.sha256(t.encode()).hexdigest())
"#;
    same_under_every_backend(
        "python3",
        || {
            let mut c = Command::new(&python);
            c.args(["-c", script]);
            c
        },
        None,
    );
}

#[test]
fn bash_pipeline() {
    let Some(bash) = require("bash", "bash") else {
        return;
    };
    for (tool, package) in [
        ("seq", "coreutils"),
        ("sort", "coreutils"),
        ("head", "coreutils"),
        ("tr", "coreutils"),
    ] {
        if require(tool, package).is_none() {
            return;
        }
    }
    same_under_every_backend(
        "bash pipeline",
        || {
            let mut c = Command::new(&bash);
            c.args(["-c", "seq 1 20000 | sort -r | head -5 | tr 0-9 a-j"]);
            c
        },
        None,
    );
}

#[test]
fn perl() {
    let Some(perl) = require("perl", "perl") else {
        return;
    };
    let script = r#"
use Digest::MD5 qw(md5_hex);
my %h;
$h{"key$_"} = [$_, "v" x ($_ % 40)] for 1 .. 100000;
my %inv = map { $h{$_}[0] => $_ } keys %h;
delete $h{"key$_"} for grep { $_ % 3 == 0 } 1 .. 100000;
print scalar(keys %h), " ", scalar(keys %inv), " ",
    md5_hex(join ",", map { "$_=$h{$_}[1]" } sort keys %h), "\n";
"#;
    same_under_every_backend(
        "perl",
        || {
            let mut c = Command::new(&perl);
            c.args(["-e", script]);
            c
        },
        None,
    );
}

#[test]
fn sqlite3() {
    let Some(sqlite3) = require("sqlite3", "sqlite3") else {
        return;
    };
    let script = b"
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v INTEGER);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 5000)
  INSERT INTO t SELECT i, 'name' || i, (i * 7919) % 1000 FROM c;
CREATE INDEX tv ON t(v);
SELECT count(*), sum(v), count(DISTINCT v), max(length(name)) FROM t;
SELECT v, count(*), group_concat(id) FROM t WHERE v < 3 GROUP BY v ORDER BY v;
";
    same_under_every_backend(
        "sqlite3",
        || {
            let mut c = Command::new(&sqlite3);
            c.args(["-batch", ":memory:"]);
            c
        },
        Some(script),
    );
}

const C_SOURCE: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct node {
    struct node *next;
    char name[32];
};

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    struct node *head = NULL;
    for (int i = 0; i < argc * 100; i++) {
        struct node *n = malloc(sizeof *n);
        if (!n) return 1;
        snprintf(n->name, sizeof n->name, "node-%d", i);
        n->next = head;
        head = n;
    }
    char *names[16];
    int k = 0;
    for (struct node *n = head; n && k < 16; n = n->next) names[k++] = n->name;
    qsort(names, (size_t)k, sizeof names[0], cmp);
    printf("%s %s\n", names[0], argv[0]);
    return 0;
}
"#;

#[test]
fn gcc_compiles_the_same_object() {
    let Some(gcc) = require("gcc", "gcc") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.c"), C_SOURCE).unwrap();
    let gcc_to = |object: &str| {
        let mut c = Command::new(&gcc);
        c.current_dir(dir.path())
            .args(["-O2", "-frandom-seed=1", "-c", "hello.c", "-o", object]);
        c
    };
    let reference = run_reference(&mut gcc_to("reference.o"), None);
    assert!(
        reference.status.success(),
        "gcc fails without the shim: {}\n{}",
        reference.status,
        text(&reference.stderr)
    );
    let want = std::fs::read(dir.path().join("reference.o")).unwrap();
    for backend in BACKENDS {
        let object = format!("{backend}.o");
        let (out, profiles) = run_under_with(backend, &mut gcc_to(&object), &[], None);
        assert_same_output("gcc -c hello.c", backend, &reference, &out);
        let got = std::fs::read(dir.path().join(&object))
            .unwrap_or_else(|e| panic!("gcc under {backend} left no {object}: {e}"));
        assert!(
            got == want,
            "gcc under {backend} produced a different object file ({} bytes, reference {} bytes)",
            got.len(),
            want.len()
        );
        assert_recorded("gcc", backend, &profiles);
        // gcc runs cc1 and as: the driver and both tools leave profiles.
        assert!(
            profiles.len() >= 3,
            "gcc under {backend}: expected profiles of gcc, cc1 and as, got {}",
            profiles.len()
        );
    }
}

#[test]
fn git() {
    let Some(git) = require("git", "git") else {
        return;
    };
    // `git init`, an empty commit and `git log` in a fresh repository, each
    // step under the shim (or none of them, for the reference).
    let session = |backend: Option<&str>| -> String {
        let home = tempfile::tempdir().unwrap();
        let repo = home.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        let steps: [&[&str]; 3] = [
            &["init", "-q", "."],
            &[
                "-c",
                "user.name=a",
                "-c",
                "user.email=b",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "x",
            ],
            &["log", "--format=%s"],
        ];
        let mut last = None;
        for args in steps {
            let mut c = Command::new(&git);
            c.current_dir(&repo)
                .args(["-c", "gc.auto=0", "-c", "maintenance.auto=false"])
                .args(args)
                .env("HOME", home.path())
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null");
            let what = format!("git {}", args.join(" "));
            let out = match backend {
                None => run_reference(&mut c, None),
                Some(b) => {
                    let (out, profiles) = run_under_with(b, &mut c, &[], None);
                    assert_recorded(&what, b, &profiles);
                    out
                }
            };
            assert!(
                out.status.success(),
                "{what} failed under {}: {}\n{}",
                backend.unwrap_or("no shim"),
                out.status,
                text(&out.stderr)
            );
            last = Some(out);
        }
        String::from_utf8_lossy(&last.unwrap().stdout).into_owned()
    };
    let reference = session(None);
    assert_eq!(reference, "x\n", "git log without the shim");
    for backend in BACKENDS {
        assert_eq!(
            session(Some(backend)),
            reference,
            "git log output under {backend} differs from the run without the shim"
        );
    }
}

#[test]
fn cxx_threads() {
    if require("c++", "g++").is_none() {
        return;
    }
    let exe = compile_cxx("cxx_threads.cpp");
    same_under_every_backend(
        "cxx_threads",
        || {
            let mut c = Command::new(&exe);
            c.arg("500");
            c
        },
        None,
    );
}

#[test]
fn node() {
    let Some(node) = require("node", "nodejs") else {
        return;
    };
    let script = r#"
const m = new Map();
for (let i = 0; i < 50000; i++) m.set("k" + i, { i, s: "v".repeat(i % 30) });
const j = JSON.stringify([...m]);
const back = new Map(JSON.parse(j));
let h = 0;
for (let i = 0; i < j.length; i++) h = (h * 31 + j.charCodeAt(i)) >>> 0;
console.log(back.size, j.length, h);
"#;
    same_under_every_backend(
        "node",
        || {
            let mut c = Command::new(&node);
            c.args(["-e", script]);
            c
        },
        None,
    );
}

const JAVA_SOURCE: &str = r#"import java.util.HashMap;
import java.util.Map;

public class Hello {
    public static void main(String[] args) {
        Map<String, Integer> m = new HashMap<>();
        for (int i = 0; i < 20000; i++) m.put("k" + i, i * 3);
        long s = 0;
        for (int v : m.values()) s += v;
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < 1000; i++) b.append(i % 7);
        System.out.println(m.size() + " " + s + " " + b.toString().hashCode());
    }
}
"#;

#[test]
fn java() {
    let (Some(java), Some(javac)) = (
        require("java", "default-jdk-headless"),
        require("javac", "default-jdk-headless"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let classes: &Path = dir.path();
    std::fs::write(classes.join("Hello.java"), JAVA_SOURCE).unwrap();
    // Compile once, without the shim; only the program runs under it.
    let out = run_reference(
        Command::new(&javac)
            .arg("-d")
            .arg(classes)
            .arg(classes.join("Hello.java")),
        None,
    );
    assert!(
        out.status.success(),
        "javac failed: {}\n{}",
        out.status,
        text(&out.stderr)
    );
    same_under_every_backend(
        "java",
        || {
            let mut c = Command::new(&java);
            // No hsperfdata file in /tmp.
            c.arg("-XX:-UsePerfData")
                .arg("-cp")
                .arg(classes)
                .arg("Hello");
            c
        },
        None,
    );
}
