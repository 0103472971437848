//! Static theoretical occupancy, following the rules of NVIDIA's occupancy
//! calculator (`cuda_occupancy.h`):
//!
//! * warps per block = ⌈threads / 32⌉;
//! * registers are allocated per warp, rounded up to the allocation unit (256):
//!   `regs_per_warp = ⌈regs × 32 / 256⌉ × 256`; the register file is split into
//!   4 sub-partitions, each holding `⌊(regs_per_SM / 4) / regs_per_warp⌋` warps,
//!   so the register limit is `⌊4 × that / warps_per_block⌋` blocks;
//! * shared memory per block = `⌈(static + dynamic + reserved) / granularity⌉ ×
//!   granularity`, with 1 KiB reserved per block on sm_80 and later, and the limit
//!   is `⌊shared_per_SM / that⌋` blocks;
//! * the warp limit is `⌊max_warps_per_SM / warps_per_block⌋`, the block limit
//!   the hardware's maximum resident blocks per SM;
//! * occupancy = `min(limits) × warps_per_block / max_warps_per_SM`.

use serde::{Deserialize, Serialize};

/// Per-SM resources of one GPU model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSpec {
    /// Marketing name (`"H100"`).
    pub name: &'static str,
    /// Compute capability as `major * 10 + minor` (90 for sm_90).
    pub sm: u32,
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Maximum resident threads per SM.
    pub max_threads_per_sm: u32,
    /// Maximum resident blocks per SM.
    pub max_blocks_per_sm: u32,
    /// Maximum resident warps per SM.
    pub max_warps_per_sm: u32,
    /// Maximum threads per block.
    pub max_threads_per_block: u32,
    /// 32-bit registers per SM.
    pub registers_per_sm: u32,
    /// Registers are allocated per warp in multiples of this.
    pub register_allocation_unit: u32,
    /// Maximum registers per thread.
    pub max_registers_per_thread: u32,
    /// Shared memory per SM usable by blocks, bytes (maximum carve-out).
    pub shared_per_sm: u32,
    /// Maximum shared memory per block (opt-in), bytes.
    pub shared_per_block: u32,
    /// Shared memory allocation granularity, bytes.
    pub shared_allocation_unit: u32,
    /// Shared memory the system reserves per block, bytes.
    pub shared_reserved_per_block: u32,
}

const SM90: DeviceSpec = DeviceSpec {
    name: "H100",
    sm: 90,
    sms: 132,
    max_threads_per_sm: 2048,
    max_blocks_per_sm: 32,
    max_warps_per_sm: 64,
    max_threads_per_block: 1024,
    registers_per_sm: 65536,
    register_allocation_unit: 256,
    max_registers_per_thread: 255,
    shared_per_sm: 228 * 1024,
    shared_per_block: 227 * 1024,
    shared_allocation_unit: 128,
    shared_reserved_per_block: 1024,
};

const SM89: DeviceSpec = DeviceSpec {
    name: "L40",
    sm: 89,
    sms: 142,
    max_threads_per_sm: 1536,
    max_blocks_per_sm: 24,
    max_warps_per_sm: 48,
    shared_per_sm: 100 * 1024,
    shared_per_block: 99 * 1024,
    ..SM90
};

/// The device table: H200 and H100 (sm_90), A100 (sm_80), L40 and RTX 4090 (sm_89).
pub const DEVICES: &[DeviceSpec] = &[
    DeviceSpec {
        name: "H200",
        ..SM90
    },
    SM90,
    DeviceSpec {
        name: "A100",
        sm: 80,
        sms: 108,
        shared_per_sm: 164 * 1024,
        shared_per_block: 163 * 1024,
        ..SM90
    },
    SM89,
    DeviceSpec {
        name: "RTX 4090",
        sms: 128,
        ..SM89
    },
];

impl DeviceSpec {
    /// Looks a device up by name, case-insensitively (`"h100"`, `"RTX 4090"`).
    pub fn by_name(name: &str) -> Option<&'static DeviceSpec> {
        DEVICES
            .iter()
            .find(|d| d.name.eq_ignore_ascii_case(name.trim()))
    }
}

/// The resource that bounds resident blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limiter {
    /// The maximum number of resident warps (threads) per SM.
    Warps,
    /// Registers per SM.
    Registers,
    /// Shared memory per SM.
    SharedMemory,
    /// The maximum number of resident blocks per SM.
    Blocks,
}

impl Limiter {
    /// The snake_case name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Limiter::Warps => "warps",
            Limiter::Registers => "registers",
            Limiter::SharedMemory => "shared_memory",
            Limiter::Blocks => "blocks",
        }
    }
}

impl std::fmt::Display for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Theoretical occupancy of one launch configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Occupancy {
    /// Resident blocks per SM.
    pub active_blocks_per_sm: u32,
    /// Resident warps per SM.
    pub active_warps_per_sm: u32,
    /// The device's maximum warps per SM.
    pub max_warps_per_sm: u32,
    /// `active_warps_per_sm / max_warps_per_sm`, in `[0, 1]`.
    pub occupancy: f64,
    /// What bounds it (ties resolve in the order warps, registers, shared memory, blocks).
    pub limiter: Limiter,
}

/// A launch configuration that cannot run at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OccupancyError {
    /// Block size 0 or above the device maximum.
    #[error("block size {block_size} is outside 1..={max} for {device}")]
    InvalidBlockSize {
        /// Requested threads per block.
        block_size: u32,
        /// The device limit.
        max: u32,
        /// Device name.
        device: &'static str,
    },
    /// More registers than a thread or a block may have.
    #[error(
        "{registers} registers per thread with {block_size} threads exceed the limits of {device}"
    )]
    TooManyRegisters {
        /// Registers per thread.
        registers: u32,
        /// Threads per block.
        block_size: u32,
        /// Device name.
        device: &'static str,
    },
    /// More shared memory than one block may have.
    #[error("{bytes} bytes of shared memory per block exceed the {max}-byte limit of {device}")]
    SharedMemoryTooLarge {
        /// Requested static + dynamic bytes.
        bytes: u64,
        /// The device limit.
        max: u32,
        /// Device name.
        device: &'static str,
    },
}

fn round_up(v: u64, unit: u64) -> u64 {
    if unit == 0 {
        v
    } else {
        v.div_ceil(unit) * unit
    }
}

/// Theoretical occupancy of a kernel using `registers` per thread and
/// `static_shared + dynamic_shared` bytes of shared memory, launched with
/// `block_size` threads per block, on `spec` (formula in the module docs).
///
/// `registers == 0` (unknown) imposes no register limit.
pub fn occupancy(
    spec: &DeviceSpec,
    registers: u32,
    static_shared: u64,
    dynamic_shared: u64,
    block_size: u32,
) -> Result<Occupancy, OccupancyError> {
    if block_size == 0 || block_size > spec.max_threads_per_block {
        return Err(OccupancyError::InvalidBlockSize {
            block_size,
            max: spec.max_threads_per_block,
            device: spec.name,
        });
    }
    let warps_per_block = block_size.div_ceil(32);
    let too_many_regs = OccupancyError::TooManyRegisters {
        registers,
        block_size,
        device: spec.name,
    };
    let reg_limit = if registers == 0 {
        u32::MAX
    } else {
        if registers > spec.max_registers_per_thread {
            return Err(too_many_regs);
        }
        let per_warp = round_up(
            u64::from(registers) * 32,
            u64::from(spec.register_allocation_unit),
        );
        if per_warp * u64::from(warps_per_block) > u64::from(spec.registers_per_sm) {
            return Err(too_many_regs);
        }
        let per_partition = u64::from(spec.registers_per_sm / 4) / per_warp;
        u32::try_from(per_partition * 4 / u64::from(warps_per_block)).unwrap_or(u32::MAX)
    };
    let user_shared = static_shared.saturating_add(dynamic_shared);
    if user_shared > u64::from(spec.shared_per_block) {
        return Err(OccupancyError::SharedMemoryTooLarge {
            bytes: user_shared,
            max: spec.shared_per_block,
            device: spec.name,
        });
    }
    let per_block = round_up(
        user_shared + u64::from(spec.shared_reserved_per_block),
        u64::from(spec.shared_allocation_unit),
    );
    let smem_limit = u64::from(spec.shared_per_sm)
        .checked_div(per_block)
        .map_or(u32::MAX, |b| u32::try_from(b).unwrap_or(u32::MAX));
    let warp_limit = (spec.max_warps_per_sm / warps_per_block)
        .min(spec.max_threads_per_sm / (warps_per_block * 32));
    let limits = [
        (warp_limit, Limiter::Warps),
        (reg_limit, Limiter::Registers),
        (smem_limit, Limiter::SharedMemory),
        (spec.max_blocks_per_sm, Limiter::Blocks),
    ];
    let (blocks, limiter) = limits
        .iter()
        .copied()
        .fold((u32::MAX, Limiter::Warps), |best, l| {
            if l.0 < best.0 {
                l
            } else {
                best
            }
        });
    let warps = blocks * warps_per_block;
    Ok(Occupancy {
        active_blocks_per_sm: blocks,
        active_warps_per_sm: warps,
        max_warps_per_sm: spec.max_warps_per_sm,
        occupancy: f64::from(warps) / f64::from(spec.max_warps_per_sm),
        limiter,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(n: &str) -> &'static DeviceSpec {
        DeviceSpec::by_name(n).unwrap()
    }

    #[test]
    fn full_occupancy_at_32_registers() {
        let o = occupancy(dev("H100"), 32, 0, 0, 256).unwrap();
        assert_eq!(o.occupancy, 1.0);
        assert_eq!(o.active_blocks_per_sm, 8);
    }

    #[test]
    fn sixty_four_registers_halve_occupancy() {
        let o = occupancy(dev("H200"), 64, 0, 0, 256).unwrap();
        assert_eq!(o.occupancy, 0.5);
        assert_eq!(o.limiter, Limiter::Registers);
    }

    #[test]
    fn register_allocation_rounds_per_warp() {
        // 40 regs * 32 = 1280 per warp (already a multiple of 256): 16384/1280 = 12 warps
        // per sub-partition, 48 per SM, 6 blocks of 8 warps = 75%.
        let o = occupancy(dev("A100"), 40, 0, 0, 256).unwrap();
        assert_eq!(o.active_warps_per_sm, 48);
        assert_eq!(o.limiter, Limiter::Registers);
    }

    #[test]
    fn shared_memory_limits_with_reserved_kilobyte() {
        // 48 KiB + 1 KiB reserved = 49 KiB per block; 228 KiB / 49 KiB = 4 blocks.
        let o = occupancy(dev("H100"), 32, 48 * 1024, 0, 256).unwrap();
        assert_eq!(o.active_blocks_per_sm, 4);
        assert_eq!(o.limiter, Limiter::SharedMemory);
        assert_eq!(o.occupancy, 0.5);
        // sm_89: 100 KiB / 49 KiB = 2 blocks of 8 warps of 48 = 1/3.
        let o = occupancy(dev("RTX 4090"), 32, 48 * 1024, 0, 256).unwrap();
        assert_eq!(o.active_blocks_per_sm, 2);
    }

    #[test]
    fn small_blocks_hit_the_block_limit() {
        let o = occupancy(dev("H100"), 16, 0, 0, 32).unwrap();
        assert_eq!(o.limiter, Limiter::Blocks);
        assert_eq!(o.occupancy, 0.5);
        let o = occupancy(dev("L40"), 16, 0, 0, 32).unwrap();
        assert_eq!(o.active_blocks_per_sm, 24);
        assert_eq!(o.occupancy, 0.5);
    }

    #[test]
    fn sm89_warp_limit() {
        let o = occupancy(dev("L40"), 32, 0, 0, 1024).unwrap();
        assert_eq!(o.active_blocks_per_sm, 1);
        assert_eq!(o.limiter, Limiter::Warps);
        assert!((o.occupancy - 32.0 / 48.0).abs() < 1e-12);
    }

    #[test]
    fn impossible_launches_are_errors() {
        assert!(occupancy(dev("H100"), 32, 0, 0, 0).is_err());
        assert!(occupancy(dev("H100"), 32, 0, 0, 2048).is_err());
        assert!(occupancy(dev("H100"), 256, 0, 0, 128).is_err());
        assert!(occupancy(dev("H100"), 128, 0, 0, 1024).is_err());
        assert!(occupancy(dev("A100"), 32, 200 * 1024, 0, 128).is_err());
    }
}
