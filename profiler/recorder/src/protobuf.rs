//! The protobuf wire format, written by hand into buffers that grow
//! fallibly: for the pprof encoder ([`crate::pprof`]) and any other.
//! Out of memory, an encoder stops with
//! [`NoMemory`] and the process goes on.

/// There was no memory for the profile.
#[derive(Debug, PartialEq, Eq)]
pub struct NoMemory;

/// Wire type of a varint field.
const VARINT: u64 = 0;
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
        self.varint(field << 3 | VARINT)?;
        self.varint(v)
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
