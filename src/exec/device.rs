//! What the harness knows about the device: its attributes and the datasheet ceilings that
//! bound how fast any correct kernel can be.

use cudarc::driver::sys::CUdevice_attribute as Attr;

use super::driver::Gpu;
use super::report::DeviceInfo;

/// Datasheet memory bandwidth, GB/s, by device name. The floor must be a true upper bound
/// on speed, so datasheet peaks rather than measured copies.
pub fn table_bandwidth(name: &str) -> Option<f64> {
    lookup(
        name,
        &[
            ("H200", 4800.0),
            ("H100 PCIE", 2000.0),
            ("H100", 3350.0),
            ("A100-SXM4-80GB", 2039.0),
            ("A100 80GB PCIE", 1935.0),
            ("A100", 1555.0),
            ("L40", 864.0),
            ("RTX 4090", 1008.0),
            ("B200", 8000.0),
        ],
    )
}

/// Datasheet peak arithmetic rate, TFLOP/s: dense FP16/BF16 on the tensor cores, the fastest
/// format whose precision can pass a float task's tolerance (FP8 cannot), so no honest
/// kernel is faster than FLOPs / this rate.
pub fn table_peak_tflops(name: &str) -> Option<f64> {
    lookup(
        name,
        &[
            ("H200", 989.0),
            ("H100 PCIE", 756.0),
            ("H100", 989.0),
            ("A100", 312.0),
            ("L40", 181.0),
            ("RTX 4090", 330.0),
            ("B200", 2250.0),
        ],
    )
}

/// Peak DRAM bandwidth in GB/s from the driver's memory clock (kHz) and bus width (bits),
/// double data rate; `None` when the driver reports nothing usable.
fn attribute_bandwidth(clock_khz: i32, bus_bits: i32) -> Option<f64> {
    (clock_khz > 0 && bus_bits > 0)
        .then(|| f64::from(clock_khz) * 1e3 * 2.0 * f64::from(bus_bits) / 8.0 / 1e9)
}

fn lookup(name: &str, table: &[(&str, f64)]) -> Option<f64> {
    let n = name.to_ascii_uppercase();
    table.iter().find(|(k, _)| n.contains(k)).map(|(_, v)| *v)
}

/// The device's description for reports, and the warps per multiprocessor.
pub(crate) fn describe(gpu: &Gpu) -> Result<(DeviceInfo, i32), String> {
    let attr = |a| gpu.attribute(a).map_err(|e| e.to_string());
    let major = attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let sms = attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let l2 = attr(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?;
    let max_threads = attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?;
    let pageable = attr(Attr::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS).unwrap_or(0);
    let name = gpu.name();
    // A device missing from the table still gets a bytes floor (the roofline reward term
    // needs one) from its memory clock and bus width: the theoretical peak, an upper bound.
    let attribute_bw = || {
        let clock = attr(Attr::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE).ok()?;
        let bus = attr(Attr::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH).ok()?;
        attribute_bandwidth(clock, bus)
    };
    Ok((
        DeviceInfo {
            bandwidth_gbps: table_bandwidth(&name).or_else(attribute_bw).unwrap_or(0.0),
            peak_tflops: table_peak_tflops(&name).unwrap_or(0.0),
            compute_capability: (major, minor),
            driver_version: Gpu::driver_version(),
            sms,
            l2_bytes: l2 as i64,
            memory_bytes: gpu.total_memory(),
            pageable_memory_access: pageable != 0,
            name,
        },
        (max_threads / 32).max(1),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_table() {
        assert_eq!(table_bandwidth("NVIDIA H200"), Some(4800.0));
        assert_eq!(table_bandwidth("NVIDIA H100 PCIe"), Some(2000.0));
        assert_eq!(table_bandwidth("NVIDIA H100 80GB HBM3"), Some(3350.0));
        assert_eq!(table_bandwidth("Mystery GPU"), None);
    }

    #[test]
    fn bandwidth_from_attributes() {
        // An H100 SXM's HBM3: 2619 MHz, 5120-bit bus -> 3352 GB/s (the table's 3350).
        let bw = attribute_bandwidth(2_619_000, 5120).unwrap();
        assert!((bw - 3352.3).abs() < 1.0, "{bw}");
        assert_eq!(attribute_bandwidth(0, 5120), None);
        assert_eq!(attribute_bandwidth(2_619_000, -1), None);
    }

    #[test]
    fn peak_table() {
        assert_eq!(table_peak_tflops("NVIDIA H200"), Some(989.0));
        assert_eq!(table_peak_tflops("NVIDIA A100-SXM4-80GB"), Some(312.0));
        assert_eq!(table_peak_tflops("Mystery GPU"), None);
    }
}
