//! The protobuf wire format, written by hand into buffers that grow
//! fallibly: shared by the pprof ([`crate::pprof`]) and OTLP
//! ([`crate::otlp`]) encoders. Out of memory, an encoder stops with
//! [`NoMemory`] and the process goes on.

/// There was no memory for the profile.
#[derive(Debug, PartialEq, Eq)]
pub struct NoMemory;

/// Wire type of a varint field.
const VARINT: u64 = 0;
/// Wire type of a fixed 64-bit field.
const I64: u64 = 1;
/// Wire type of a length-delimited field.
const LEN: u64 = 2;

/// The protobuf wire format, into a buffer that grows fallibly.
pub(crate) struct Pb<'a> {
    pub(crate) out: &'a mut Vec<u8>,
}

impl Pb<'_> {
    pub(crate) fn clear(&mut self) {
        self.out.clear();
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        self.out
    }

    pub(crate) fn raw(&mut self, b: &[u8]) -> Result<(), NoMemory> {
        self.out.try_reserve(b.len()).map_err(|_| NoMemory)?;
        self.out.extend_from_slice(b);
        Ok(())
    }

    pub(crate) fn varint(&mut self, v: u64) -> Result<(), NoMemory> {
        let mut b = [0u8; 10];
        let n = encode_varint(v, &mut b);
        self.raw(&b[..n])
    }

    /// A varint field (wire type 0); a zero value is left out, as
    /// proto3 does.
    pub(crate) fn varint_field(&mut self, field: u64, v: u64) -> Result<(), NoMemory> {
        if v == 0 {
            return Ok(());
        }
        self.varint_field_always(field, v)
    }

    /// A varint field written even if zero (a member of a `oneof`).
    pub(crate) fn varint_field_always(&mut self, field: u64, v: u64) -> Result<(), NoMemory> {
        self.varint(field << 3 | VARINT)?;
        self.varint(v)
    }

    /// A `fixed64` field (wire type 1, 8 bytes little-endian); zero is
    /// left out.
    pub(crate) fn fixed64_field(&mut self, field: u64, v: u64) -> Result<(), NoMemory> {
        if v == 0 {
            return Ok(());
        }
        self.varint(field << 3 | I64)?;
        self.raw(&v.to_le_bytes())
    }

    /// A length-delimited field (wire type 2), written even if empty
    /// (an empty string table entry is one).
    pub(crate) fn bytes_field(&mut self, field: u64, b: &[u8]) -> Result<(), NoMemory> {
        self.varint(field << 3 | LEN)?;
        self.varint(b.len() as u64)?;
        self.raw(b)
    }

    pub(crate) fn message(&mut self, field: u64, b: &[u8]) -> Result<(), NoMemory> {
        self.bytes_field(field, b)
    }

    /// Starts a length-delimited field (an embedded message, a packed
    /// repeated field) whose length is not known yet: its content is
    /// written next, in place, and [`end`](Self::end) with the position
    /// returned puts the length in front of it.
    pub(crate) fn begin(&mut self, field: u64) -> Result<usize, NoMemory> {
        self.varint(field << 3 | LEN)?;
        Ok(self.out.len())
    }

    /// Ends the field [`begin`](Self::begin) started at `start`: its
    /// content moves up to make room for its length. A field may hold
    /// others begun and ended inside it.
    pub(crate) fn end(&mut self, start: usize) -> Result<(), NoMemory> {
        let old = self.out.len();
        let mut b = [0u8; 10];
        let n = encode_varint((old - start) as u64, &mut b);
        self.out.try_reserve(n).map_err(|_| NoMemory)?;
        self.out.resize(old + n, 0); // within the room reserved
        self.out.copy_within(start..old, start + n);
        self.out[start..start + n].copy_from_slice(&b[..n]);
        Ok(())
    }
}

/// `v` as a varint into `b`; returns its length.
fn encode_varint(mut v: u64, b: &mut [u8; 10]) -> usize {
    let mut n = 0;
    loop {
        let low = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            b[n] = low;
            return n + 1;
        }
        b[n] = low | 0x80;
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_encoded_as_the_wire_format_says() {
        let mut buf = Vec::new();
        let mut pb = Pb { out: &mut buf };
        pb.varint_field(1, 0).unwrap(); // left out
        pb.varint_field(1, 300).unwrap();
        pb.varint_field_always(3, 0).unwrap();
        pb.fixed64_field(3, 1_700_000_000_000_000_000).unwrap();
        pb.bytes_field(5, b"").unwrap();
        assert_eq!(
            buf,
            [
                0x08, 0xac, 0x02, 0x18, 0x00, 0x19, 0x00, 0x00, 0x2a, 0x36, 0xfe, 0x9c, 0x97, 0x17,
                0x2a, 0x00
            ]
        );
    }

    /// A message begun and ended in place is the same as one written
    /// from a scratch buffer, lengths of more than one byte too.
    #[test]
    fn messages_written_in_place_get_their_length_in_front() {
        let inner: Vec<u8> = (0..200u8).collect();
        let mut expected = Vec::new();
        let mut pb = Pb { out: &mut expected };
        pb.varint_field(1, 7).unwrap();
        let mut nested = Vec::new();
        let mut n = Pb { out: &mut nested };
        n.bytes_field(2, &inner).unwrap();
        n.message(3, b"").unwrap();
        pb.message(4, &nested).unwrap();

        let mut buf = Vec::new();
        let mut pb = Pb { out: &mut buf };
        pb.varint_field(1, 7).unwrap();
        let outer = pb.begin(4).unwrap();
        let field = pb.begin(2).unwrap();
        pb.raw(&inner).unwrap();
        pb.end(field).unwrap();
        let empty = pb.begin(3).unwrap();
        pb.end(empty).unwrap();
        pb.end(outer).unwrap();
        assert_eq!(buf, expected);
    }
}
