//! Building the C programs in `ffi/c/` against the library cargo built for this test run
//! (`c_api`, `c_fleet`), with strict warnings.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`: the test binary lives in `target/<profile>/deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// A library cargo built for this run: `target/<profile>/deps/NAME`, which every build rewrites
/// (with this run's features), else the copy in `target/<profile>/` (refreshed by `cargo build`
/// only, so it can be stale after a `cargo test`, or from a build with other features).
pub fn built_library(name: &str) -> PathBuf {
    let dir = profile_dir();
    [dir.join("deps").join(name), dir.join(name)]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} not built under {}", dir.display()))
}

/// Compiles `source` (relative to the crate root) with `defines` (`-D...`) against
/// `libfairq.a`; returns the program's path.
pub fn compile(source: &str, name: &str, defines: &[&str]) -> PathBuf {
    compile_with(source, name, defines, &built_library("libfairq.a"))
}

/// [`compile`] against the static library `lib`.
pub fn compile_with(source: &str, name: &str, defines: &[&str], lib: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    compile_with_include(source, name, defines, &root.join("include"), lib)
}

/// [`compile_with`], finding `fairq.h` in `include`; `lib` may also be a `libfairq.so`, which
/// the program then loads at run time.
pub fn compile_with_include(
    source: &str,
    name: &str,
    defines: &[&str],
    include: &Path,
    lib: &Path,
) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&cc)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Wpedantic",
            "-Werror",
            "-g",
        ])
        .args(defines)
        .arg("-I")
        .arg(include)
        .arg(root.join(source))
        .args(link_args(lib))
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(status.success(), "{cc} failed on {source}");
    out
}

/// `lib` as linker arguments: a library file as is; a shared library (`.so`) as `-L DIR
/// -lfairq` plus an rpath, so the program loads that very file.
fn link_args(lib: &Path) -> Vec<std::ffi::OsString> {
    if lib.extension().is_some_and(|e| e == "so") {
        let dir = lib.parent().expect("library directory");
        return vec![
            "-L".into(),
            dir.into(),
            "-lfairq".into(),
            format!("-Wl,-rpath,{}", dir.display()).into(),
        ];
    }
    vec![lib.into()]
}
