//! Device memory: owned buffers (cuMemAlloc's or shareable VMM memory), other processes'
//! buffers mapped here, and address ranges with the copies and fills on them.

use std::ffi::c_void;

use cudarc::driver::{result, sys};

use super::{CudaError, Gpu, Step};

impl Gpu {
    /// Allocates `bytes` (at least 1, so every buffer has a distinct address).
    pub fn alloc(&self, bytes: usize, what: &str) -> Result<DeviceBuffer, CudaError> {
        // SAFETY: plain allocation in the current (this) context; freed in Drop.
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }
            .during(|| format!("allocating {bytes} bytes for {what}"))?;
        Ok(DeviceBuffer {
            ptr,
            bytes,
            vmm: None,
            _gpu: self.clone(),
        })
    }

    /// Allocates `bytes` that another process can map at full speed through
    /// [`DeviceBuffer::export_fd`] and [`Gpu::import_shared`] (the VMM API; on an H200 the
    /// harness's kernels ran 2.3–3.6× slower on legacy CUDA IPC mappings).
    pub fn alloc_shared(&self, bytes: usize, what: &str) -> Result<DeviceBuffer, CudaError> {
        let device = self.ordinal();
        let size = shareable_size(device, bytes)?;
        let prop = shareable_prop(device);
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: out-parameter; prop is valid; size is a multiple of the granularity.
        unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) }
            .result()
            .during(|| format!("cuMemCreate ({size} bytes for {what})"))?;
        let ptr = map_vmm(device, handle, size, what)?;
        Ok(DeviceBuffer {
            ptr,
            bytes,
            vmm: Some(Vmm { handle, size }),
            _gpu: self.clone(),
        })
    }

    /// Maps another process's shareable buffer of `bytes` from its file descriptor.
    pub fn import_shared(
        &self,
        fd: &std::os::fd::OwnedFd,
        bytes: usize,
        what: &str,
    ) -> Result<IpcMapping, CudaError> {
        use std::os::fd::AsRawFd;
        let device = self.ordinal();
        let size = shareable_size(device, bytes)?;
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: out-parameter; the POSIX handle type takes the descriptor as the pointer
        // value; the driver validates it (the descriptor stays ours).
        unsafe {
            sys::cuMemImportFromShareableHandle(
                &mut handle,
                fd.as_raw_fd() as isize as *mut c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            )
        }
        .result()
        .during(|| format!("cuMemImportFromShareableHandle ({what})"))?;
        let ptr = map_vmm(device, handle, size, what)?;
        Ok(IpcMapping {
            slice: DevSlice { ptr, bytes },
            vmm: Some(Vmm { handle, size }),
            _gpu: self.clone(),
        })
    }

    /// Maps the allocation behind `handle` (`bytes` long) from another process.
    pub fn open_ipc(
        &self,
        handle: &IpcHandle,
        bytes: usize,
        what: &str,
    ) -> Result<IpcMapping, CudaError> {
        let mut raw = sys::CUipcMemHandle_st { reserved: [0; 64] };
        for (d, s) in raw.reserved.iter_mut().zip(handle) {
            *d = *s as _;
        }
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: out-parameter; the handle is plain bytes the driver validates.
        unsafe {
            sys::cuIpcOpenMemHandle_v2(
                &mut ptr,
                raw,
                sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
            )
        }
        .result()
        .during(|| format!("cuIpcOpenMemHandle ({what})"))?;
        Ok(IpcMapping {
            slice: DevSlice { ptr, bytes },
            vmm: None,
            _gpu: self.clone(),
        })
    }
}

/// An address range in device memory that this process may use (owned or mapped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevSlice {
    /// Device address.
    pub ptr: sys::CUdeviceptr,
    /// Size in bytes.
    pub bytes: usize,
}

impl DevSlice {
    /// The first `bytes` of this range (all of it when it is shorter).
    pub fn prefix(&self, bytes: u64) -> DevSlice {
        DevSlice {
            ptr: self.ptr,
            bytes: self.bytes.min(usize::try_from(bytes).unwrap_or(usize::MAX)),
        }
    }

    /// The range from `offset` bytes into this one to its end (empty past the end).
    pub fn past(&self, offset: u64) -> DevSlice {
        let offset = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.bytes);
        DevSlice {
            ptr: self.ptr + offset as u64,
            bytes: self.bytes - offset,
        }
    }

    /// Fills every byte with `value` on `stream`.
    pub fn memset(&self, value: u8, stream: sys::CUstream) -> Result<(), CudaError> {
        if self.bytes == 0 {
            return Ok(());
        }
        // SAFETY: the range belongs to a live allocation or mapping of this process (the
        // owner outlives the call: every caller holds it).
        unsafe { sys::cuMemsetD8Async(self.ptr, value, self.bytes, stream) }
            .result()
            .during(|| format!("cuMemsetD8Async of {} bytes", self.bytes))
    }

    /// Fills whole 32-bit words with `value` on `stream` (a trailing partial word is left).
    pub fn memset_words(&self, value: u32, stream: sys::CUstream) -> Result<(), CudaError> {
        if self.bytes < 4 {
            return Ok(());
        }
        // SAFETY: as in `memset`; bytes / 4 words fit in the range.
        unsafe { sys::cuMemsetD32Async(self.ptr, value, self.bytes / 4, stream) }
            .result()
            .during(|| format!("cuMemsetD32Async of {} bytes", self.bytes))
    }

    /// Copies all of `src` into this range on `stream` (sizes must match).
    pub fn copy_from(&self, src: DevSlice, stream: sys::CUstream) -> Result<(), CudaError> {
        if src.bytes != self.bytes {
            return Err(CudaError {
                code: -1,
                name: "SIZE_MISMATCH".into(),
                during: format!("copy of {} bytes into {}", src.bytes, self.bytes),
            });
        }
        if self.bytes == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are live and `bytes` long.
        unsafe { result::memcpy_dtod_async(self.ptr, src.ptr, self.bytes, stream) }
            .during(|| "cuMemcpyDtoDAsync".into())
    }

    /// Reads `len` bytes at `offset` to the host (synchronous; zeros outside the range).
    pub fn read(&self, offset: usize, len: usize) -> Result<Vec<u8>, CudaError> {
        let mut out = vec![0u8; len];
        if len == 0 || offset.checked_add(len).is_none_or(|end| end > self.bytes) {
            return Ok(out);
        }
        // SAFETY: range checked above.
        unsafe { result::memcpy_dtoh_sync(&mut out, self.ptr + offset as u64) }
            .during(|| "cuMemcpyDtoH".into())?;
        Ok(out)
    }

    /// Writes host bytes at offset 0 (ignored when they do not fit); the bytes are on the
    /// device when it returns.
    ///
    /// `cuMemcpyHtoD` alone is not enough: from pageable memory it returns once the bytes
    /// are staged, with the DMA possibly still in flight on the legacy stream, and launches
    /// on the context's stream (created non-blocking) do not wait for that stream. A kernel
    /// launched right after could read the buffer's old contents: the originals check once
    /// saw the gather reference read stale indices that way. The context is synchronised.
    pub fn write(&self, data: &[u8]) -> Result<(), CudaError> {
        if data.is_empty() || data.len() > self.bytes {
            return Ok(());
        }
        // SAFETY: size checked above.
        unsafe { result::memcpy_htod_sync(self.ptr, data) }.during(|| "cuMemcpyHtoD".into())?;
        // SAFETY: waits for the current (this buffer's) context; no pointers involved.
        unsafe { sys::cuCtxSynchronize() }
            .result()
            .during(|| "cuCtxSynchronize after cuMemcpyHtoD".into())
    }
}

/// The 64 bytes that let another process map a [`DeviceBuffer`] (`cuIpcGetMemHandle`).
pub type IpcHandle = [u8; 64];

/// Another process's device memory, mapped into this one; unmapped on drop.
pub struct IpcMapping {
    slice: DevSlice,
    /// Set for memory imported through the VMM API (unmapped and released on drop).
    vmm: Option<Vmm>,
    _gpu: Gpu,
}

/// A physical allocation of the VMM API mapped at `ptr` over `size` bytes.
#[derive(Debug, Clone, Copy)]
struct Vmm {
    handle: sys::CUmemGenericAllocationHandle,
    size: usize,
}

impl Vmm {
    /// Waits for the context's work (unlike cuMemFree, cuMemUnmap does not: a scrub still
    /// in flight would fault on the unmapped range), then unmaps, frees the address range
    /// and releases the allocation (errors after a sticky fault are moot).
    fn release(&self, ptr: sys::CUdeviceptr) {
        // SAFETY: mapped once at ptr over size, undone once here; the context is current.
        unsafe {
            let _ = sys::cuCtxSynchronize();
            let _ = sys::cuMemUnmap(ptr, self.size);
            let _ = sys::cuMemAddressFree(ptr, self.size);
            let _ = sys::cuMemRelease(self.handle);
        }
    }
}

/// Allocation properties of memory this GPU can export as a POSIX file descriptor.
fn shareable_prop(device: i32) -> sys::CUmemAllocationProp {
    // SAFETY: an all-zero CUmemAllocationProp is valid (no flags, no metadata).
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes =
        sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop
}

/// `bytes` rounded up to the recommended granularity of shareable memory (both sides of a
/// share compute the same size).
fn shareable_size(device: i32, bytes: usize) -> Result<usize, CudaError> {
    let prop = shareable_prop(device);
    let mut granularity = 0usize;
    // SAFETY: out-parameter; prop is valid.
    unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut granularity,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        )
    }
    .result()
    .during(|| "cuMemGetAllocationGranularity".into())?;
    let g = granularity.max(1);
    Ok(bytes.max(1).div_ceil(g) * g)
}

/// Reserves an address range of `size`, maps `handle` there and makes it readable and
/// writable from `device`; releases the handle on failure.
fn map_vmm(
    device: i32,
    handle: sys::CUmemGenericAllocationHandle,
    size: usize,
    what: &str,
) -> Result<sys::CUdeviceptr, CudaError> {
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: out-parameter; a fresh range of `size` bytes.
    let reserved = unsafe { sys::cuMemAddressReserve(&mut ptr, size, 0, 0, 0) }
        .result()
        .during(|| format!("cuMemAddressReserve ({what})"));
    if let Err(e) = reserved {
        // SAFETY: the handle is ours and not mapped.
        unsafe {
            let _ = sys::cuMemRelease(handle);
        }
        return Err(e);
    }
    let access = sys::CUmemAccessDesc {
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: device,
        },
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: ptr..ptr+size was reserved above for this handle of at least `size` bytes.
    let mapped = unsafe { sys::cuMemMap(ptr, size, 0, handle, 0) }
        .result()
        .during(|| format!("cuMemMap ({what})"))
        .and_then(|_| {
            // SAFETY: the range is mapped.
            unsafe { sys::cuMemSetAccess(ptr, size, &access, 1) }
                .result()
                .during(|| format!("cuMemSetAccess ({what})"))
        });
    if let Err(e) = mapped {
        Vmm { handle, size }.release(ptr);
        return Err(e);
    }
    Ok(ptr)
}

impl IpcMapping {
    /// The mapped range.
    pub fn slice(&self) -> DevSlice {
        self.slice
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        match self.vmm {
            Some(v) => v.release(self.slice.ptr),
            // SAFETY: opened once by `open_ipc`, closed once here.
            None => unsafe {
                let _ = sys::cuIpcCloseMemHandle(self.slice.ptr);
            },
        }
    }
}

/// Device memory, freed on drop.
pub struct DeviceBuffer {
    /// Device address.
    pub ptr: sys::CUdeviceptr,
    /// Size in bytes.
    pub bytes: usize,
    /// Set for shareable memory (the VMM API) instead of cuMemAlloc's.
    vmm: Option<Vmm>,
    _gpu: Gpu,
}

impl DeviceBuffer {
    /// The owned range.
    pub fn slice(&self) -> DevSlice {
        DevSlice {
            ptr: self.ptr,
            bytes: self.bytes,
        }
    }

    /// Everything a kernel can address through this buffer without a fault: the asked-for
    /// bytes and, for shareable memory, the rest of the mapping up to its granularity.
    pub fn mapped(&self) -> DevSlice {
        DevSlice {
            ptr: self.ptr,
            bytes: self
                .vmm
                .as_ref()
                .map_or(self.bytes, |v| v.size.max(self.bytes)),
        }
    }

    /// The handle another process opens with [`IpcMapping::open`].
    pub fn ipc_handle(&self) -> Result<IpcHandle, CudaError> {
        let mut raw = sys::CUipcMemHandle_st { reserved: [0; 64] };
        // SAFETY: out-parameter; ptr is a live cuMemAlloc allocation.
        unsafe { sys::cuIpcGetMemHandle(&mut raw, self.ptr) }
            .result()
            .during(|| format!("cuIpcGetMemHandle ({} bytes)", self.bytes))?;
        let mut h = [0u8; 64];
        for (d, s) in h.iter_mut().zip(raw.reserved.iter()) {
            *d = *s as u8;
        }
        Ok(h)
    }

    /// A file descriptor another process maps with [`Gpu::import_shared`] (shareable
    /// buffers from [`Gpu::alloc_shared`] only).
    pub fn export_fd(&self) -> Result<std::os::fd::OwnedFd, CudaError> {
        let Some(v) = self.vmm else {
            return Err(CudaError {
                code: -1,
                name: "NOT_SHAREABLE".into(),
                during: "exporting a buffer that was not allocated shareable".into(),
            });
        };
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: out-parameter of the POSIX file descriptor handle type (an int).
        unsafe {
            sys::cuMemExportToShareableHandle(
                (&mut fd as *mut std::ffi::c_int).cast(),
                v.handle,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        }
        .result()
        .during(|| format!("cuMemExportToShareableHandle ({} bytes)", self.bytes))?;
        // SAFETY: the driver handed us a new descriptor that nothing else owns.
        Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    }

    /// Overwrites the contents with 0xFF, so that whatever allocates this memory next finds
    /// nothing of ours (enqueued: device memsets do not wait; the free waits for it).
    pub fn scrub(&self) {
        // SAFETY: memset of owned memory; an error after a sticky fault is moot.
        unsafe {
            let _ = sys::cuMemsetD8_v2(self.ptr, 0xFF, self.bytes);
        }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        match self.vmm {
            Some(v) => v.release(self.ptr),
            // SAFETY: allocated by malloc_sync, freed once; its context is alive (we hold a
            // handle). Errors after a sticky fault are moot.
            None => unsafe {
                let _ = result::free_sync(self.ptr);
            },
        }
    }
}
