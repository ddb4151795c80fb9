//! Percent escaping of paths and arguments: every byte but printable
//! ASCII (and `%` itself) is written as `%XX`.

use core::fmt::{self, Write};

/// Writes bytes with everything but printable ASCII (and `%`) as `%XX`.
pub(super) fn write_escaped<W: Write>(w: &mut W, bytes: &[u8]) -> fmt::Result {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if b.is_ascii_graphic() && b != b'%' {
            w.write_char(b as char)?;
        } else {
            w.write_char('%')?;
            w.write_char(HEX[(b >> 4) as usize] as char)?;
            w.write_char(HEX[(b & 15) as usize] as char)?;
        }
    }
    Ok(())
}

/// The bytes of a hex string (a build id), or `None` if it is not one.
pub(super) fn decode_hex(s: &str) -> Option<Vec<u8>> {
    // Digits only: `from_str_radix` would also take a sign ("+5").
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The bytes of an escaped word, or why it is not one.
pub(super) fn unescape(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let byte = s
                .get(i + 1..i + 3)
                .and_then(decode_hex)
                .ok_or_else(|| format!("bad escape in {s:?}"))?[0];
            // A path or an argument is a C string: it cannot hold a NUL.
            if byte == 0 {
                return Err(format!("a NUL byte in {s:?}"));
            }
            out.push(byte);
            i += 3;
        } else if b[i].is_ascii_graphic() {
            out.push(b[i]);
            i += 1;
        } else {
            // The writer escapes every other byte.
            return Err(format!("an unescaped byte {:#04x} in {s:?}", b[i]));
        }
    }
    Ok(out)
}
