use super::*;

#[test]
fn flags_are_what_nvrtc_expects() {
    let o = CompileOptions {
        arch: "sm_80".into(),
        extra_flags: vec!["--use_fast_math".into()],
        ..Default::default()
    };
    let f = o.flags(Some(std::path::Path::new("/cuda/include")));
    assert_eq!(
        f,
        [
            "-arch=sm_80",
            "-std=c++17",
            "-Xptxas=-v",
            "--no-source-include",
            "-I/cuda/include",
            "--use_fast_math"
        ]
    );
    assert_eq!(CompileOptions::default().flags(None)[0], "-arch=sm_90");
}

/// Guards the include sandbox: with an include folder the candidate is named inside it
/// (so quoted includes are searched there, never in the working folder), and without
/// one the source-folder search stays off.
#[test]
fn invocation_names_the_candidate_inside_the_include_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let o = CompileOptions {
        extra_flags: vec!["--use_fast_math".into()],
        ..Default::default()
    };
    let inc = format!("-I{}", dir.display());
    let inv = o.invocation(Some(dir));
    assert_eq!(
        inv.program_name,
        dir.join("candidate.cu").display().to_string()
    );
    assert_eq!(
        inv.flags,
        [
            "-arch=sm_90",
            "-std=c++17",
            "-Xptxas=-v",
            &inc,
            "--use_fast_math"
        ]
    );
    std::fs::create_dir(dir.join("cccl")).unwrap();
    let cccl = format!("-I{}", dir.join("cccl").display());
    assert_eq!(
        o.invocation(Some(dir)).flags,
        [
            "-arch=sm_90",
            "-std=c++17",
            "-Xptxas=-v",
            &inc,
            &cccl,
            "--use_fast_math"
        ]
    );
    let bare = o.invocation(None);
    assert_eq!(bare.program_name, "candidate.cu");
    assert!(bare.flags.iter().any(|f| f == "--no-source-include"));
    assert_ne!(inv.key_parts(), bare.key_parts());
}

#[test]
fn logs_name_the_candidate_and_hide_the_include_folder() {
    let o = CompileOptions::default();
    let dir = std::path::Path::new("/opt/cuda/include");
    let inv = o.invocation(Some(dir));
    let log = "/opt/cuda/include/candidate.cu(3): error: x\n/opt/cuda/include/crt/mma.h(9): note";
    assert_eq!(
        clean_log(log, &inv, Some(dir)),
        "candidate.cu(3): error: x\n<cuda-include>/crt/mma.h(9): note"
    );
}

#[test]
fn arch_validation() {
    for ok in ["sm_90", "sm_90a", "sm_80", "sm_120"] {
        assert!(valid_arch(ok), "{ok}");
    }
    for bad in [
        "compute_90",
        "sm_",
        "sm_9x",
        "-arch=sm_90",
        "sm_90 -I/etc",
        "",
    ] {
        assert!(!valid_arch(bad), "{bad}");
    }
}
