//! One module per subcommand. Each exposes `Args` (clap) and
//! `run(Args) -> anyhow::Result<u8>` returning the process exit code.

pub mod analyze;
pub mod calibrate;
pub mod cargo;
pub mod cc;
pub mod check;
pub mod crash;
pub mod persistency;
pub mod probe;
pub mod run;
pub mod sim;
pub mod trace;
pub mod validate;

/// The temporary name [`write_atomic`] writes `path` under: a hidden
/// file beside it, named after it and this process.
pub fn temp_beside(path: &std::path::Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Write `bytes` to `path` so that readers see the old file or the whole
/// new one, never a part: into [`temp_beside`], then renamed over `path`
/// (a failure removes the temporary file). A path that exists and is not
/// a regular file (`/dev/stdout`, `/dev/fd/3`, a FIFO) is written to
/// directly. `what` names the output in the error (`--json FILE`).
pub fn write_atomic(path: &std::path::Path, bytes: &[u8], what: &str) -> anyhow::Result<()> {
    use anyhow::Context;
    let fail = || format!("{what} {}: cannot write", path.display());
    if path.is_dir() {
        anyhow::bail!(
            "{what} {}: is a directory: give a file name",
            path.display()
        );
    }
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return std::fs::write(path, bytes).with_context(fail);
    }
    let tmp = temp_beside(path);
    let r = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r.with_context(fail)
}

/// Refuse, before any work, an output `path` that [`write_atomic`] could
/// not write: a directory, or a file in a directory that does not exist.
pub fn check_output(path: &std::path::Path, what: &str) -> anyhow::Result<()> {
    if path.is_dir() {
        anyhow::bail!(
            "{what} {}: is a directory: give a file name",
            path.display()
        );
    }
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    if !parent.is_dir() {
        anyhow::bail!(
            "{what} {}: directory {} does not exist",
            path.display(),
            parent.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A written file is whole and leaves no temporary file; a failed write
    /// (the target is a directory, or its directory is missing) says so in
    /// one line naming the option and leaves nothing behind.
    #[test]
    fn write_atomic_replaces_whole_or_leaves_nothing() {
        let dir = std::env::temp_dir().join(format!("pmlab-atomic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let f = dir.join("out.json");
        std::fs::write(&f, "old").unwrap();
        write_atomic(&f, b"new\n", "--json").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "new\n");
        let e = write_atomic(&dir.join("sub"), b"x", "--json").unwrap_err();
        assert!(e.to_string().starts_with("--json "), "{e}");
        let e = write_atomic(&dir.join("missing/out.json"), b"x", "--json").unwrap_err();
        assert_eq!(format!("{e:#}").lines().count(), 1, "{e:#}");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["out.json", "sub"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
