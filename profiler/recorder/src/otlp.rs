//! OpenTelemetry profiles (OTLP `profiles/v1development`, as the
//! Collector v0.161.0 / pdata v1.67.0 decodes them), encoded straight from
//! a stack [`Snapshot`] inside the recorded process, to be pushed to a
//! Collector over OTLP/HTTP (`POST /v1development/profiles`,
//! `application/x-protobuf`).
//!
//! One request holds one resource, one scope (`allocmux` and its
//! version) and four profiles, one per sample type (OTLP has one sample
//! type per profile, not pprof's list): `alloc_objects/count` and
//! `alloc_space/bytes`, the allocations of the interval pushed (a delta
//! against a [`Baseline`]), and `inuse_objects/count` and
//! `inuse_space/bytes`, what is live at its end. They share the
//! request's dictionary: its stacks (leaf first), their locations
//! (addresses of the call instructions, return address − 1, as in
//! [`crate::pprof`]), and the mappings with their file's path and GNU
//! build id (attribute `process.executable.build_id.gnu`, in hex). As
//! with pprof the profile stays a recording: nothing is symbolized here.
//!
//! Every table starts with its zero entry (`""`, `Mapping{}`, ...), as
//! the specification requires, so index 0 means "none".

use crate::pprof::{Baseline, ModuleRanges, call_address, call_addresses, page_aligned};
pub use crate::protobuf::NoMemory;
use crate::protobuf::Pb;
use crate::stacks::Snapshot;
use crate::unwind::{MAX_FRAMES, ModuleInfo};
use allocmux_format::profile::StackMode;

/// The value of a resource attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrValue<'a> {
    /// A string (UTF-8), `string_value`.
    Str(&'a [u8]),
    /// An integer, `int_value`.
    Int(i64),
}

/// One resource attribute (`service.name`, `process.pid`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attribute<'a> {
    /// Its key (UTF-8).
    pub key: &'a [u8],
    /// Its value.
    pub value: AttrValue<'a>,
}

/// What a push covers besides its stacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PushMeta {
    /// Wall-clock time of the end of the interval pushed, ns since the
    /// epoch.
    pub time_unix_ns: u64,
    /// The interval's length in ns: the allocation profiles' start is
    /// `time_unix_ns - duration_ns`.
    pub duration_ns: u64,
}

/// The attribute key of a mapping's GNU build id (OpenTelemetry's
/// semantic conventions), its value the id in lower-case hex.
pub const BUILD_ID_KEY: &str = "process.executable.build_id.gnu";

/// The string table's fixed entries, by index.
const STRINGS: [&str; 9] = [
    "",
    "alloc_objects",
    "count",
    "alloc_space",
    "bytes",
    "inuse_objects",
    "inuse_space",
    "space",
    BUILD_ID_KEY,
];
const S_ALLOC_OBJECTS: u64 = 1;
const S_COUNT: u64 = 2;
const S_ALLOC_SPACE: u64 = 3;
const S_BYTES: u64 = 4;
const S_INUSE_OBJECTS: u64 = 5;
const S_INUSE_SPACE: u64 = 6;
const S_SPACE: u64 = 7;
const S_BUILD_ID_KEY: u64 = 8;
/// The first of the modules' paths.
const S_PATHS: u64 = STRINGS.len() as u64;

/// The four profiles' sample types (type, unit), in the order of
/// [`values`].
const PROFILES: [(u64, u64); 4] = [
    (S_ALLOC_OBJECTS, S_COUNT),
    (S_ALLOC_SPACE, S_BYTES),
    (S_INUSE_OBJECTS, S_COUNT),
    (S_INUSE_SPACE, S_BYTES),
];
/// How many of [`PROFILES`] are of the interval (the rest are of its end).
const INTERVAL_PROFILES: usize = 2;

/// The scope's name.
const SCOPE_NAME: &[u8] = b"allocmux";

// Field numbers, by message.
/// ExportProfilesServiceRequest.
const REQ_RESOURCE_PROFILES: u64 = 1;
const REQ_DICTIONARY: u64 = 2;
/// ResourceProfiles.
const RP_RESOURCE: u64 = 1;
const RP_SCOPE_PROFILES: u64 = 2;
/// resource.v1.Resource.
const RESOURCE_ATTRIBUTES: u64 = 1;
/// common.v1.KeyValue.
const KV_KEY: u64 = 1;
const KV_VALUE: u64 = 2;
/// common.v1.AnyValue.
const ANY_STRING: u64 = 1;
const ANY_INT: u64 = 3;
/// ScopeProfiles.
const SP_SCOPE: u64 = 1;
const SP_PROFILES: u64 = 2;
/// common.v1.InstrumentationScope.
const SCOPE_NAME_FIELD: u64 = 1;
const SCOPE_VERSION: u64 = 2;
/// Profile.
const P_SAMPLE_TYPE: u64 = 1;
const P_SAMPLES: u64 = 2;
const P_TIME_UNIX_NANO: u64 = 3; // fixed64
const P_DURATION_NANO: u64 = 4;
const P_PERIOD_TYPE: u64 = 5;
const P_PERIOD: u64 = 6;
/// ValueType.
const VT_TYPE: u64 = 1;
const VT_UNIT: u64 = 2;
/// Sample.
const S_STACK_INDEX: u64 = 1;
const S_VALUES: u64 = 4; // packed
/// ProfilesDictionary.
const D_MAPPINGS: u64 = 1;
const D_LOCATIONS: u64 = 2;
const D_FUNCTIONS: u64 = 3;
const D_LINKS: u64 = 4;
const D_STRINGS: u64 = 5;
const D_ATTRIBUTES: u64 = 6;
const D_STACKS: u64 = 7;
/// Mapping.
const M_MEMORY_START: u64 = 1;
const M_MEMORY_LIMIT: u64 = 2;
const M_FILE_OFFSET: u64 = 3;
const M_FILENAME: u64 = 4;
const M_ATTRIBUTES: u64 = 5; // packed
/// Location.
const L_MAPPING_INDEX: u64 = 1;
const L_ADDRESS: u64 = 2;
/// KeyValueAndUnit.
const KVU_KEY: u64 = 1;
const KVU_VALUE: u64 = 2;
/// Stack.
const ST_LOCATIONS: u64 = 1; // packed

/// Encodes an `ExportProfilesServiceRequest` of `snap` into `out`,
/// replacing what it held: the resource with `resource` as its
/// attributes, and the four profiles. The allocation profiles count what
/// was allocated since `base` (all of it without one; a stack's figures
/// never go below zero), the in-use ones what is live in `snap`; a stack
/// whose value is zero is left out of that profile, and one whose four
/// values are zero out of the request. The period is the sampling mean
/// in bytes (`space/bytes`), 1 with exact stacks.
///
/// The allocation profiles cover the interval of `meta`
/// (`time_unix_nano` its start, `duration_nano` its length); the in-use
/// ones are an instant, its end (`duration_nano` 0), as the
/// specification suggests for a live heap. A request whose profiles have
/// no sample at all is dropped by the Collector's receiver (answered
/// 200 but not exported): the caller may as well not send it.
///
/// Beside `out`, it allocates scratch buffers the size of the stacks'
/// distinct addresses and of the modules, all fallibly.
pub fn encode_request(
    snap: &Snapshot,
    base: Option<&Baseline>,
    resource: &[Attribute<'_>],
    meta: &PushMeta,
    out: &mut Vec<u8>,
) -> Result<(), NoMemory> {
    out.clear();
    let mut pb = Pb { out };
    let mut buf = [0u64; MAX_FRAMES];
    let values = |i: usize| values(snap, base, i);

    // The locations: the stacks' addresses, sorted and deduplicated; a
    // location's index is its rank from 1.
    let addresses = call_addresses(snap, |i| values(i) != [0; 4])?;

    let rp = pb.begin(REQ_RESOURCE_PROFILES)?;
    let r = pb.begin(RP_RESOURCE)?;
    for a in resource {
        let kv = pb.begin(RESOURCE_ATTRIBUTES)?;
        pb.bytes_field(KV_KEY, a.key)?;
        let v = pb.begin(KV_VALUE)?;
        match a.value {
            AttrValue::Str(s) => pb.bytes_field(ANY_STRING, s)?,
            AttrValue::Int(n) => pb.varint_field_always(ANY_INT, n as u64)?, // int64
        }
        pb.end(v)?;
        pb.end(kv)?;
    }
    pb.end(r)?;

    let sp = pb.begin(RP_SCOPE_PROFILES)?;
    let scope = pb.begin(SP_SCOPE)?;
    pb.bytes_field(SCOPE_NAME_FIELD, SCOPE_NAME)?;
    pb.bytes_field(SCOPE_VERSION, env!("CARGO_PKG_VERSION").as_bytes())?;
    pb.end(scope)?;
    let period = match snap.mode() {
        StackMode::Sample { mean_bytes } => mean_bytes,
        StackMode::Off | StackMode::Exact => 1,
    };
    for (p, &(ty, unit)) in PROFILES.iter().enumerate() {
        let profile = pb.begin(SP_PROFILES)?;
        value_type(&mut pb, P_SAMPLE_TYPE, ty, unit)?;
        // Stack indices from 1, over the stacks kept.
        let mut stack = 0;
        for i in 0..snap.len() {
            let v = values(i);
            if v == [0; 4] {
                continue;
            }
            stack += 1;
            if v[p] == 0 {
                continue;
            }
            let sample = pb.begin(P_SAMPLES)?;
            pb.varint_field(S_STACK_INDEX, stack)?;
            let packed = pb.begin(S_VALUES)?;
            pb.varint(v[p].min(i64::MAX as u64))?; // int64
            pb.end(packed)?;
            pb.end(sample)?;
        }
        // The allocations are those of the interval; what is live is
        // an instant, its end.
        let (time, duration) = if p < INTERVAL_PROFILES {
            (
                meta.time_unix_ns.saturating_sub(meta.duration_ns),
                meta.duration_ns,
            )
        } else {
            (meta.time_unix_ns, 0)
        };
        pb.fixed64_field(P_TIME_UNIX_NANO, time)?;
        pb.varint_field(P_DURATION_NANO, duration)?;
        value_type(&mut pb, P_PERIOD_TYPE, S_SPACE, S_BYTES)?;
        pb.varint_field(P_PERIOD, period)?;
        pb.end(profile)?;
    }
    pb.end(sp)?;
    pb.end(rp)?;

    let dictionary = pb.begin(REQ_DICTIONARY)?;
    let modules = snap.modules();
    let strings = module_strings(modules)?;

    pb.message(D_MAPPINGS, b"")?;
    for (m, s) in modules.iter().zip(&strings) {
        let (start, limit, offset) = page_aligned(m);
        let mapping = pb.begin(D_MAPPINGS)?;
        pb.varint_field(M_MEMORY_START, start)?;
        pb.varint_field(M_MEMORY_LIMIT, limit)?;
        pb.varint_field(M_FILE_OFFSET, offset)?;
        pb.varint_field(M_FILENAME, s.path)?;
        if s.build_id != 0 {
            let packed = pb.begin(M_ATTRIBUTES)?;
            pb.varint(s.build_id)?;
            pb.end(packed)?;
        }
        pb.end(mapping)?;
    }

    pb.message(D_LOCATIONS, b"")?;
    let ranges = ModuleRanges::new(modules)?;
    for &a in &addresses {
        let location = pb.begin(D_LOCATIONS)?;
        pb.varint_field(L_MAPPING_INDEX, ranges.index_of(a))?;
        pb.varint_field(L_ADDRESS, a)?;
        pb.end(location)?;
    }

    pb.message(D_FUNCTIONS, b"")?;
    pb.message(D_LINKS, b"")?;

    for s in STRINGS {
        pb.bytes_field(D_STRINGS, s.as_bytes())?;
    }
    for (m, s) in modules.iter().zip(&strings) {
        if s.new_path {
            pb.bytes_field(D_STRINGS, &m.path)?;
        }
    }

    pb.message(D_ATTRIBUTES, b"")?;
    for (m, s) in modules.iter().zip(&strings) {
        if !s.new_build_id {
            continue;
        }
        let attribute = pb.begin(D_ATTRIBUTES)?;
        pb.varint_field(KVU_KEY, S_BUILD_ID_KEY)?;
        let v = pb.begin(KVU_VALUE)?;
        pb.varint(ANY_STRING << 3 | 2)?;
        pb.varint(2 * m.build_id.len() as u64)?;
        for b in &m.build_id {
            let digits = b"0123456789abcdef";
            pb.raw(&[digits[(b >> 4) as usize], digits[(b & 15) as usize]])?;
        }
        pb.end(v)?;
        pb.end(attribute)?;
    }

    pb.message(D_STACKS, b"")?;
    for i in 0..snap.len() {
        if values(i) == [0; 4] {
            continue;
        }
        let stack = pb.begin(D_STACKS)?;
        let packed = pb.begin(ST_LOCATIONS)?;
        for &a in snap.frames(i, &mut buf) {
            let rank = addresses.binary_search(&call_address(a));
            pb.varint(rank.map_or(0, |k| k as u64 + 1))?;
        }
        pb.end(packed)?;
        pb.end(stack)?;
    }
    pb.end(dictionary)
}

/// A `ValueType` message as field `field`.
fn value_type(pb: &mut Pb<'_>, field: u64, ty: u64, unit: u64) -> Result<(), NoMemory> {
    let vt = pb.begin(field)?;
    pb.varint_field(VT_TYPE, ty)?;
    pb.varint_field(VT_UNIT, unit)?;
    pb.end(vt)
}

/// The figures of stack `i` in the profiles' order: its allocations and
/// their bytes since `base`, its live blocks and their bytes.
fn values(snap: &Snapshot, base: Option<&Baseline>, i: usize) -> [u64; 4] {
    let now = snap.counts(i);
    let then = base
        .and_then(|b| b.unresolved(i))
        .map(|(then, _)| then)
        .unwrap_or_default();
    [
        now.allocs.saturating_sub(then.allocs),
        now.bytes.saturating_sub(then.bytes),
        now.live_allocs,
        now.live_bytes,
    ]
}

/// Where a module's strings are in the dictionary: each distinct path
/// and build id once (a library loaded again is another module).
#[derive(Clone, Copy, Debug)]
struct ModuleStrings {
    /// The string index of its path.
    path: u64,
    /// The attribute index of its build id, 0 if it has none.
    build_id: u64,
    /// Whether its path is written with it (no earlier module has it).
    new_path: bool,
    /// Whether its build id's attribute is written with it.
    new_build_id: bool,
}

/// The [`ModuleStrings`] of `modules`, in their order.
fn module_strings(modules: &[ModuleInfo]) -> Result<Vec<ModuleStrings>, NoMemory> {
    let mut out: Vec<ModuleStrings> = Vec::new();
    out.try_reserve(modules.len()).map_err(|_| NoMemory)?;
    let (mut paths, mut build_ids) = (S_PATHS, 1);
    for (k, m) in modules.iter().enumerate() {
        let earlier = &modules[..k];
        let (path, new_path) = match earlier.iter().position(|e| e.path == m.path) {
            Some(j) => (out[j].path, false),
            None => {
                paths += 1;
                (paths - 1, true)
            }
        };
        let (build_id, new_build_id) = if m.build_id.is_empty() {
            (0, false)
        } else {
            match earlier.iter().position(|e| e.build_id == m.build_id) {
                Some(j) => (out[j].build_id, false),
                None => {
                    build_ids += 1;
                    (build_ids - 1, true)
                }
            }
        };
        out.push(ModuleStrings {
            path,
            build_id,
            new_path,
            new_build_id,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_alloc;
    use allocmux_format::SiteCounts;

    // A protobuf decoder, strict about the wire types the schema gives.

    #[derive(Clone, Copy, Debug)]
    enum Field<'a> {
        Varint(u64),
        I64(u64),
        Len(&'a [u8]),
    }

    impl<'a> Field<'a> {
        /// A length-delimited field's bytes.
        fn bytes(self) -> &'a [u8] {
            match self {
                Field::Len(b) => b,
                f @ (Field::Varint(_) | Field::I64(_)) => panic!("{f:?} is not length-delimited"),
            }
        }
    }

    /// A decoded message: its fields in order.
    #[derive(Clone, Debug)]
    struct Msg<'a>(Vec<(u64, Field<'a>)>);

    fn take_varint(b: &mut &[u8]) -> u64 {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = b.split_first().expect("varint past the end");
            *b = rest;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return v;
            }
        }
        panic!("varint of more than 10 bytes");
    }

    fn decode(mut b: &[u8]) -> Msg<'_> {
        let mut fields = Vec::new();
        while !b.is_empty() {
            let tag = take_varint(&mut b);
            let (field, wire) = (tag >> 3, tag & 7);
            assert!(field > 0, "field 0");
            let f = match wire {
                0 => Field::Varint(take_varint(&mut b)),
                1 => {
                    let (v, rest) = b.split_at(8);
                    b = rest;
                    Field::I64(u64::from_le_bytes(v.try_into().unwrap()))
                }
                2 => {
                    let len = take_varint(&mut b) as usize;
                    assert!(len <= b.len(), "length past the end");
                    let (v, rest) = b.split_at(len);
                    b = rest;
                    Field::Len(v)
                }
                _ => panic!("wire type {wire} of field {field}"),
            };
            fields.push((field, f));
        }
        Msg(fields)
    }

    impl<'a> Msg<'a> {
        /// Asserts that only `known` fields are present.
        fn only(&self, known: &[u64]) -> &Self {
            for (n, _) in &self.0 {
                assert!(known.contains(n), "unexpected field {n} in {self:?}");
            }
            self
        }

        fn all(&self, n: u64) -> impl Iterator<Item = Field<'a>> + '_ {
            self.0.iter().filter(move |(m, _)| *m == n).map(|&(_, f)| f)
        }

        /// The at most one field `n`.
        fn one(&self, n: u64) -> Option<Field<'a>> {
            assert!(self.all(n).count() <= 1, "field {n} repeated");
            self.all(n).next()
        }

        fn varint(&self, n: u64) -> u64 {
            match self.one(n) {
                None => 0,
                Some(Field::Varint(v)) => v,
                Some(f) => panic!("field {n} is {f:?}, not a varint"),
            }
        }

        fn fixed64(&self, n: u64) -> u64 {
            match self.one(n) {
                None => 0,
                Some(Field::I64(v)) => v,
                Some(f) => panic!("field {n} is {f:?}, not fixed64"),
            }
        }

        fn len(&self, n: u64) -> &'a [u8] {
            match self.one(n) {
                None => b"",
                Some(Field::Len(v)) => v,
                Some(f) => panic!("field {n} is {f:?}, not length-delimited"),
            }
        }

        fn msg(&self, n: u64) -> Msg<'a> {
            decode(self.len(n))
        }

        fn msgs(&self, n: u64) -> Vec<Msg<'a>> {
            self.all(n).map(|f| decode(f.bytes())).collect()
        }

        /// A packed repeated varint field (one or none).
        fn packed(&self, n: u64) -> Vec<u64> {
            let mut b = self.len(n);
            let mut v = Vec::new();
            while !b.is_empty() {
                v.push(take_varint(&mut b));
            }
            v
        }
    }

    /// A string or integer attribute value.
    #[derive(Clone, Debug, PartialEq)]
    enum Val {
        Str(String),
        Int(i64),
    }

    fn any_value(m: &Msg<'_>) -> Val {
        m.only(&[1, 3]);
        match (m.one(1), m.one(3)) {
            (Some(Field::Len(s)), None) => Val::Str(String::from_utf8(s.to_vec()).unwrap()),
            (None, Some(Field::Varint(n))) => Val::Int(n as i64),
            other => panic!("AnyValue {other:?}"),
        }
    }

    #[derive(Debug)]
    struct Profile {
        sample_type: (String, String),
        /// Stack index and values.
        samples: Vec<(u64, Vec<u64>)>,
        time: u64,
        duration: u64,
        period_type: (String, String),
        period: u64,
    }

    #[derive(Debug, PartialEq)]
    struct Mapping {
        start: u64,
        limit: u64,
        offset: u64,
        filename: String,
        /// Its attributes, key and value.
        attributes: Vec<(String, Val)>,
    }

    /// What a request says, with the dictionary's indices resolved where
    /// they are checked.
    #[derive(Debug)]
    struct Request {
        resource: Vec<(String, Val)>,
        scope: (String, String),
        profiles: Vec<Profile>,
        strings: Vec<String>,
        mappings: Vec<Mapping>,
        /// Mapping index and address.
        locations: Vec<(u64, u64)>,
        stacks: Vec<Vec<u64>>,
    }

    impl Request {
        /// The addresses of the stack of a sample, leaf first.
        fn addresses(&self, stack_index: u64) -> Vec<u64> {
            let stack = &self.stacks[stack_index as usize];
            stack
                .iter()
                .map(|&l| self.locations[l as usize].1)
                .collect()
        }

        /// The values of profile `ty`, by the addresses of their stacks.
        fn values(&self, ty: &str) -> Vec<(Vec<u64>, u64)> {
            let p = (self.profiles.iter())
                .find(|p| p.sample_type.0 == ty)
                .unwrap_or_else(|| panic!("no profile {ty}"));
            (p.samples.iter())
                .map(|(stack, values)| {
                    assert_eq!(values.len(), 1, "one value per sample");
                    (self.addresses(*stack), values[0])
                })
                .collect()
        }
    }

    fn decode_request(bytes: &[u8]) -> Request {
        let req = decode(bytes);
        req.only(&[1, 2]);
        let rps = req.msgs(1);
        assert_eq!(rps.len(), 1, "one ResourceProfiles");
        let rp = &rps[0];
        rp.only(&[1, 2]);
        let d = req.msg(2);
        d.only(&[1, 2, 3, 4, 5, 6, 7]);

        let strings: Vec<String> = (d.all(5))
            .map(|f| String::from_utf8(f.bytes().to_vec()).unwrap())
            .collect();
        let string = |i: u64| strings[i as usize].clone();
        // Every table's element 0 is its zero value.
        for table in 1..=7 {
            let first = d.all(table).next();
            assert!(
                matches!(first, Some(Field::Len(b""))),
                "table {table} starts with {first:?}"
            );
        }
        let attributes: Vec<(String, Val)> = (d.msgs(6).iter().enumerate())
            .map(|(k, a)| {
                a.only(&[1, 2]);
                if k == 0 {
                    return (String::new(), Val::Int(0)); // empty, checked above
                }
                (string(a.varint(1)), any_value(&a.msg(2)))
            })
            .collect();
        let mappings = (d.msgs(1).iter())
            .map(|m| {
                m.only(&[1, 2, 3, 4, 5]);
                Mapping {
                    start: m.varint(1),
                    limit: m.varint(2),
                    offset: m.varint(3),
                    filename: string(m.varint(4)),
                    attributes: (m.packed(5).iter())
                        .map(|&a| attributes[a as usize].clone())
                        .collect(),
                }
            })
            .collect();
        let locations = (d.msgs(2).iter())
            .map(|l| {
                l.only(&[1, 2]);
                (l.varint(1), l.varint(2))
            })
            .collect();
        let stacks = (d.msgs(7).iter())
            .map(|s| {
                s.only(&[1]);
                s.packed(1)
            })
            .collect();

        let resource = (rp.msg(1).only(&[1]).msgs(1).iter())
            .map(|kv| {
                kv.only(&[1, 2]);
                let key = String::from_utf8(kv.len(1).to_vec()).unwrap();
                (key, any_value(&kv.msg(2)))
            })
            .collect();
        let sps = rp.msgs(2);
        assert_eq!(sps.len(), 1, "one ScopeProfiles");
        let sp = &sps[0];
        sp.only(&[1, 2]);
        let scope = sp.msg(1);
        scope.only(&[1, 2]);
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
        let value_type = |m: &Msg<'_>| {
            m.only(&[1, 2]);
            (string(m.varint(1)), string(m.varint(2)))
        };
        let profiles = (sp.msgs(2).iter())
            .map(|p| {
                p.only(&[1, 2, 3, 4, 5, 6]);
                Profile {
                    sample_type: value_type(&p.msg(1)),
                    samples: (p.msgs(2).iter())
                        .map(|s| {
                            s.only(&[1, 4]);
                            (s.varint(1), s.packed(4))
                        })
                        .collect(),
                    time: p.fixed64(3),
                    duration: p.varint(4),
                    period_type: value_type(&p.msg(5)),
                    period: p.varint(6),
                }
            })
            .collect();
        Request {
            resource,
            scope: (text(scope.len(1)), text(scope.len(2))),
            profiles,
            strings,
            mappings,
            locations,
            stacks,
        }
    }

    fn counts(allocs: u64, bytes: u64, live_allocs: u64, live_bytes: u64) -> SiteCounts {
        SiteCounts {
            samples: allocs,
            allocs,
            bytes,
            live_allocs,
            live_bytes,
            ..SiteCounts::default()
        }
    }

    const PROG: u64 = 0x5555_0000_1234;
    const LIBC: u64 = 0x7f00_0000_0000;

    fn modules() -> Vec<ModuleInfo> {
        vec![
            ModuleInfo {
                range: PROG..0x5555_0010_0000,
                file_offset: 0x2234,
                bias: 0x5555_0000_0000,
                build_id: vec![0xab, 0x01, 0xff],
                path: b"/usr/bin/prog".to_vec(),
            },
            ModuleInfo {
                range: LIBC..LIBC + 0x1_0000,
                file_offset: 0,
                bias: LIBC,
                build_id: Vec::new(),
                path: b"/lib/libc.so.6".to_vec(),
            },
            // Loaded again elsewhere: its path and id are not repeated.
            ModuleInfo {
                range: 0x6000_0000_0000..0x6000_0000_1000,
                file_offset: 0,
                bias: 0x6000_0000_0000,
                build_id: vec![0xab, 0x01, 0xff],
                path: b"/usr/bin/prog".to_vec(),
            },
        ]
    }

    /// The stacks' return addresses, innermost first.
    const A: &[u64] = &[PROG + 0x1001, PROG + 0x2001];
    const B: &[u64] = &[LIBC + 0x101, PROG + 0x2001];
    const C: &[u64] = &[0x1234];
    const D: &[u64] = &[0x9999_0000, PROG + 0x1001];

    fn snapshot(mode: StackMode, figures: [SiteCounts; 4]) -> Snapshot {
        Snapshot::of_stacks(
            mode,
            modules(),
            &[
                (figures[0], A),
                (figures[1], B),
                (figures[2], C),
                (figures[3], D),
            ],
        )
    }

    /// Return addresses as locations: the call instructions.
    fn calls(frames: &[u64]) -> Vec<u64> {
        frames.iter().map(|a| a - 1).collect()
    }

    const RESOURCE: &[Attribute<'static>] = &[
        Attribute {
            key: b"service.name",
            value: AttrValue::Str(b"svc"),
        },
        Attribute {
            key: b"process.pid",
            value: AttrValue::Int(4242),
        },
        Attribute {
            key: b"zero",
            value: AttrValue::Int(0),
        },
    ];

    const META: PushMeta = PushMeta {
        time_unix_ns: 1_700_000_010_000_000_000,
        duration_ns: 10_000_000_000,
    };

    fn encoded(snap: &Snapshot, base: Option<&Baseline>) -> Vec<u8> {
        let mut out = Vec::new();
        encode_request(snap, base, RESOURCE, &META, &mut out).unwrap();
        out
    }

    /// Writes `bytes` to `$ALLOCMUX_OTLP_DUMP/NAME.bin` if that is set:
    /// requests to try on a real Collector (`curl --data-binary @FILE -H
    /// 'Content-Type: application/x-protobuf' .../v1development/profiles`).
    fn dump(name: &str, bytes: &[u8]) {
        if let Some(dir) = std::env::var_os("ALLOCMUX_OTLP_DUMP") {
            let path = std::path::Path::new(&dir).join(format!("{name}.bin"));
            std::fs::write(path, bytes).unwrap();
        }
    }

    /// The request of a fixed snapshot.
    fn golden() -> Vec<u8> {
        let snap = snapshot(
            StackMode::Sample {
                mean_bytes: 524_288,
            },
            [
                counts(3, 300, 1, 100),
                counts(5, 5000, 0, 0),
                SiteCounts::default(),
                counts(1, 8, 1, 8),
            ],
        );
        encoded(&snap, None)
    }

    #[test]
    fn a_request_holds_four_profiles_of_the_snapshot() {
        let bytes = golden();
        dump("golden", &bytes);
        let r = decode_request(&bytes);
        assert_eq!(
            r.resource,
            [
                ("service.name".into(), Val::Str("svc".into())),
                ("process.pid".into(), Val::Int(4242)),
                ("zero".into(), Val::Int(0)),
            ]
        );
        assert_eq!(
            r.scope,
            ("allocmux".into(), env!("CARGO_PKG_VERSION").into())
        );
        assert_eq!(r.strings[0], "");
        let types: Vec<_> = r.profiles.iter().map(|p| p.sample_type.clone()).collect();
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            types,
            [
                pair("alloc_objects", "count"),
                pair("alloc_space", "bytes"),
                pair("inuse_objects", "count"),
                pair("inuse_space", "bytes"),
            ]
        );
        for p in &r.profiles {
            assert_eq!(p.period_type, pair("space", "bytes"));
            assert_eq!(p.period, 524_288);
        }
        // The allocations are of the interval, what is live of its end.
        let start = META.time_unix_ns - META.duration_ns;
        let times: Vec<_> = r.profiles.iter().map(|p| (p.time, p.duration)).collect();
        assert_eq!(
            times,
            [
                (start, META.duration_ns),
                (start, META.duration_ns),
                (META.time_unix_ns, 0),
                (META.time_unix_ns, 0)
            ]
        );
        // Stacks leaf first as locations, their values; C (all zero) is
        // left out, and so are the zero values.
        assert_eq!(
            r.values("alloc_objects"),
            [(calls(A), 3), (calls(B), 5), (calls(D), 1)]
        );
        assert_eq!(
            r.values("alloc_space"),
            [(calls(A), 300), (calls(B), 5000), (calls(D), 8)]
        );
        assert_eq!(r.values("inuse_objects"), [(calls(A), 1), (calls(D), 1)]);
        assert_eq!(r.values("inuse_space"), [(calls(A), 100), (calls(D), 8)]);
        // No orphan: a stack and a location for each kept, no more.
        assert_eq!(r.stacks.len(), 1 + 3);
        let mut addresses: Vec<u64> = calls(&[A, B, D].concat());
        addresses.sort();
        addresses.dedup();
        let located: Vec<u64> = r.locations[1..].iter().map(|l| l.1).collect();
        assert_eq!(located, addresses);

        // Mappings, page-aligned, with their paths and build ids; the
        // locations point to theirs.
        let build_id = vec![(BUILD_ID_KEY.to_string(), Val::Str("ab01ff".into()))];
        assert_eq!(
            r.mappings,
            [
                Mapping {
                    start: 0,
                    limit: 0,
                    offset: 0,
                    filename: String::new(),
                    attributes: Vec::new(),
                },
                Mapping {
                    start: 0x5555_0000_1000,
                    limit: 0x5555_0010_0000,
                    offset: 0x2000,
                    filename: "/usr/bin/prog".into(),
                    attributes: build_id.clone(),
                },
                Mapping {
                    start: LIBC,
                    limit: LIBC + 0x1_0000,
                    offset: 0,
                    filename: "/lib/libc.so.6".into(),
                    attributes: Vec::new(),
                },
                Mapping {
                    start: 0x6000_0000_0000,
                    limit: 0x6000_0000_1000,
                    offset: 0,
                    filename: "/usr/bin/prog".into(),
                    attributes: build_id,
                },
            ]
        );
        let mapping_of = |a: u64| r.locations.iter().find(|l| l.1 == a).unwrap().0;
        assert_eq!(mapping_of(A[0] - 1), 1);
        assert_eq!(mapping_of(B[0] - 1), 2);
        assert_eq!(mapping_of(D[0] - 1), 0, "in no module");
        // No duplicate string.
        let mut strings = r.strings.clone();
        strings.sort();
        strings.dedup();
        assert_eq!(strings.len(), r.strings.len(), "{:?}", r.strings);
    }

    #[test]
    fn a_delta_counts_the_interval_and_what_is_live_is_not_a_delta() {
        let mode = StackMode::Exact;
        // The baseline knows A, B and C; D is new.
        let before = Snapshot::of_stacks(
            mode,
            modules(),
            &[
                (counts(2, 200, 2, 200), A),
                (counts(5, 5000, 3, 3000), B),
                (counts(9, 90, 0, 0), C),
            ],
        );
        let mut base = Baseline::new();
        base.keep(&before).unwrap();
        let after = snapshot(
            mode,
            [
                counts(3, 300, 1, 100),   // one more, one freed
                counts(5, 5000, 3, 3000), // nothing new, all still live
                counts(4, 40, 0, 0),      // fewer (a child's table): none
                counts(1, 8, 1, 8),       // all new
            ],
        );
        let r = decode_request(&encoded(&after, Some(&base)));
        assert_eq!(r.values("alloc_objects"), [(calls(A), 1), (calls(D), 1)]);
        assert_eq!(r.values("alloc_space"), [(calls(A), 100), (calls(D), 8)]);
        assert_eq!(
            r.values("inuse_objects"),
            [(calls(A), 1), (calls(B), 3), (calls(D), 1)]
        );
        assert_eq!(
            r.values("inuse_space"),
            [(calls(A), 100), (calls(B), 3000), (calls(D), 8)]
        );
        assert_eq!(r.stacks.len(), 1 + 3, "C is left out");
        for p in &r.profiles {
            assert_eq!(p.period, 1, "exact stacks");
        }
        // Without a baseline the same snapshot counts everything.
        let r = decode_request(&encoded(&after, None));
        let all: Vec<u64> = r.values("alloc_objects").iter().map(|v| v.1).collect();
        assert_eq!(all, [3, 5, 4, 1]);
    }

    #[test]
    fn an_empty_snapshot_makes_four_empty_profiles() {
        let snap = Snapshot::new();
        let mut out = vec![1, 2, 3];
        let meta = PushMeta {
            time_unix_ns: 5,
            duration_ns: 0,
        };
        encode_request(&snap, None, &[], &meta, &mut out).unwrap();
        let r = decode_request(&out);
        assert!(r.resource.is_empty());
        assert_eq!(r.profiles.len(), 4);
        assert!(r.profiles.iter().all(|p| p.samples.is_empty()));
        assert_eq!(
            (r.stacks.len(), r.locations.len(), r.mappings.len()),
            (1, 1, 1)
        );
        assert_eq!(r.strings[0], "");
    }

    /// Out of memory, the request is not made, and nothing aborts: the
    /// output and the scratch buffers only grow fallibly.
    #[test]
    fn without_memory_there_is_no_request() {
        let snap = snapshot(
            StackMode::Exact,
            [
                counts(3, 300, 1, 100),
                counts(5, 5000, 0, 0),
                SiteCounts::default(),
                counts(1, 8, 1, 8),
            ],
        );
        let mut out = Vec::new();
        let r =
            test_alloc::without_memory(|| encode_request(&snap, None, RESOURCE, &META, &mut out));
        assert_eq!(r, Err(NoMemory));
        // Room for the output, none for the scratch buffers.
        let mut out = Vec::with_capacity(1 << 16);
        let r =
            test_alloc::without_memory(|| encode_request(&snap, None, RESOURCE, &META, &mut out));
        assert_eq!(r, Err(NoMemory));
        // With memory again, the same request as ever.
        encode_request(&snap, None, RESOURCE, &META, &mut out).unwrap();
        assert_eq!(decode_request(&out).profiles.len(), 4);
    }

    /// Thousands of deep stacks: messages and packed fields whose lengths
    /// take several bytes, written in place.
    #[test]
    fn a_large_request_says_the_same() {
        let frames: Vec<Vec<u64>> = (0..3000u64)
            .map(|i| {
                let depth = 1 + (i % crate::unwind::MAX_FRAMES as u64);
                (0..depth)
                    .map(|d| 0x4000_0000 + i * 0x1000 + d * 8)
                    .collect()
            })
            .collect();
        let stacks: Vec<(SiteCounts, &[u64])> = (frames.iter().enumerate())
            .map(|(i, f)| {
                let i = i as u64;
                (counts(i, i << 20, i % 3, (i % 3) << 10), &f[..])
            })
            .collect();
        let snap = Snapshot::of_stacks(StackMode::Exact, modules(), &stacks);
        let bytes = encoded(&snap, None);
        dump("large", &bytes);
        assert!(bytes.len() > 1 << 21, "{}", bytes.len());
        let r = decode_request(&bytes);
        let expected = |f: &dyn Fn(u64) -> u64| -> Vec<(Vec<u64>, u64)> {
            (frames.iter().enumerate())
                .map(|(i, fr)| (calls(fr), f(i as u64)))
                .filter(|e| e.1 != 0)
                .collect()
        };
        assert_eq!(r.values("alloc_objects"), expected(&|i| i));
        assert_eq!(r.values("alloc_space"), expected(&|i| i << 20));
        assert_eq!(r.values("inuse_space"), expected(&|i| (i % 3) << 10));
        assert_eq!(r.stacks.len(), 3000, "all but stack 0");
    }
}
