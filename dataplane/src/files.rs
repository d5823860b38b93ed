//! Output files the data plane writes (captures, CSV series, plots): created new, never
//! through a symbolic link and never over a file that was already there, so a link planted
//! where an output is expected cannot redirect the write and an existing file is never
//! truncated. Names built from interface or queue names go through [`file_component`],
//! which keeps them inside the directory they are joined to.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Creates `path` as a new file for writing (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0644
/// before the umask). An existing file or link at `path` is an `AlreadyExists` error that
/// names the path: outputs are never overwritten.
pub fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o644)
        .open(path)
        .map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                io::Error::new(
                    e.kind(),
                    format!(
                        "{} already exists; outputs are never overwritten: remove it or choose another path",
                        path.display()
                    ),
                )
            } else {
                e
            }
        })
}

/// Opens an output stream: a new file at `path` (see [`create_new`]), or, where `path`
/// already is a FIFO or a character device (`/dev/null`, a pipe to another program),
/// that stream, opened for writing without truncation and without following a link.
/// Any other existing file is refused.
pub fn create_output(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::FileTypeExt;
    let refused = match create_new(path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => e,
        other => return other,
    };
    let is_stream = |t: std::fs::FileType| t.is_fifo() || t.is_char_device();
    if !std::fs::symlink_metadata(path).is_ok_and(|m| is_stream(m.file_type())) {
        return Err(refused);
    }
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    // What was opened is what was checked (it could have been replaced in between).
    if is_stream(file.metadata()?.file_type()) {
        Ok(file)
    } else {
        Err(refused)
    }
}

/// Writes `bytes` to a new file at `path` (see [`create_new`]).
pub fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    create_new(path)?.write_all(bytes)
}

/// Makes `path` an output directory: created (with its parents) when missing; an existing
/// one must be a real directory (not a link), owned by this process's user and empty, so
/// the files written into it are all this run's.
pub fn output_dir(path: &Path) -> io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::create_dir(path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let refuse = |why: &str| {
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{}: {why}", path.display()),
        ))
    };
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.file_type().is_dir() {
        return refuse("exists and is not a directory (links are not followed)");
    }
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return refuse("is owned by another user");
    }
    if std::fs::read_dir(path)?.next().is_some() {
        return refuse(
            "is not empty; outputs are never overwritten: remove it or choose another path",
        );
    }
    Ok(())
}

/// `name` made safe to use as one file-name component: every byte other than ASCII
/// letters, digits, `-`, `_` and `.` becomes `_` (so `/`, NUL and control characters
/// cannot appear), and a leading `.` becomes `_` (so neither `.` nor `..` nor a hidden
/// name results). Never empty.
pub fn file_component(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with('.') {
        out.replace_range(..1, "_");
    }
    if out.is_empty() {
        out.push('_');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_never_leave_their_directory() {
        for (name, want) in [
            ("eth0", "eth0"),
            ("../../etc/passwd", "_._.._etc_passwd"),
            ("..", "_."),
            (".", "_"),
            ("", "_"),
            ("a/b", "a_b"),
            ("nul\0x", "nul_x"),
            ("é", "_"),
        ] {
            let got = file_component(name);
            assert_eq!(got, want, "{name:?}");
            assert!(!got.contains('/') && got != ".." && got != "." && !got.contains('\0'));
            let dir = Path::new("/out");
            assert_eq!(dir.join(&got).parent(), Some(dir));
        }
    }

    #[test]
    fn new_files_refuse_links_and_existing_files() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("precious");
        std::fs::write(&target, b"keep me").unwrap();
        // An existing file is not truncated.
        let e = create_new(&target).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(e.to_string().contains("never overwritten"), "{e}");
        // A link, dangling or not, is not followed.
        let link = dir.path().join("out.pcap");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(create_new(&link).is_err());
        let dangling = dir.path().join("dangling.pcap");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        assert!(create_new(&dangling).is_err());
        assert!(!dir.path().join("nowhere").exists());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        // A FIFO or a device is a stream: written, not replaced.
        let fifo = dir.path().join("pipe");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        assert!(create_output(&fifo).is_ok());
        drop(reader);
        assert!(create_output(Path::new("/dev/null")).is_ok());
        assert!(create_output(&target).is_err());
        assert!(create_output(&link).is_err());
        // A new file is made.
        write_new(&dir.path().join("fresh"), b"x").unwrap();
        assert_eq!(std::fs::read(dir.path().join("fresh")).unwrap(), b"x");
    }

    #[test]
    fn output_directories_are_new_or_empty_and_never_links() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("a/b/packets");
        output_dir(&out).unwrap();
        output_dir(&out).unwrap();
        std::fs::write(out.join("000000000000.bin"), b"old").unwrap();
        let e = output_dir(&out).unwrap_err();
        assert!(e.to_string().contains("not empty"), "{e}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        let e = output_dir(&link).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
    }
}
