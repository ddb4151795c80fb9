//! Figures in words: counts with separators, byte sizes, durations,
//! shares, command lines as a shell would take them back. Every renderer
//! (the text tables, the HTML page, the SVG titles) words its figures
//! with these.

/// A count with thousands separators.
#[derive(Debug)]
pub struct Count(pub u64);
impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0.to_string();
        let mut out = String::with_capacity(s.len() + s.len() / 3);
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        f.pad(&out)
    }
}

/// A byte count in binary units (the shared, allocation-free formatter).
pub use allocmux_format::ByteSize as Bytes;

/// A duration in ns, shown with a fitting unit.
#[derive(Debug)]
pub struct Dur(pub u64);
impl std::fmt::Display for Dur {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ns = self.0 as f64;
        let s = if ns >= 1e9 {
            format!("{:.2} s", ns / 1e9)
        } else if ns >= 1e6 {
            format!("{:.2} ms", ns / 1e6)
        } else if ns >= 1e3 {
            format!("{:.1} µs", ns / 1e3)
        } else {
            format!("{} ns", self.0)
        };
        f.pad(&s)
    }
}

/// `part / whole`, or 0 for nothing to share.
pub fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// A command line shown the way a shell would take it back.
pub fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty()
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `s` cut to `n` characters, the last one `…` when it was cut.
pub fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(['…']).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(Count(0).to_string(), "0");
        assert_eq!(Count(1234567).to_string(), "1,234,567");
        assert_eq!(Count(123).to_string(), "123");
        assert_eq!(Dur(1_500_000).to_string(), "1.50 ms");
        assert_eq!(format!("{:>6}", Count(1000)), " 1,000");
    }

    #[test]
    fn shell_quoting() {
        let a = ["python3", "-c", "print('hi')", ""].map(String::from);
        assert_eq!(shell_words(&a), r#"python3 -c 'print('\''hi'\'')' ''"#);
    }
}
