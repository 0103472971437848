//! What a candidate's cubin can keep between runs, read from its ELF image before it is
//! loaded: writable module data (`__device__` variables, function-local `static __device__`
//! ones, `__managed__` ones: the sections `.nv.global`, `.nv.global.init` and any other
//! writable allocated section except shared memory, which lives only as long as a launch)
//! and calls into the device heap (`malloc`/`free` in device code, whose blocks outlive a
//! module and even a reload of it).
//!
//! The runner reloads a module with writable data before every run, so each run starts from
//! the image NVRTC produced; a module that calls the device heap is refused before it runs
//! (the heap belongs to the CUDA context and cannot be reset without a new one). A cubin
//! this parser cannot read is treated as stateful: it is reloaded before every run.

/// What [`inspect`] found in a cubin.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CubinState {
    /// Writable sections that persist across launches, with their sizes in bytes.
    pub writable_sections: Vec<(String, u64)>,
    /// Device-heap functions the module calls (`malloc`, `free`, ...).
    pub heap_calls: Vec<String>,
}

impl CubinState {
    /// Whether a kernel of this module can keep data in the module between runs.
    pub fn keeps_data(&self) -> bool {
        self.writable_sections.iter().any(|(_, n)| *n > 0)
    }

    /// Whether the module uses the device heap.
    pub fn uses_heap(&self) -> bool {
        !self.heap_calls.is_empty()
    }
}

/// Why a cubin could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a readable 64-bit little-endian ELF cubin: {0}")]
pub struct CubinError(String);

const SHF_WRITE: u64 = 1;
const SHF_ALLOC: u64 = 2;
const SHT_SYMTAB: u32 = 2;
const SHN_UNDEF: u16 = 0;

struct Bytes<'a>(&'a [u8]);

/// `base + off`, an error on overflow (offsets come from the file).
fn add(base: u64, off: u64) -> Result<u64, CubinError> {
    base.checked_add(off)
        .ok_or_else(|| CubinError(format!("offset {base} + {off} overflows")))
}

impl Bytes<'_> {
    fn get(&self, at: u64, n: u64) -> Result<&[u8], CubinError> {
        let end = add(at, n)?;
        self.0
            .get(at as usize..end as usize)
            .ok_or_else(|| CubinError(format!("bytes {at}..{end} past the end ({})", self.0.len())))
    }
    fn u16(&self, at: u64) -> Result<u16, CubinError> {
        Ok(u16::from_le_bytes(
            self.get(at, 2)?.try_into().unwrap_or([0; 2]),
        ))
    }
    fn u32(&self, at: u64) -> Result<u32, CubinError> {
        Ok(u32::from_le_bytes(
            self.get(at, 4)?.try_into().unwrap_or([0; 4]),
        ))
    }
    fn u64(&self, at: u64) -> Result<u64, CubinError> {
        Ok(u64::from_le_bytes(
            self.get(at, 8)?.try_into().unwrap_or([0; 8]),
        ))
    }
    /// The NUL-terminated string at `at` (lossy).
    fn cstr(&self, at: u64) -> Result<String, CubinError> {
        self.get(at, 0)?;
        let rest = &self.0[at as usize..];
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
    }
}

struct Section {
    name: String,
    kind: u32,
    flags: u64,
    offset: u64,
    size: u64,
    link: u32,
    entsize: u64,
}

/// Reads the sections and symbols of a cubin (an ELF64 file as NVRTC writes it).
pub fn inspect(cubin: &[u8]) -> Result<CubinState, CubinError> {
    let b = Bytes(cubin);
    if b.get(0, 4)? != b"\x7fELF" {
        return Err(CubinError("no ELF magic".into()));
    }
    if b.get(4, 2)? != [2, 1] {
        return Err(CubinError("not ELF64 little-endian".into()));
    }
    let shoff = b.u64(0x28)?;
    let shentsize = u64::from(b.u16(0x3A)?);
    let shnum = u64::from(b.u16(0x3C)?);
    let shstrndx = u64::from(b.u16(0x3E)?);
    if shentsize < 64 || shnum == 0 || shstrndx >= shnum {
        return Err(CubinError(format!(
            "section table: {shnum} entries of {shentsize} bytes, names in {shstrndx}"
        )));
    }
    let header = |i: u64| -> Result<(u32, Section), CubinError> {
        let at = add(shoff, i * shentsize)?;
        Ok((
            b.u32(at)?,
            Section {
                name: String::new(),
                kind: b.u32(add(at, 4)?)?,
                flags: b.u64(add(at, 8)?)?,
                offset: b.u64(add(at, 24)?)?,
                size: b.u64(add(at, 32)?)?,
                link: b.u32(add(at, 40)?)?,
                entsize: b.u64(add(at, 56)?)?,
            },
        ))
    };
    let (_, names) = header(shstrndx)?;
    let mut sections = Vec::with_capacity(shnum as usize);
    for i in 0..shnum {
        let (name_at, mut s) = header(i)?;
        s.name = b.cstr(add(names.offset, u64::from(name_at))?)?;
        sections.push(s);
    }
    let mut state = CubinState::default();
    for s in &sections {
        let persistent = s.flags & SHF_WRITE != 0
            && s.flags & SHF_ALLOC != 0
            && !s.name.starts_with(".nv.shared");
        if persistent {
            state.writable_sections.push((s.name.clone(), s.size));
        }
    }
    for s in sections.iter().filter(|s| s.kind == SHT_SYMTAB) {
        let strings = sections
            .get(s.link as usize)
            .ok_or_else(|| CubinError(format!("symbol names in missing section {}", s.link)))?;
        let entsize = if s.entsize >= 24 { s.entsize } else { 24 };
        for k in 0..s.size / entsize {
            let at = add(s.offset, k * entsize)?;
            let shndx = b.u16(add(at, 6)?)?;
            let kind = b.get(add(at, 4)?, 1)?[0] & 0xF;
            // Undefined functions are resolved by the driver at load time: the device heap's
            // entry points among them.
            if shndx == SHN_UNDEF && kind == 2 {
                let name = b.cstr(add(strings.offset, u64::from(b.u32(at)?))?)?;
                if is_heap_function(&name) {
                    state.heap_calls.push(name);
                }
            }
        }
    }
    Ok(state)
}

fn is_heap_function(name: &str) -> bool {
    matches!(name, "malloc" | "free" | "realloc" | "calloc") || name.contains("device_malloc")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(inspect(b"").is_err());
        assert!(inspect(b"\x7fELF").is_err());
        let mut fake = vec![0u8; 64];
        fake[..4].copy_from_slice(b"\x7fELF");
        fake[4] = 2;
        fake[5] = 1;
        // A section table far past the end.
        fake[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        fake[0x3A] = 64;
        fake[0x3C] = 3;
        fake[0x3E] = 1;
        assert!(inspect(&fake).is_err());
    }

    proptest::proptest! {
        /// Whatever the bytes after a valid ELF64 identification, reading never panics.
        #[test]
        fn random_images_never_panic(tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let mut image = b"\x7fELF\x02\x01".to_vec();
            image.extend(tail);
            let _ = inspect(&image);
        }
    }
}
