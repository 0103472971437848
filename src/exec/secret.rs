//! The job's secret and every seed derived from it, in one place.
//!
//! A job's [`JobSecret`] is drawn fresh for every job ([`fresh_secret`], or pinned with
//! `ExecOptions::seed`) and never reaches a candidate's process. Every seed of the job
//! derives from it: input sets, the timing schedule and the bootstrap per purpose
//! ([`domain`], [`derive_seed`]), and each buffer of an input set from that set's seed
//! ([`buffer_seed`]). Element generators hash with [`mix64`] (the host's in
//! [`crate::inputs`], the device's in `support.cu`).

use serde::{Deserialize, Serialize};

/// A job's secret: every seed of the job derives from it. Serialised as the bare number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobSecret(pub u64);

impl JobSecret {
    /// A fresh secret ([`fresh_secret`]).
    pub fn fresh() -> JobSecret {
        JobSecret(fresh_secret())
    }

    /// The seed for purpose `domain`, index `i` ([`derive_seed`] of this secret).
    pub fn derive(self, domain: u64, i: u64) -> u64 {
        derive_seed(self.0, domain, i)
    }
}

/// 64 bits from the operating system's random source (the time and process id mixed, if
/// that cannot be read), so that a job's secret cannot be predicted from the outside.
pub fn fresh_secret() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_le_bytes(b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    (t as u64) ^ ((t >> 64) as u64) ^ (std::process::id() as u64).rotate_left(32)
}

/// A seed for purpose `domain`, index `i`, derived from a job's secret (splitmix64 steps:
/// every derived seed is unrelated to the others for anyone without the secret).
pub fn derive_seed(secret: u64, domain: u64, i: u64) -> u64 {
    let z =
        secret ^ domain.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    mix64(mix64(z))
}

/// Purposes of derived seeds.
pub mod domain {
    /// Input set A of config `k` (index = k).
    pub const SET_A: u64 = 1;
    /// Input set B of config `k`.
    pub const SET_B: u64 = 2;
    /// Warm-up and timed runs (index = the run).
    pub const TIMED: u64 = 3;
    /// Reference calibration runs.
    pub const CALIBRATION: u64 = 4;
    /// The schedule's random stream.
    pub const SCHEDULE: u64 = 5;
    /// The bootstrap's random stream.
    pub const BOOTSTRAP: u64 = 6;
    /// Input regime `r` of config `k` (index = k << 16 | r).
    pub const REGIME: u64 = 7;
    /// The precision probe's input sets of config `k`.
    pub const PROBE: u64 = 8;
}

/// The seed of buffer `i` within an input set.
pub fn buffer_seed(seed: u64, i: usize) -> u64 {
    seed ^ 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1)
}

/// splitmix64's finaliser (with its increment), as `mix64` in `support.cu`.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix64_matches_splitmix64_reference_values() {
        // splitmix64 seeded with 0 yields these first outputs (state += golden gamma each).
        assert_eq!(mix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(mix64(0x9E37_79B9_7F4A_7C15), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn seeds_differ_by_secret_purpose_and_index() {
        let a = derive_seed(7, domain::TIMED, 0);
        assert_ne!(a, derive_seed(7, domain::TIMED, 1));
        assert_ne!(a, derive_seed(8, domain::TIMED, 0));
        assert_ne!(a, derive_seed(7, domain::SET_A, 0));
        assert_eq!(a, derive_seed(7, domain::TIMED, 0));
    }

    #[test]
    fn a_secret_serialises_as_its_number() {
        assert_eq!(serde_json::to_string(&JobSecret(42)).unwrap(), "42");
        let s: JobSecret = serde_json::from_str("7").unwrap();
        assert_eq!(s.derive(domain::TIMED, 0), derive_seed(7, domain::TIMED, 0));
    }
}
