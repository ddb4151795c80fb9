//! A small filter interpreter over log records, two ways.
//!
//! [`Boxed`] compiles an expression into a tree of `Box<dyn Fn>` closures
//! whose string values are owned `String`s: reading a field clones it,
//! `lower` and `concat` build new ones, so evaluating a filter allocates
//! several times per record. [`Program`] compiles the same expression into
//! a flat `Vec` of enum nodes (an arena, children by index) and evaluates
//! with borrowed strings, writing the few computed ones into one scratch
//! buffer reused across records: no allocation once it has grown.
//!
//! The expressions are trees as a parser would produce them; the helpers
//! in [`build`] write them compactly.

use std::ops::Range;

use crate::rng::{XorShift, mix};

/// A log record the filters read.
#[derive(Clone, Debug)]
pub struct Record {
    /// Service name, in whatever case the service reported it.
    pub service: String,
    /// HTTP method, likewise.
    pub method: String,
    /// Request path.
    pub path: String,
    /// HTTP status.
    pub status: i64,
    /// Latency in milliseconds.
    pub latency_ms: i64,
}

/// A field of a [`Record`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// `service` (a string).
    Service,
    /// `method` (a string).
    Method,
    /// `path` (a string).
    Path,
    /// `status` (an integer).
    Status,
    /// `latency_ms` (an integer).
    LatencyMs,
}

/// A filter expression. Values are booleans, integers or strings; an
/// operation on the wrong kind of value gives `false` (or, for `lower` and
/// `concat`, treats it as the empty string) rather than an error.
#[derive(Clone, Debug)]
pub enum Expr {
    /// A field of the record.
    Field(Field),
    /// A string literal.
    Str(String),
    /// An integer literal.
    Int(i64),
    /// ASCII lower case of a string.
    Lower(Box<Expr>),
    /// Two strings joined.
    Concat(Box<Expr>, Box<Expr>),
    /// Equal values of the same kind.
    Eq(Box<Expr>, Box<Expr>),
    /// Integer greater-than.
    Gt(Box<Expr>, Box<Expr>),
    /// The first string contains the second.
    Contains(Box<Expr>, Box<Expr>),
    /// The first string starts with the second.
    StartsWith(Box<Expr>, Box<Expr>),
    /// Both true (the second evaluated only if the first is).
    And(Box<Expr>, Box<Expr>),
    /// Either true (the second evaluated only if the first is false).
    Or(Box<Expr>, Box<Expr>),
    /// Not true.
    Not(Box<Expr>),
}

/// Short constructors for [`Expr`] trees.
pub mod build {
    use super::{Expr, Field};

    /// A field.
    pub fn field(f: Field) -> Expr {
        Expr::Field(f)
    }
    /// A string literal.
    pub fn s(v: &str) -> Expr {
        Expr::Str(v.to_owned())
    }
    /// An integer literal.
    pub fn int(v: i64) -> Expr {
        Expr::Int(v)
    }
    /// `lower(a)`.
    pub fn lower(a: Expr) -> Expr {
        Expr::Lower(Box::new(a))
    }
    /// `concat(a, b)`.
    pub fn concat(a: Expr, b: Expr) -> Expr {
        Expr::Concat(Box::new(a), Box::new(b))
    }
    /// `a == b`.
    pub fn eq(a: Expr, b: Expr) -> Expr {
        Expr::Eq(Box::new(a), Box::new(b))
    }
    /// `a > b`.
    pub fn gt(a: Expr, b: Expr) -> Expr {
        Expr::Gt(Box::new(a), Box::new(b))
    }
    /// `contains(a, b)`.
    pub fn contains(a: Expr, b: Expr) -> Expr {
        Expr::Contains(Box::new(a), Box::new(b))
    }
    /// `starts_with(a, b)`.
    pub fn starts_with(a: Expr, b: Expr) -> Expr {
        Expr::StartsWith(Box::new(a), Box::new(b))
    }
    /// `a && b`.
    pub fn and(a: Expr, b: Expr) -> Expr {
        Expr::And(Box::new(a), Box::new(b))
    }
    /// `a || b`.
    pub fn or(a: Expr, b: Expr) -> Expr {
        Expr::Or(Box::new(a), Box::new(b))
    }
    /// `!a`.
    pub fn not(a: Expr) -> Expr {
        Expr::Not(Box::new(a))
    }
}

/// The filters the workload runs, as text and as trees.
pub fn filters() -> Vec<(&'static str, Expr)> {
    use Field::*;
    use build::*;
    vec![
        (
            r#"lower(service) == "checkout" && latency_ms > 250"#,
            and(
                eq(lower(field(Service)), s("checkout")),
                gt(field(LatencyMs), int(250)),
            ),
        ),
        (
            r#"contains(concat(method, path), "GET/api") || status > 499"#,
            or(
                contains(concat(field(Method), field(Path)), s("GET/api")),
                gt(field(Status), int(499)),
            ),
        ),
        (
            r#"!starts_with(lower(path), "/static") && contains(concat(concat(service, ":"), lower(method)), "search:get")"#,
            and(
                not(starts_with(lower(field(Path)), s("/static"))),
                contains(
                    concat(concat(field(Service), s(":")), lower(field(Method))),
                    s("search:get"),
                ),
            ),
        ),
        (
            r#"status == 404 || (starts_with(lower(path), "/admin") && !(lower(method) == "get"))"#,
            or(
                eq(field(Status), int(404)),
                and(
                    starts_with(lower(field(Path)), s("/admin")),
                    not(eq(lower(field(Method)), s("get"))),
                ),
            ),
        ),
    ]
}

/// Generated records, mixed case and all.
pub fn records(n: usize, seed: u64) -> Vec<Record> {
    let mut r = XorShift::new(seed);
    let services = [
        "checkout",
        "Checkout",
        "search",
        "Search",
        "cart",
        "auth",
        "inventory",
    ];
    let methods = ["GET", "get", "POST", "PUT", "DELETE", "Get"];
    let paths = [
        "/api/v2/items/",
        "/api/v1/users/",
        "/static/app.",
        "/Static/img/",
        "/admin/users/",
        "/ADMIN/audit/",
        "/health",
    ];
    let statuses = [200, 200, 200, 200, 201, 204, 301, 404, 500, 503];
    let pick = |r: &mut XorShift, n: usize| r.below(n as u64) as usize;
    (0..n)
        .map(|_| Record {
            service: services[pick(&mut r, services.len())].to_owned(),
            method: methods[pick(&mut r, methods.len())].to_owned(),
            path: format!("{}{}", paths[pick(&mut r, paths.len())], r.below(100_000)),
            status: statuses[pick(&mut r, statuses.len())],
            latency_ms: r.size(1, 2_000) as i64,
        })
        .collect()
}

/// A value of the boxed interpreter: strings owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A string.
    Str(String),
}

impl Value {
    fn truthy(&self) -> bool {
        matches!(self, Value::Bool(true))
    }

    fn into_string(self) -> String {
        match self {
            Value::Str(s) => s,
            _ => String::new(),
        }
    }
}

/// A compiled closure of the boxed interpreter.
type Node = Box<dyn Fn(&Record) -> Value>;

/// An expression compiled into boxed closures.
pub struct Boxed(Node);

impl std::fmt::Debug for Boxed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Boxed(..)")
    }
}

impl Boxed {
    /// Compiles `e`.
    pub fn compile(e: &Expr) -> Boxed {
        Boxed(compile_boxed(e))
    }

    /// Whether `r` passes the filter.
    #[inline(never)]
    pub fn matches(&self, r: &Record) -> bool {
        (self.0)(r).truthy()
    }

    /// The value of the expression for `r`.
    pub fn eval(&self, r: &Record) -> Value {
        (self.0)(r)
    }
}

fn compile_boxed(e: &Expr) -> Node {
    let strings = |a: &Expr, b: &Expr, f: fn(&str, &str) -> bool| -> Node {
        let (a, b) = (compile_boxed(a), compile_boxed(b));
        Box::new(move |r| match (a(r), b(r)) {
            (Value::Str(x), Value::Str(y)) => Value::Bool(f(&x, &y)),
            _ => Value::Bool(false),
        })
    };
    match e {
        Expr::Field(f) => match f {
            Field::Service => Box::new(|r| Value::Str(r.service.clone())),
            Field::Method => Box::new(|r| Value::Str(r.method.clone())),
            Field::Path => Box::new(|r| Value::Str(r.path.clone())),
            Field::Status => Box::new(|r| Value::Int(r.status)),
            Field::LatencyMs => Box::new(|r| Value::Int(r.latency_ms)),
        },
        Expr::Str(s) => {
            let s = s.clone();
            Box::new(move |_| Value::Str(s.clone()))
        }
        &Expr::Int(i) => Box::new(move |_| Value::Int(i)),
        Expr::Lower(a) => {
            let a = compile_boxed(a);
            Box::new(move |r| Value::Str(a(r).into_string().to_ascii_lowercase()))
        }
        Expr::Concat(a, b) => {
            let (a, b) = (compile_boxed(a), compile_boxed(b));
            Box::new(move |r| Value::Str(a(r).into_string() + &b(r).into_string()))
        }
        Expr::Eq(a, b) => {
            let (a, b) = (compile_boxed(a), compile_boxed(b));
            Box::new(move |r| Value::Bool(a(r) == b(r)))
        }
        Expr::Gt(a, b) => {
            let (a, b) = (compile_boxed(a), compile_boxed(b));
            Box::new(move |r| match (a(r), b(r)) {
                (Value::Int(x), Value::Int(y)) => Value::Bool(x > y),
                _ => Value::Bool(false),
            })
        }
        Expr::Contains(a, b) => strings(a, b, |x, y| x.contains(y)),
        Expr::StartsWith(a, b) => strings(a, b, |x, y| x.starts_with(y)),
        Expr::And(a, b) => {
            let (a, b) = (compile_boxed(a), compile_boxed(b));
            Box::new(move |r| Value::Bool(a(r).truthy() && b(r).truthy()))
        }
        Expr::Or(a, b) => {
            let (a, b) = (compile_boxed(a), compile_boxed(b));
            Box::new(move |r| Value::Bool(a(r).truthy() || b(r).truthy()))
        }
        Expr::Not(a) => {
            let a = compile_boxed(a);
            Box::new(move |r| Value::Bool(!a(r).truthy()))
        }
    }
}

/// An index into a [`Program`]'s nodes.
type Ix = u32;

/// A node of a [`Program`]: an [`Expr`] with children by index.
#[derive(Clone, Copy, Debug)]
enum Op {
    Field(Field),
    /// A string literal: a range of the program's literal text.
    Str(u32, u32),
    Int(i64),
    Lower(Ix),
    Concat(Ix, Ix),
    Eq(Ix, Ix),
    Gt(Ix, Ix),
    Contains(Ix, Ix),
    StartsWith(Ix, Ix),
    And(Ix, Ix),
    Or(Ix, Ix),
    Not(Ix),
}

/// A value of the arena interpreter: strings borrowed from the record or
/// the program, or a range of the scratch buffer.
#[derive(Clone, Debug)]
enum Val<'a> {
    Bool(bool),
    Int(i64),
    Borrowed(&'a str),
    Scratch(Range<usize>),
}

/// An expression compiled into a flat arena of enum nodes.
#[derive(Debug)]
pub struct Program {
    ops: Vec<Op>,
    literals: String,
    root: Ix,
}

/// The buffer a [`Program`] writes computed strings into; keep one and
/// reuse it.
#[derive(Debug, Default)]
pub struct Scratch(Vec<u8>);

impl Program {
    /// Compiles `e`.
    pub fn compile(e: &Expr) -> Program {
        let mut p = Program {
            ops: Vec::new(),
            literals: String::new(),
            root: 0,
        };
        p.root = p.add(e);
        p
    }

    fn add(&mut self, e: &Expr) -> Ix {
        let op = match e {
            Expr::Field(f) => Op::Field(*f),
            Expr::Str(s) => {
                let start = self.literals.len() as u32;
                self.literals.push_str(s);
                Op::Str(start, self.literals.len() as u32)
            }
            &Expr::Int(i) => Op::Int(i),
            Expr::Lower(a) => Op::Lower(self.add(a)),
            Expr::Concat(a, b) => Op::Concat(self.add(a), self.add(b)),
            Expr::Eq(a, b) => Op::Eq(self.add(a), self.add(b)),
            Expr::Gt(a, b) => Op::Gt(self.add(a), self.add(b)),
            Expr::Contains(a, b) => Op::Contains(self.add(a), self.add(b)),
            Expr::StartsWith(a, b) => Op::StartsWith(self.add(a), self.add(b)),
            Expr::And(a, b) => Op::And(self.add(a), self.add(b)),
            Expr::Or(a, b) => Op::Or(self.add(a), self.add(b)),
            Expr::Not(a) => Op::Not(self.add(a)),
        };
        self.ops.push(op);
        (self.ops.len() - 1) as Ix
    }

    /// Whether `r` passes the filter.
    #[inline(never)]
    pub fn matches(&self, r: &Record, scratch: &mut Scratch) -> bool {
        scratch.0.clear();
        matches!(self.eval_at(self.root, r, &mut scratch.0), Val::Bool(true))
    }

    /// The value of the expression for `r`, as a boxed-interpreter
    /// [`Value`] (allocating), for comparing the two.
    pub fn eval(&self, r: &Record, scratch: &mut Scratch) -> Value {
        scratch.0.clear();
        match self.eval_at(self.root, r, &mut scratch.0) {
            Val::Bool(b) => Value::Bool(b),
            Val::Int(i) => Value::Int(i),
            v => Value::Str(
                String::from_utf8(text(&v, &scratch.0).to_vec()).expect("UTF-8 in, UTF-8 out"),
            ),
        }
    }

    fn eval_at<'a>(&'a self, ix: Ix, r: &'a Record, scratch: &mut Vec<u8>) -> Val<'a> {
        let both = |this: &'a Program, a: Ix, b: Ix, scratch: &mut Vec<u8>| {
            let x = this.eval_at(a, r, scratch);
            let y = this.eval_at(b, r, scratch);
            (x, y)
        };
        match self.ops[ix as usize] {
            Op::Field(f) => match f {
                Field::Service => Val::Borrowed(&r.service),
                Field::Method => Val::Borrowed(&r.method),
                Field::Path => Val::Borrowed(&r.path),
                Field::Status => Val::Int(r.status),
                Field::LatencyMs => Val::Int(r.latency_ms),
            },
            Op::Str(s, e) => Val::Borrowed(&self.literals[s as usize..e as usize]),
            Op::Int(i) => Val::Int(i),
            Op::Lower(a) => {
                let v = self.eval_at(a, r, scratch);
                let start = scratch.len();
                push_text(scratch, &v);
                scratch[start..].make_ascii_lowercase();
                Val::Scratch(start..scratch.len())
            }
            Op::Concat(a, b) => {
                let (x, y) = both(self, a, b, scratch);
                let start = scratch.len();
                for v in [&x, &y] {
                    push_text(scratch, v);
                }
                Val::Scratch(start..scratch.len())
            }
            Op::Eq(a, b) => {
                let (x, y) = both(self, a, b, scratch);
                Val::Bool(match (&x, &y) {
                    (Val::Bool(p), Val::Bool(q)) => p == q,
                    (Val::Int(p), Val::Int(q)) => p == q,
                    _ if is_str(&x) && is_str(&y) => text(&x, scratch) == text(&y, scratch),
                    _ => false,
                })
            }
            Op::Gt(a, b) => match both(self, a, b, scratch) {
                (Val::Int(x), Val::Int(y)) => Val::Bool(x > y),
                _ => Val::Bool(false),
            },
            Op::Contains(a, b) => {
                let (x, y) = both(self, a, b, scratch);
                Val::Bool(
                    is_str(&x) && is_str(&y) && bytes_contain(text(&x, scratch), text(&y, scratch)),
                )
            }
            Op::StartsWith(a, b) => {
                let (x, y) = both(self, a, b, scratch);
                Val::Bool(
                    is_str(&x) && is_str(&y) && text(&x, scratch).starts_with(text(&y, scratch)),
                )
            }
            Op::And(a, b) => Val::Bool(
                truthy(&self.eval_at(a, r, scratch)) && truthy(&self.eval_at(b, r, scratch)),
            ),
            Op::Or(a, b) => Val::Bool(
                truthy(&self.eval_at(a, r, scratch)) || truthy(&self.eval_at(b, r, scratch)),
            ),
            Op::Not(a) => Val::Bool(!truthy(&self.eval_at(a, r, scratch))),
        }
    }
}

fn truthy(v: &Val<'_>) -> bool {
    matches!(v, Val::Bool(true))
}

fn is_str(v: &Val<'_>) -> bool {
    matches!(v, Val::Borrowed(_) | Val::Scratch(_))
}

/// The bytes of a string value (empty for other values).
fn text<'v>(v: &Val<'v>, scratch: &'v [u8]) -> &'v [u8] {
    match v {
        Val::Borrowed(s) => s.as_bytes(),
        Val::Scratch(range) => &scratch[range.clone()],
        _ => &[],
    }
}

/// Appends a string value to the scratch buffer (nothing for other values).
fn push_text(scratch: &mut Vec<u8>, v: &Val<'_>) {
    match v {
        Val::Borrowed(s) => scratch.extend_from_slice(s.as_bytes()),
        Val::Scratch(range) => scratch.extend_from_within(range.clone()),
        _ => {}
    }
}

/// Whether `needle` occurs in `haystack` (for UTF-8 strings, the same
/// answer as `str::contains`).
fn bytes_contain(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// Evaluates every filter on `n` records (cycling through 1024 generated
/// ones) and folds which matched.
fn run(n: u64, mut matches: impl FnMut(usize, &Record) -> bool, filters: usize) -> u64 {
    let recs = records(1024, 31);
    let mut sum = 0;
    for i in 0..n {
        let r = &recs[(i % recs.len() as u64) as usize];
        let mut bits = 0u64;
        for f in 0..filters {
            bits |= u64::from(matches(f, r)) << f;
        }
        sum = mix(sum, bits);
    }
    sum
}

/// `n` records through the filters compiled to boxed closures.
pub fn boxed(n: u64) -> u64 {
    let compiled: Vec<Boxed> = filters().iter().map(|(_, e)| Boxed::compile(e)).collect();
    run(n, |f, r| compiled[f].matches(r), compiled.len())
}

/// `n` records through the filters compiled to enum arenas.
pub fn enum_arena(n: u64) -> u64 {
    let compiled: Vec<Program> = filters().iter().map(|(_, e)| Program::compile(e)).collect();
    let mut scratch = Scratch::default();
    run(
        n,
        |f, r| compiled[f].matches(r, &mut scratch),
        compiled.len(),
    )
}

#[cfg(test)]
mod tests {
    use super::build::*;
    use super::*;

    fn record() -> Record {
        Record {
            service: "Search".into(),
            method: "Get".into(),
            path: "/Static/app.js".into(),
            status: 404,
            latency_ms: 300,
        }
    }

    #[test]
    fn both_interpreters_give_known_values() {
        use Field::*;
        let cases = [
            (lower(field(Service)), Value::Str("search".into())),
            (
                concat(field(Method), field(Path)),
                Value::Str("Get/Static/app.js".into()),
            ),
            (concat(field(Status), s("x")), Value::Str("x".into())),
            (
                lower(lower(concat(field(Service), field(Method)))),
                Value::Str("searchget".into()),
            ),
            (eq(field(Status), int(404)), Value::Bool(true)),
            (eq(field(Status), s("404")), Value::Bool(false)),
            (gt(field(LatencyMs), int(300)), Value::Bool(false)),
            (gt(field(Path), int(0)), Value::Bool(false)),
            (
                contains(lower(field(Path)), s("static/")),
                Value::Bool(true),
            ),
            (contains(field(Path), s("")), Value::Bool(true)),
            (starts_with(field(Path), s("/static")), Value::Bool(false)),
            (
                and(eq(field(Status), int(404)), not(field(Path))),
                Value::Bool(true),
            ),
            (or(field(Status), eq(s("a"), s("a"))), Value::Bool(true)),
        ];
        let mut scratch = Scratch::default();
        for (e, want) in cases {
            assert_eq!(Boxed::compile(&e).eval(&record()), want, "{e:?}");
            assert_eq!(
                Program::compile(&e).eval(&record(), &mut scratch),
                want,
                "{e:?}"
            );
        }
    }

    /// A random expression of at most the given depth.
    fn random_expr(r: &mut XorShift, depth: u32) -> Expr {
        use Field::*;
        if depth == 0 || r.below(4) == 0 {
            return match r.below(8) {
                0 => field(Service),
                1 => field(Method),
                2 => field(Path),
                3 => field(Status),
                4 => field(LatencyMs),
                5 => s(["get", "/api", "search", "", "Check"][r.below(5) as usize]),
                _ => int([0, 200, 404, 250][r.below(4) as usize]),
            };
        }
        let kind = r.below(10);
        let a = random_expr(r, depth - 1);
        if kind == 0 {
            return lower(a);
        }
        if kind == 1 {
            return not(a);
        }
        let b = random_expr(r, depth - 1);
        [concat, eq, gt, contains, starts_with, and, or, concat][(kind - 2) as usize](a, b)
    }

    #[test]
    fn both_interpreters_agree_on_random_expressions() {
        let mut r = XorShift::new(99);
        let recs = records(64, 5);
        let mut scratch = Scratch::default();
        let mut trues = 0;
        for _ in 0..500 {
            let e = random_expr(&mut r, 4);
            let (b, p) = (Boxed::compile(&e), Program::compile(&e));
            for rec in &recs {
                let want = b.eval(rec);
                trues += usize::from(want == Value::Bool(true));
                assert_eq!(p.eval(rec, &mut scratch), want, "{e:?} on {rec:?}");
                assert_eq!(p.matches(rec, &mut scratch), b.matches(rec));
            }
        }
        assert!(
            trues > 1_000,
            "only {trues} true results: the test is too weak"
        );
    }

    #[test]
    fn the_workload_filters_match_some_records_and_agree() {
        let recs = records(1024, 31);
        let mut scratch = Scratch::default();
        for (text, e) in filters() {
            let p = Program::compile(&e);
            let hits = recs.iter().filter(|r| p.matches(r, &mut scratch)).count();
            assert!((5..1000).contains(&hits), "{text}: {hits} of 1024");
        }
        assert_eq!(boxed(3_000), enum_arena(3_000));
    }
}
