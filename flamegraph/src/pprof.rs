//! pprof export: gzip-compressed `profile.proto`, the format `go tool
//! pprof`, Pyroscope and Parca read.
//!
//! The message types are written here with prost's derive (the fields
//! allocmux fills, with the tags of
//! <https://github.com/google/pprof/blob/main/proto/profile.proto>), so the
//! build needs no `protoc`. The layout follows Go's heap profiles:
//!
//! - sample types `alloc_objects/count`, `alloc_space/bytes`,
//!   `inuse_objects/count`, `inuse_space/bytes` (in use = live at exit,
//!   or at the last write of a process still running), then
//!   `alloc_time/nanoseconds` (allocator time of the allocations and of
//!   the frees of their blocks) and `peak_objects/count`,
//!   `peak_space/bytes` (live when the process peaked), and
//!   `temporary_objects/count` (temporary allocations, exact stacks only);
//! - the default sample type is `alloc_space` (or the one `--weight`
//!   names): allocmux profiles are mostly written at exit, where in-use
//!   space is only what leaked, so Go's default of `inuse_space` would open
//!   on a nearly empty view;
//! - one Sample per recorded stack and process, labelled `pid`, its
//!   locations leaf first, plumbing trimmed;
//! - one Location per (mapping, address): the address is the call
//!   instruction (return address - 1) and its Lines are the frames found
//!   there, innermost inlined function first, as the format asks;
//! - one Mapping per module per process, with its file name and build id.

use std::collections::HashMap;
use std::io::Write;

use anyhow::{Context, Result};
use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;

use crate::stacks::{StackSet, Weight};
use crate::symbolize::Frame;

#[derive(Clone, PartialEq, prost::Message)]
struct Profile {
    #[prost(message, repeated, tag = "1")]
    sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    string_table: Vec<String>,
    #[prost(int64, tag = "10")]
    duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    period: i64,
    #[prost(int64, repeated, tag = "13")]
    comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    default_sample_type: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ValueType {
    #[prost(int64, tag = "1")]
    r#type: i64,
    #[prost(int64, tag = "2")]
    unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    label: Vec<Label>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Label {
    #[prost(int64, tag = "1")]
    key: i64,
    #[prost(int64, tag = "2")]
    str: i64,
    #[prost(int64, tag = "3")]
    num: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Mapping {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(uint64, tag = "2")]
    memory_start: u64,
    #[prost(uint64, tag = "3")]
    memory_limit: u64,
    #[prost(uint64, tag = "4")]
    file_offset: u64,
    #[prost(int64, tag = "5")]
    filename: i64,
    #[prost(int64, tag = "6")]
    build_id: i64,
    #[prost(bool, tag = "7")]
    has_functions: bool,
    #[prost(bool, tag = "8")]
    has_filenames: bool,
    #[prost(bool, tag = "9")]
    has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    has_inline_frames: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Location {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(uint64, tag = "2")]
    mapping_id: u64,
    #[prost(uint64, tag = "3")]
    address: u64,
    #[prost(message, repeated, tag = "4")]
    line: Vec<Line>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Line {
    #[prost(uint64, tag = "1")]
    function_id: u64,
    #[prost(int64, tag = "2")]
    line: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Function {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(int64, tag = "2")]
    name: i64,
    #[prost(int64, tag = "3")]
    system_name: i64,
    #[prost(int64, tag = "4")]
    filename: i64,
}

/// The sample types, in order, with the weight each one shows.
const SAMPLE_TYPES: [(&str, &str, Option<Weight>); 8] = [
    ("alloc_objects", "count", Some(Weight::Count)),
    ("alloc_space", "bytes", Some(Weight::Bytes)),
    ("inuse_objects", "count", None),
    ("inuse_space", "bytes", Some(Weight::Leaked)),
    ("alloc_time", "nanoseconds", Some(Weight::Time)),
    ("peak_objects", "count", None),
    ("peak_space", "bytes", Some(Weight::Peak)),
    ("temporary_objects", "count", Some(Weight::Temporary)),
];

#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings::default();
        s.get(""); // index 0 is the empty string
        s
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Encodes the stacks as a gzip-compressed pprof profile. `default` picks
/// the sample type shown first (`alloc_space` if `None`); `comments` are
/// stored as the profile's comments (command, allocator).
pub fn encode(set: &StackSet<'_>, default: Option<Weight>, comments: &[String]) -> Result<Vec<u8>> {
    let mut strings = Strings::new();
    let time_unit = if set.ticks_per_ns.is_some() {
        "nanoseconds"
    } else {
        "ticks"
    };
    let sample_type = SAMPLE_TYPES
        .iter()
        .map(|&(t, u, _)| ValueType {
            r#type: strings.get(t),
            unit: strings.get(if t == "alloc_time" { time_unit } else { u }),
        })
        .collect();
    let default = default.unwrap_or(Weight::Bytes);
    let default_name = SAMPLE_TYPES
        .iter()
        .find(|t| t.2 == Some(default))
        .map_or("alloc_space", |t| t.0);
    let default_sample_type = strings.get(default_name);

    // Mappings: one per (process, module).
    let mut mapping = Vec::new();
    let mut mapping_ids: Vec<Vec<u64>> = Vec::new();
    for p in set.profiles {
        let mut ids = Vec::new();
        for m in &p.stacks.modules {
            let id = mapping.len() as u64 + 1;
            mapping.push(Mapping {
                id,
                memory_start: m.start,
                memory_limit: m.end,
                file_offset: m.file_offset,
                filename: strings.get(&m.path),
                build_id: strings.get(&m.build_id),
                has_functions: true,
                has_filenames: true,
                has_line_numbers: true,
                has_inline_frames: true,
            });
            ids.push(id);
        }
        mapping_ids.push(ids);
    }

    let mut function = Vec::new();
    let mut function_ids: HashMap<(String, Option<String>), u64> = HashMap::new();
    let mut function_id = |f: &Frame, strings: &mut Strings| -> u64 {
        let key = (f.function.clone(), f.file.clone());
        if let Some(&id) = function_ids.get(&key) {
            return id;
        }
        let id = function.len() as u64 + 1;
        let name = strings.get(&f.function);
        function.push(Function {
            id,
            name,
            system_name: name,
            filename: strings.get(f.file.as_deref().unwrap_or("")),
        });
        function_ids.insert(key, id);
        id
    };

    let mut location = Vec::new();
    // (mapping, address, frames trimmed from this location) → id
    let mut location_ids: HashMap<(u64, u64, usize), u64> = HashMap::new();
    let mut sample = Vec::new();
    let pid_key = strings.get("pid");
    for s in &set.stacks {
        let p = &set.profiles[s.process];
        let mut skip = s.trimmed;
        let mut ids = Vec::with_capacity(s.locations.len());
        for (addr, frames) in &s.locations {
            if skip >= frames.len() {
                skip -= frames.len();
                continue;
            }
            let (mapping_id, address) = match p
                .stacks
                .modules
                .iter()
                .position(|m| m.contains(addr.wrapping_sub(1)))
            {
                Some(i) => (mapping_ids[s.process][i], addr.wrapping_sub(1)),
                None => (0, *addr),
            };
            let key = (mapping_id, address, skip);
            let id = match location_ids.get(&key) {
                Some(&id) => id,
                None => {
                    let id = location.len() as u64 + 1;
                    let line = frames[skip..]
                        .iter()
                        .map(|f| Line {
                            function_id: function_id(f, &mut strings),
                            line: f.line.map_or(0, i64::from),
                        })
                        .collect();
                    location.push(Location {
                        id,
                        mapping_id,
                        address,
                        line,
                    });
                    location_ids.insert(key, id);
                    id
                }
            };
            skip = 0;
            ids.push(id);
        }
        let v = &s.values;
        sample.push(Sample {
            location_id: ids,
            value: [
                v.allocs,
                v.bytes,
                v.live_allocs,
                v.live_bytes,
                v.ns,
                v.peak_allocs,
                v.peak_bytes,
                v.temporary,
            ]
            .map(clamp)
            .to_vec(),
            label: vec![Label {
                key: pid_key,
                str: 0,
                num: i64::from(p.pid),
            }],
        });
    }

    let period = set
        .profiles
        .iter()
        .find_map(|p| match p.stacks.mode {
            allocmux_format::profile::StackMode::Sample { mean_bytes } => Some(mean_bytes),
            _ => None,
        })
        .unwrap_or(1);
    // Which values are estimates, where `go tool pprof -comments` and the
    // web view show it.
    let estimated: Vec<&str> = Weight::ALL
        .iter()
        .filter(|&&w| set.estimates(w))
        .map(|w| w.name())
        .collect();
    let estimates = format!(
        "estimates, not counts: {} ({})",
        estimated.join(", "),
        match set.mode_description() {
            m if m.is_empty() => "time from timed calls".to_string(),
            m => m,
        }
    );
    let comment = comments
        .iter()
        .chain(std::iter::once(&estimates))
        .map(|c| strings.get(c))
        .collect();
    let profile = Profile {
        sample_type,
        sample,
        mapping,
        location,
        function,
        duration_nanos: clamp(set.profiles.iter().map(|p| p.wall_ns()).max().unwrap_or(0)),
        period_type: Some(ValueType {
            r#type: strings.get("space"),
            unit: strings.get("bytes"),
        }),
        period: clamp(period),
        comment,
        default_sample_type,
        string_table: std::mem::take(&mut strings.table),
    };
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&profile.encode_to_vec())
        .context("compressing the pprof profile")?;
    gz.finish().context("compressing the pprof profile")
}
