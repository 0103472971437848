//! The buffer cap a task is validated against: how many bytes of ABI buffers one input
//! configuration may need. It follows the device's memory where the driver reports one
//! (full-size problems such as KernelBench's level-1 ReLU, 4096 × 393216 fp32 = 12.9 GB of
//! buffers, fit an H200), keeps a fixed 8 GiB where no device is known (a CPU-only machine
//! that only compiles or exports), and can be set explicitly (`--max-buffer-gib`).

/// Bytes in a GiB.
const GIB: f64 = (1u64 << 30) as f64;

/// Limits applied when validating a task.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskLimits {
    /// Largest total of buffer bytes one config may need (default
    /// [`TaskLimits::DEFAULT_MAX_BUFFER_BYTES`], 8 GiB; [`TaskLimits::for_device_memory`]
    /// for a known device).
    pub max_buffer_bytes: u64,
}

impl Default for TaskLimits {
    fn default() -> Self {
        TaskLimits {
            max_buffer_bytes: Self::DEFAULT_MAX_BUFFER_BYTES,
        }
    }
}

/// A buffer cap that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitError {
    /// The cap in GiB is not a positive finite number, or is too large to count in bytes.
    #[error("buffer cap of {gib} GiB: expected a positive number of GiB below 2^33")]
    BadGib {
        /// The value given.
        gib: f64,
    },
}

impl TaskLimits {
    /// The cap where no device is known: 8 GiB.
    pub const DEFAULT_MAX_BUFFER_BYTES: u64 = 8 << 30;

    /// The share of a device's memory a task's buffers may take: one candidate's job holds
    /// the reference's buffers, the harness's generated copy of the inputs, the candidate's
    /// buffers and a saved copy of its outputs — about three times the ABI's bytes — plus
    /// scratch and the contexts, so a quarter of the memory is the largest task that a job
    /// can always place.
    pub const DEVICE_SHARE: u64 = 4;

    /// The cap for a device with `memory_bytes` of memory (a quarter of it, see
    /// [`TaskLimits::DEVICE_SHARE`]); a device that reports no memory (0) keeps the default.
    ///
    /// ```
    /// use cudaperf::task::TaskLimits;
    /// // An H200 reports 150,754,820,096 bytes: the cap is 35.1 GiB.
    /// let l = TaskLimits::for_device_memory(150_754_820_096);
    /// assert_eq!(l.max_buffer_bytes, 37_688_705_024);
    /// assert_eq!(TaskLimits::for_device_memory(0), TaskLimits::default());
    /// ```
    pub fn for_device_memory(memory_bytes: u64) -> TaskLimits {
        if memory_bytes == 0 {
            return TaskLimits::default();
        }
        TaskLimits {
            max_buffer_bytes: memory_bytes / Self::DEVICE_SHARE,
        }
    }

    /// An explicit cap in GiB (the CLI's `--max-buffer-gib`); fractions allowed.
    ///
    /// ```
    /// use cudaperf::task::TaskLimits;
    /// assert_eq!(TaskLimits::from_gib(16.0)?.max_buffer_bytes, 16 << 30);
    /// assert!(TaskLimits::from_gib(-1.0).is_err());
    /// # Ok::<(), cudaperf::task::LimitError>(())
    /// ```
    pub fn from_gib(gib: f64) -> Result<TaskLimits, LimitError> {
        let bytes = gib * GIB;
        if !(gib.is_finite() && gib > 0.0 && bytes >= 1.0 && gib < (1u64 << 33) as f64) {
            return Err(LimitError::BadGib { gib });
        }
        Ok(TaskLimits {
            max_buffer_bytes: bytes as u64,
        })
    }

    /// The error text for a config over the cap: the config, both numbers, and how to
    /// raise the cap.
    pub(crate) fn over_cap(&self, config: &str, bytes: u64) -> String {
        format!(
            "config `{config}` needs {bytes} bytes ({:.2} GiB) of buffers, more than the cap of {} bytes ({:.2} GiB); raise it with TaskLimits::max_buffer_bytes or the CLI's --max-buffer-gib (default: a quarter of the device's memory, 8 GiB without a device)",
            bytes as f64 / GIB,
            self.max_buffer_bytes,
            self.max_buffer_bytes as f64 / GIB
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_share_is_a_quarter() {
        // 141 GiB device: the KernelBench ReLU problem's 12.9 GB must fit.
        let l = TaskLimits::for_device_memory(141 << 30);
        assert_eq!(l.max_buffer_bytes, (141u64 << 30) / 4);
        assert!(l.max_buffer_bytes > 4096 * 393216 * 4 * 2);
    }

    #[test]
    fn gib_values_checked() {
        assert_eq!(TaskLimits::from_gib(0.5).unwrap().max_buffer_bytes, 1 << 29);
        for bad in [0.0, -3.0, f64::NAN, f64::INFINITY, 1e-12, 1e12] {
            assert!(TaskLimits::from_gib(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn message_names_config_and_both_numbers() {
        let m = TaskLimits::default().over_cap("full", 12_884_901_888);
        assert!(m.contains("`full`"), "{m}");
        assert!(m.contains("12884901888 bytes (12.00 GiB)"), "{m}");
        assert!(m.contains("8589934592 bytes (8.00 GiB)"), "{m}");
        assert!(m.contains("--max-buffer-gib"), "{m}");
    }
}
