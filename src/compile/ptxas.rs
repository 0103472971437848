//! Reading the ptxas `-v` report that NVRTC appends to its log.
//!
//! ```text
//! ptxas info    : Compiling entry function 'vector_add' for 'sm_90'
//! ptxas info    : Function properties for vector_add
//! ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//! ptxas info    : Used 12 registers, used 1 barriers, 1024 bytes smem, 384 bytes cmem[0]
//! ```

use serde::{Deserialize, Serialize};

/// Per-kernel resource usage reported by ptxas.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// Kernel name as launched (the lowered name is mapped back when known).
    pub name: String,
    /// Registers per thread.
    pub registers: u32,
    /// Bytes stored to local memory because registers ran out.
    pub spill_store_bytes: u32,
    /// Bytes loaded back from spills.
    pub spill_load_bytes: u32,
    /// Statically declared shared memory per block.
    pub static_smem_bytes: u32,
    /// Stack frame bytes per thread.
    pub stack_bytes: u32,
    /// Named barriers used.
    pub barriers: u32,
}

fn number_before(text: &str, suffix: &str) -> Option<u32> {
    let pos = text.find(suffix)?;
    text[..pos].split_whitespace().last()?.parse().ok()
}

/// Parses every entry function in a ptxas report. Names are the mangled (lowered) ones.
pub fn parse_resources(log: &str) -> Vec<Resources> {
    let mut out: Vec<Resources> = Vec::new();
    let mut current: Option<usize> = None;
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or("").to_string();
            current = Some(match out.iter().position(|r| r.name == name) {
                Some(i) => i,
                None => {
                    out.push(Resources {
                        name,
                        ..Default::default()
                    });
                    out.len() - 1
                }
            });
            continue;
        }
        if line.contains("Function properties for") {
            // Device functions have properties too; only entries were announced above.
            let name = line
                .split("Function properties for")
                .nth(1)
                .unwrap_or("")
                .trim();
            current = out.iter().position(|r| r.name == name);
            continue;
        }
        let Some(i) = current else { continue };
        let r = &mut out[i];
        if line.contains("bytes stack frame") {
            r.stack_bytes = number_before(line, "bytes stack frame").unwrap_or(0);
            r.spill_store_bytes = number_before(line, "bytes spill stores").unwrap_or(0);
            r.spill_load_bytes = number_before(line, "bytes spill loads").unwrap_or(0);
        } else if line.contains("Used ") && line.contains("registers") {
            r.registers = number_before(line, "registers").unwrap_or(0);
            r.barriers = number_before(line, "barriers").unwrap_or(0);
            r.static_smem_bytes = number_before(line, "bytes smem").unwrap_or(0);
        }
    }
    out
}

/// Removes the ptxas info lines (kept separately as [`Resources`]) from a log.
pub fn strip_info(log: &str) -> String {
    log.lines()
        .filter(|l| !(l.starts_with("ptxas info") || l.starts_with("ptxas         .")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Most static shared memory a kernel may declare (`__shared__` arrays), bytes.
pub const MAX_STATIC_SMEM_BYTES: u32 = 48 * 1024;

/// The error line for a failed compile whose log holds only ptxas info lines (NVRTC 13 does
/// not log ptxas's refusal of a kernel with more than 48 KiB of static shared memory; the
/// resources still show it). `kernels` are the resources parsed from `log`.
pub fn explain_silent_failure(log: &str, kernels: &[Resources]) -> String {
    let over: Vec<String> = kernels
        .iter()
        .filter(|k| k.static_smem_bytes > MAX_STATIC_SMEM_BYTES)
        .map(|k| {
            format!(
                "ptxas error   : Entry function '{}' uses too much shared data ({} bytes of static __shared__ memory, {} max)",
                k.name, k.static_smem_bytes, MAX_STATIC_SMEM_BYTES
            )
        })
        .collect();
    if !over.is_empty() {
        return over.join("\n");
    }
    let info: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    format!(
        "error: the compilation failed without an error message; the ptxas report was:\n{}",
        info.join("\n")
    )
}

/// Trims a log to at most `max_bytes`, keeping error lines (and the two lines after each,
/// where NVRTC prints the source line and a caret) before anything else, in original order.
pub fn trim_log(log: &str, max_bytes: usize) -> String {
    if log.len() <= max_bytes {
        return log.to_string();
    }
    let lines: Vec<&str> = log.lines().collect();
    let mut keep = vec![false; lines.len()];
    let mut budget = max_bytes;
    let is_error = |l: &str| l.contains("error") || l.contains("catastrophic");
    for (i, l) in lines.iter().enumerate() {
        if is_error(l) {
            for (j, ll) in lines.iter().enumerate().skip(i).take(3) {
                if !keep[j] && ll.len() < budget {
                    keep[j] = true;
                    budget -= ll.len() + 1;
                }
            }
        }
    }
    for (i, l) in lines.iter().enumerate() {
        if !keep[i] && l.len() < budget {
            keep[i] = true;
            budget -= l.len() + 1;
        }
    }
    let mut out = String::new();
    let mut skipped = 0;
    for (i, l) in lines.iter().enumerate() {
        if keep[i] {
            if skipped > 0 {
                out.push_str(&format!("[... {skipped} lines omitted ...]\n"));
                skipped = 0;
            }
            out.push_str(l);
            out.push('\n');
        } else {
            skipped += 1;
        }
    }
    if skipped > 0 {
        out.push_str(&format!("[... {skipped} lines omitted ...]\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'spill' for 'sm_90'
ptxas info    : Function properties for spill
ptxas         .     400 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 400 bytes cumulative stack size
ptxas info    : Compile time = 25.985 ms
ptxas info    : Function properties for _Z3bigPfi
ptxas         .     999 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z3redILi256EEvPf' for 'sm_90'
ptxas info    : Function properties for _Z3redILi256EEvPf
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 1024 bytes smem, 384 bytes cmem[0]
";

    #[test]
    fn parses_entries_and_ignores_device_functions() {
        let r = parse_resources(REPORT);
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0],
            Resources {
                name: "spill".into(),
                registers: 32,
                spill_store_bytes: 8,
                spill_load_bytes: 12,
                static_smem_bytes: 0,
                stack_bytes: 400,
                barriers: 0
            }
        );
        assert_eq!(r[1].name, "_Z3redILi256EEvPf");
        assert_eq!(
            (r[1].registers, r[1].barriers, r[1].static_smem_bytes),
            (12, 1, 1024)
        );
    }

    #[test]
    fn trim_keeps_errors_first() {
        let mut log = String::new();
        for i in 0..200 {
            log.push_str(&format!("warning: something boring {i}\n"));
        }
        log.push_str("x.cu(210): error: identifier \"foo\" is undefined\n  foo(1);\n  ^\n");
        let t = trim_log(&log, 300);
        assert!(t.len() <= 300 + 64, "{}", t.len());
        assert!(t.contains("identifier \"foo\" is undefined"));
        assert!(t.contains("  ^"));
        assert!(t.contains("lines omitted"));
    }

    /// Guards the NVRTC 13 behaviour: a kernel with 64 KiB of static shared memory fails to
    /// compile with only ptxas info lines in the log; the report must still say why.
    #[test]
    fn a_silent_ptxas_failure_is_explained() {
        let log = "ptxas info    : Compiling entry function 'big' for 'sm_90'\nptxas info    : Function properties for big\nptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\nptxas info    : Used 32 registers, used 1 barriers, 65536 bytes smem\n";
        let k = parse_resources(log);
        let e = explain_silent_failure(log, &k);
        assert_eq!(e, "ptxas error   : Entry function 'big' uses too much shared data (65536 bytes of static __shared__ memory, 49152 max)");
        let other = explain_silent_failure("ptxas info    : 0 bytes gmem\n", &[]);
        assert!(other.starts_with("error: the compilation failed without an error message"));
    }
}
