//! [`ByteSize`]: byte counts in binary units, formatted without allocating.

/// A byte count shown in binary units ("512 B", "1.5 KiB", "2.0 GiB"),
/// honouring width and alignment. Formats without allocating, so the shim
/// can use it inside the host process.
#[derive(Clone, Copy, Debug)]
pub struct ByteSize(pub u64);

impl core::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        use core::fmt::Write;
        struct Buf([u8; 32], usize);
        impl Write for Buf {
            fn write_str(&mut self, s: &str) -> core::fmt::Result {
                let end = self.1 + s.len();
                self.0
                    .get_mut(self.1..end)
                    .ok_or(core::fmt::Error)?
                    .copy_from_slice(s.as_bytes());
                self.1 = end;
                Ok(())
            }
        }
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = self.0 as f64;
        let mut u = 0;
        while v >= 1024.0 && u + 1 < UNITS.len() {
            v /= 1024.0;
            u += 1;
        }
        let mut buf = Buf([0; 32], 0);
        if u == 0 {
            write!(buf, "{} B", self.0)?;
        } else {
            write!(buf, "{v:.1} {}", UNITS[u])?;
        }
        // Only ASCII was written.
        f.pad(core::str::from_utf8(&buf.0[..buf.1]).map_err(|_| core::fmt::Error)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes() {
        assert_eq!(ByteSize(1023).to_string(), "1023 B");
        assert_eq!(ByteSize(1536).to_string(), "1.5 KiB");
        assert_eq!(ByteSize(3 << 30).to_string(), "3.0 GiB");
        assert_eq!(format!("{:>8}", ByteSize(1536)), " 1.5 KiB");
        assert_eq!(ByteSize(u64::MAX).to_string(), "16777216.0 TiB");
    }
}
