//! The module map: every loaded object's executable mapping, build id and
//! path (for the profile), and its unwind data for framehop, found with
//! `dl_iterate_phdr`.

use super::*;

/// A loaded object's unwind data, found from its program headers.
pub(super) struct Found {
    pub(super) info: ModuleInfo,
    pub(super) exec: Range<u64>,
    pub(super) eh_frame_hdr: Option<Range<u64>>,
    /// The loadable segments (to bound `.eh_frame`, whose size no header states).
    pub(super) loads: Vec<Range<u64>>,
}

/// Every loaded object with an executable segment. Allocates (call it with
/// no lock held).
pub fn loaded_modules() -> (Vec<ModuleInfo>, Vec<framehop::Module<&'static [u8]>>) {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        out: *mut c_void,
    ) -> c_int {
        // SAFETY: `info` and its headers are valid for the callback; `out` is our Vec.
        unsafe {
            let out = &mut *(out as *mut Vec<Found>);
            let info = &*info;
            let bias = info.dlpi_addr;
            let phdrs = core::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
            let mut exec: Option<(Range<u64>, u64)> = None;
            let mut hdr = None;
            let mut build_id = Vec::new();
            let mut loads = Vec::new();
            for ph in phdrs {
                let start = bias.wrapping_add(ph.p_vaddr);
                let range = start..start.wrapping_add(ph.p_memsz);
                match ph.p_type {
                    libc::PT_LOAD => {
                        loads.push(range.clone());
                        if ph.p_flags & libc::PF_X != 0 && exec.is_none() {
                            exec = Some((range, ph.p_offset));
                        }
                    }
                    libc::PT_GNU_EH_FRAME => hdr = Some(range),
                    libc::PT_NOTE if build_id.is_empty() => {
                        build_id = note_build_id(range.start as *const u8, ph.p_memsz as usize);
                    }
                    _ => {}
                }
            }
            let Some((exec, file_offset)) = exec else {
                return 0;
            };
            let name = info.dlpi_name;
            let path = if name.is_null() {
                Vec::new()
            } else {
                core::ffi::CStr::from_ptr(name).to_bytes().to_vec()
            };
            out.push(Found {
                info: ModuleInfo {
                    range: exec.clone(),
                    file_offset,
                    bias,
                    build_id,
                    path,
                },
                exec,
                eh_frame_hdr: hdr,
                loads,
            });
        }
        0
    }
    let mut found: Vec<Found> = Vec::new();
    // SAFETY: the callback only pushes onto `found`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut found as *mut Vec<Found> as *mut c_void) };

    let exe = own_exe_path();
    let cwd = current_dir();
    let mut infos = Vec::with_capacity(found.len());
    let mut modules = Vec::with_capacity(found.len());
    for (i, mut f) in found.into_iter().enumerate() {
        // The main program comes first, with an empty name.
        if i == 0 && f.info.path.is_empty() {
            f.info.path = exe.clone();
        }
        // A relative LD_PRELOAD or dlopen path stays relative in the
        // loader's list; the profile is read elsewhere, so anchor it.
        if f.info.path.contains(&b'/') && !f.info.path.starts_with(b"/") && !cwd.is_empty() {
            let mut full = cwd.clone();
            full.push(b'/');
            full.extend_from_slice(&f.info.path);
            f.info.path = full;
        }
        modules.push(framehop_module(&f));
        infos.push(f.info);
    }
    (infos, modules)
}

pub(super) fn own_exe_path() -> Vec<u8> {
    let mut buf = [0u8; 4096];
    // SAFETY: valid NUL-terminated path and buffer.
    let n = unsafe {
        libc::readlink(
            c"/proc/self/exe".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n > 0 {
        buf[..n as usize].to_vec()
    } else {
        Vec::new()
    }
}

pub(super) fn current_dir() -> Vec<u8> {
    let mut buf = [0u8; 4096];
    // SAFETY: valid buffer and length.
    let p = unsafe { libc::getcwd(buf.as_mut_ptr().cast(), buf.len()) };
    if p.is_null() {
        return Vec::new();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(0);
    buf[..n].to_vec()
}

/// The GNU build id in a PT_NOTE segment, or empty.
///
/// # Safety
/// `p..p+len` must be a mapped note segment.
pub(super) unsafe fn note_build_id(p: *const u8, len: usize) -> Vec<u8> {
    // SAFETY: the caller vouches for the segment.
    let notes = unsafe { core::slice::from_raw_parts(p, len) };
    let word = |at: usize| -> Option<usize> {
        Some(u32::from_ne_bytes(notes.get(at..at + 4)?.try_into().ok()?) as usize)
    };
    let mut at = 0;
    while let (Some(namesz), Some(descsz), Some(kind)) = (word(at), word(at + 4), word(at + 8)) {
        let name = at + 12;
        let desc = name + namesz.next_multiple_of(4);
        let next = desc + descsz.next_multiple_of(4);
        if next > notes.len() {
            break;
        }
        if kind == 3 && notes[name..name + namesz].starts_with(b"GNU") {
            return notes[desc..desc + descsz].to_vec();
        }
        at = next;
    }
    Vec::new()
}

/// Where `.eh_frame` starts, from the `eh_frame_ptr` field of `.eh_frame_hdr`.
pub(super) fn eh_frame_start(hdr: &[u8], hdr_addr: u64) -> Option<u64> {
    let (&version, &enc) = (hdr.first()?, hdr.get(1)?);
    if version != 1 {
        return None;
    }
    let field = hdr_addr + 4;
    let raw = hdr.get(4..)?;
    let value = match enc & 0x0f {
        0x03 => u32::from_ne_bytes(raw.get(..4)?.try_into().ok()?) as u64, // udata4
        0x0b => i32::from_ne_bytes(raw.get(..4)?.try_into().ok()?) as i64 as u64, // sdata4
        0x00 | 0x04 | 0x0c => u64::from_ne_bytes(raw.get(..8)?.try_into().ok()?), // absptr, (s|u)data8
        _ => return None,
    };
    match enc & 0x70 {
        0x00 => Some(value),                        // absolute
        0x10 => Some(field.wrapping_add(value)),    // pc-relative
        0x30 => Some(hdr_addr.wrapping_add(value)), // data-relative: to the header
        _ => None,
    }
}

pub(super) fn framehop_module(f: &Found) -> framehop::Module<&'static [u8]> {
    let bias = f.info.bias;
    let svma = |r: &Range<u64>| r.start.wrapping_sub(bias)..r.end.wrapping_sub(bias);
    let mut info = ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: Some(svma(&f.exec)),
        ..Default::default()
    };
    if let Some(hdr) = &f.eh_frame_hdr {
        // SAFETY: PT_GNU_EH_FRAME lies in a loaded read-only segment that
        // stays mapped while the object is loaded; the module is dropped
        // when the loader's generation says something was unloaded.
        let hdr_data: &'static [u8] = unsafe {
            core::slice::from_raw_parts(hdr.start as *const u8, (hdr.end - hdr.start) as usize)
        };
        if let Some(eh) = eh_frame_start(hdr_data, hdr.start) {
            // `.eh_frame` has no size in the program headers: it runs at
            // most to the end of the segment holding it, and is only read
            // at offsets the header's table gives.
            if let Some(seg) = f.loads.iter().find(|s| s.contains(&eh)) {
                // SAFETY: `eh` to the segment's end lies in a loaded segment,
                // mapped while the object is loaded; the module is dropped
                // when the loader's generation says something was unloaded.
                let eh_data: &'static [u8] = unsafe {
                    core::slice::from_raw_parts(eh as *const u8, (seg.end - eh) as usize)
                };
                info.eh_frame_hdr_svma = Some(svma(hdr));
                info.eh_frame_hdr = Some(hdr_data);
                info.eh_frame_svma = Some(svma(&(eh..seg.end)));
                info.eh_frame = Some(eh_data);
            }
        }
    }
    framehop::Module::new(String::new(), f.exec.clone(), bias, info)
}
