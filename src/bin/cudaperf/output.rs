//! Writing results: JSON files written whole (a run cut short never leaves half a file),
//! output folders checked before long work starts, and the date stamped on timings.

use std::path::{Path, PathBuf};

/// A result that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A folder could not be created.
    #[error("cannot create {path}: {source}")]
    CreateDir {
        /// The folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The value could not be turned into JSON.
    #[error("cannot serialise {what} as JSON: {source}")]
    Json {
        /// What was being written.
        what: &'static str,
        /// The serialiser's error.
        source: serde_json::Error,
    },
}

/// `value` as pretty JSON.
pub fn pretty(what: &'static str, value: &impl serde::Serialize) -> Result<String, OutputError> {
    serde_json::to_string_pretty(value).map_err(|source| OutputError::Json { what, source })
}

/// Writes `text` to `path`.
pub fn write_text(path: &Path, text: impl AsRef<[u8]>) -> Result<(), OutputError> {
    std::fs::write(path, text).map_err(|source| OutputError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `value` as pretty JSON to `out` through a temporary file and a rename, creating
/// the folder if needed.
pub fn write_json(out: &Path, value: &impl serde::Serialize) -> Result<(), OutputError> {
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| OutputError::CreateDir {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    let text = pretty("the result", value)?;
    let tmp = out.with_extension("json.tmp");
    write_text(&tmp, text + "\n")?;
    std::fs::rename(&tmp, out).map_err(|source| OutputError::Write {
        path: out.to_path_buf(),
        source,
    })
}

/// Creates `dir` if needed and checks that files can be written in it.
pub fn check_writable_dir(dir: &Path) -> std::io::Result<()> {
    if dir.exists() && !dir.is_dir() {
        return Err(std::io::Error::other("exists and is not a folder"));
    }
    std::fs::create_dir_all(dir)?;
    let probe = dir.join(format!(".cudaperf-write-check.{}", std::process::id()));
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

/// Checks that `file` can be written (its folder is created if needed).
pub fn check_output_file(file: &Path) -> std::io::Result<()> {
    if file.is_dir() {
        return Err(std::io::Error::other("is a folder"));
    }
    match file.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => check_writable_dir(parent),
        None => check_writable_dir(Path::new(".")),
    }
}

/// Today's UTC date as YYYY-MM-DD (civil-from-days, no date crate needed).
pub fn today() -> String {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() / 86400)
        .unwrap_or(0) as i64;
    civil_date(days)
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    /// Dates on both sides of a leap day and of the epoch.
    #[test]
    fn civil_dates() {
        assert_eq!(super::civil_date(0), "1970-01-01");
        assert_eq!(super::civil_date(11_016), "2000-02-29");
        assert_eq!(super::civil_date(20_789), "2026-12-02");
        assert_eq!(super::civil_date(-1), "1969-12-31");
    }
}
