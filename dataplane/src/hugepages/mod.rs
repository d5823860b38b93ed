//! Huge pages: discovery (hugetlbfs mounts, page sizes, free and total pages per NUMA
//! node), a preflight that says exactly what is missing before anything is allocated,
//! file-backed huge regions held under an exclusive `flock`, and cleanup of files that dead
//! processes left behind.
//!
//! File names: every file this process creates starts with [`file_prefix`],
//! `dataplane_<pid>_<nonce>`, followed by `map_<region index>`. That follows DPDK's
//! `<file-prefix>map_<n>` convention, and our DPDK engine passes the same prefix to EAL, so
//! one rule covers every file a data plane made. Cleanup touches nothing else: a regular
//! file in a hugetlbfs mount is a leftover only when its name is `dataplane_<pid>_...`, no
//! process `<pid>` exists, and an exclusive non-blocking `flock` on it succeeds (a live
//! owner holds a lock: we hold `LOCK_EX`, DPDK `LOCK_SH`). Other applications' files,
//! DPDK's `rtemap_*` of other programs included, are never removed.

use rustix::fs::{FlockOperation, Mode, OFlags};
use rustix::mm::{MapFlags, ProtFlags};
use std::fmt::Write as _;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::OnceLock;

/// Environment variable naming the hugetlbfs mount to create region files in (it must be
/// a hugetlbfs mount); without it the first writable mount with the right page size is used.
pub const MOUNT_ENV: &str = "DATAPLANE_HUGETLBFS";
/// Start of every file name this project creates.
pub const OUR_PREFIX: &str = "dataplane_";

const SYSFS_GLOBAL: &str = "/sys/kernel/mm/hugepages";
const SYSFS_NODES: &str = "/sys/devices/system/node";
const MIB: u64 = 1 << 20;

/// A hugetlbfs mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// Mount point.
    pub path: PathBuf,
    /// Page size in bytes.
    pub page_size: u64,
}

/// Page counts of one page size, for the whole machine (`node: None`) or one NUMA node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageCounts {
    /// Page size in bytes.
    pub page_size: u64,
    /// NUMA node, or None for the machine.
    pub node: Option<u32>,
    /// Pages reserved in the pool (`nr_hugepages`).
    pub total: u64,
    /// Pages not in use (`free_hugepages`).
    pub free: u64,
    /// Pages promised to mappings but not yet faulted (machine only).
    pub reserved: u64,
}

impl PageCounts {
    /// Pages a new mapping can still get.
    pub fn available(&self) -> u64 {
        self.free.saturating_sub(self.reserved)
    }
}

/// "2M", "1024M", "1G", "2048k" -> bytes.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1 << 10),
        'm' | 'M' => (&s[..s.len() - 1], 1 << 20),
        'g' | 'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

/// The default huge page size (`Hugepagesize` in /proc/meminfo), 2 MiB when unreadable.
pub fn default_page_size() -> u64 {
    crate::sysinfo::meminfo("Hugepagesize").map_or(2 * MIB, |kb| kb * 1024)
}

/// Unescapes the octal escapes (`\040` for a space) of /proc/self/mountinfo paths.
fn unescape_mount_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses mountinfo text into hugetlbfs mounts.
pub fn parse_mountinfo(text: &str, default_size: u64) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut r = right.split_whitespace();
            if r.next()? != "hugetlbfs" {
                return None;
            }
            let _source = r.next();
            let options = r.next().unwrap_or("");
            let mount_point = left.split_whitespace().nth(4)?;
            let page_size = options
                .split(',')
                .find_map(|o| o.strip_prefix("pagesize="))
                .and_then(parse_size)
                .unwrap_or(default_size);
            Some(Mount {
                path: PathBuf::from(unescape_mount_path(mount_point)),
                page_size,
            })
        })
        .collect()
}

/// hugetlbfs mounts of this process's mount namespace.
pub fn mounts() -> Vec<Mount> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    parse_mountinfo(&text, default_page_size())
}

fn read_u64(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// Page size from a sysfs directory name such as `hugepages-2048kB`.
fn size_of_dir(name: &str) -> Option<u64> {
    let kb = name.strip_prefix("hugepages-")?.strip_suffix("kB")?;
    kb.parse::<u64>().ok().map(|k| k * 1024)
}

fn counts_in(dir: &Path, node: Option<u32>) -> Vec<PageCounts> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PageCounts> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let page_size = size_of_dir(&name)?;
            let p = e.path();
            Some(PageCounts {
                page_size,
                node,
                total: read_u64(&p.join("nr_hugepages")).unwrap_or(0),
                free: read_u64(&p.join("free_hugepages")).unwrap_or(0),
                reserved: read_u64(&p.join("resv_hugepages")).unwrap_or(0),
            })
        })
        .collect();
    out.sort_by_key(|c| c.page_size);
    out
}

/// Page counts for the machine and for each NUMA node, every page size.
pub fn page_counts() -> Vec<PageCounts> {
    page_counts_under(Path::new("/"))
}

/// As [`page_counts`], for the machine whose `/sys` lies below `root` (a recorded tree).
pub fn page_counts_under(root: &Path) -> Vec<PageCounts> {
    let nodes_dir = root.join(SYSFS_NODES.trim_start_matches('/'));
    let mut out = counts_in(&root.join(SYSFS_GLOBAL.trim_start_matches('/')), None);
    if let Ok(nodes) = std::fs::read_dir(&nodes_dir) {
        let mut ids: Vec<u32> = nodes
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
            .collect();
        ids.sort_unstable();
        for id in ids {
            let dir = nodes_dir.join(format!("node{id}/hugepages"));
            out.extend(counts_in(&dir, Some(id)));
        }
    }
    out
}

/// Pages of `page_size` a new mapping can get on this machine, and the pool's total.
pub fn available_and_total(page_size: u64) -> (u64, u64) {
    page_counts()
        .into_iter()
        .find(|c| c.node.is_none() && c.page_size == page_size)
        .map_or((0, 0), |c| (c.available(), c.total))
}

fn size_name(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes / MIB)
    }
}

pub use crate::plan::Need;

/// The preflight found too few free pages.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PreflightError(pub String);

/// Checks `need` against `counts`; on a shortage the error holds the numbers and the exact
/// commands that fix it. `have_mount` adds the mount command when no mount exists.
pub fn check(need: &Need, counts: &[PageCounts], have_mount: bool) -> Result<(), PreflightError> {
    if need.per_node.is_empty() {
        return Ok(());
    }
    let ps = need.page_size;
    let kb = ps / 1024;
    let global = counts
        .iter()
        .find(|c| c.node.is_none() && c.page_size == ps)
        .cloned()
        .unwrap_or(PageCounts {
            page_size: ps,
            node: None,
            total: 0,
            free: 0,
            reserved: 0,
        });
    let nodes: Vec<&PageCounts> = counts
        .iter()
        .filter(|c| c.node.is_some() && c.page_size == ps)
        .collect();
    let mut short = Vec::new();
    let total_need: u64 = need.per_node.values().map(|v| v.0).sum();
    if total_need > global.available() {
        short.push(None);
    }
    for (&node, (pages, _)) in &need.per_node {
        if let Some(c) = nodes.iter().find(|c| c.node == Some(node)) {
            // Per-node files have no reservation count; spread the machine's over nodes.
            if *pages > c.free.saturating_sub(global.reserved) {
                short.push(Some(node));
            }
        } else if !nodes.is_empty() {
            short.push(Some(node));
        }
    }
    if short.is_empty() {
        return Ok(());
    }
    let mut msg = format!(
        "hugepage preflight: not enough free {} huge pages; nothing was allocated\n",
        size_name(ps)
    );
    for (node, (pages, regions)) in &need.per_node {
        let list = regions
            .iter()
            .map(|(n, p)| format!("{n} {p}"))
            .collect::<Vec<_>>()
            .join(", ");
        let (free, total) = nodes
            .iter()
            .find(|c| c.node == Some(*node))
            .map_or((global.available(), global.total), |c| (c.free, c.total));
        let _ = writeln!(
            msg,
            "  node {node}: need {pages} pages ({}) for regions [{list}]; {free} free of {total}",
            size_name(pages * ps)
        );
    }
    let _ = writeln!(
        msg,
        "  machine: need {total_need} pages, {} available ({} free, {} reserved by others), {} in the pool",
        global.available(),
        global.free,
        global.reserved,
        global.total
    );
    let want = global.total + total_need.saturating_sub(global.available());
    let _ = writeln!(msg, "fix, as root:");
    let _ = writeln!(
        msg,
        "  echo {want} > {SYSFS_GLOBAL}/hugepages-{kb}kB/nr_hugepages"
    );
    for node in short.iter().flatten() {
        if let (Some(c), Some((pages, _))) = (
            nodes.iter().find(|c| c.node == Some(*node)),
            need.per_node.get(node),
        ) {
            let want = c.total + pages.saturating_sub(c.free);
            let _ = writeln!(
                msg,
                "  echo {want} > {SYSFS_NODES}/node{node}/hugepages/hugepages-{kb}kB/nr_hugepages   (pages on node {node})"
            );
        }
    }
    if !have_mount {
        let _ = writeln!(
            msg,
            "  mkdir -p /dev/hugepages && mount -t hugetlbfs -o pagesize={}M nodev /dev/hugepages   (optional: without a mount, anonymous huge pages are used)",
            ps / MIB
        );
    }
    let _ = write!(
        msg,
        "or lower num_bufs / buf_size of the huge regions; `grep Huge /proc/meminfo` shows the pool"
    );
    Err(PreflightError(msg))
}

/// This process's file prefix, `dataplane_<pid>_<nonce>`.
pub fn file_prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        format!(
            "{OUR_PREFIX}{}_{:06x}",
            std::process::id(),
            nanos & 0xff_ffff
        )
    })
}

/// The mount region files go to: `$DATAPLANE_HUGETLBFS` when set (an error when it is not a
/// hugetlbfs mount), else the first writable mount with `page_size`, else None (anonymous
/// huge pages).
pub fn mount_for(page_size: u64) -> Result<Option<Mount>, String> {
    let all = mounts();
    if let Some(dir) = std::env::var_os(MOUNT_ENV) {
        let dir = PathBuf::from(dir);
        let canon = std::fs::canonicalize(&dir).unwrap_or(dir.clone());
        return all
            .into_iter()
            .find(|m| m.path == canon || m.path == dir)
            .map(Some)
            .ok_or_else(|| format!("{MOUNT_ENV}={} is not a hugetlbfs mount", dir.display()));
    }
    Ok(all.into_iter().find(|m| {
        m.page_size == page_size
            && rustix::fs::access(&m.path, rustix::fs::Access::WRITE_OK).is_ok()
    }))
}

/// A mapped huge-page file, held under an exclusive flock until dropped; dropping unmaps
/// and removes it.
#[derive(Debug)]
pub struct HugeFile {
    path: PathBuf,
    _fd: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory; ownership of its bytes is managed by the region's pool.
unsafe impl Send for HugeFile {}
// SAFETY: as above; the struct itself is immutable after creation.
unsafe impl Sync for HugeFile {}

impl HugeFile {
    /// Creates `<prefix>map_<index>` in `mount`, locks it, sizes it to `len` (a multiple of
    /// the page size) and maps it with every page faulted in.
    pub fn create(mount: &Mount, index: usize, len: usize) -> std::io::Result<Self> {
        let path = mount.path.join(format!("{}map_{index}", file_prefix()));
        let fd = rustix::fs::open(
            &path,
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let unlink_on_err = |e: rustix::io::Errno| {
            let _ = std::fs::remove_file(&path);
            std::io::Error::from(e)
        };
        rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).map_err(unlink_on_err)?;
        rustix::fs::ftruncate(&fd, len as u64).map_err(unlink_on_err)?;
        // SAFETY: a fresh shared mapping of a file we own, at an address of the kernel's
        // choosing; POPULATE faults every page now, so a shortage fails here, not later
        // with SIGBUS.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::POPULATE,
                &fd,
                0,
            )
        }
        .map_err(unlink_on_err)?;
        Ok(Self {
            path,
            _fd: fd,
            ptr: NonNull::new(p.cast()).expect("mmap returned null"),
            len,
        })
    }

    /// Start of the mapping.
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Mapped bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty mapping (never: regions have at least one buffer).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for HugeFile {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `create` with this length and is unmapped once;
        // the region set keeps it alive until no buffer is in use.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
        // Removed while still locked, so no cleanup elsewhere can race with us.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether a file name is one a data plane makes: `dataplane_<pid>_...`.
pub fn is_candidate_name(name: &str) -> bool {
    pid_of_prefix(name).is_some()
}

/// A file found in a hugetlbfs mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundFile {
    /// Path.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// What it is and whether it may go.
    pub state: FileState,
}

/// The verdict on one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileState {
    /// A data plane's, its process is gone and nothing holds it: a leftover.
    Dead,
    /// A data plane's, and its process runs or a live process holds a lock on it.
    Live,
    /// Not a regular file (a symlink, a directory, ...): never touched.
    NotRegular,
    /// A name without the `dataplane_<pid>_` prefix: never touched.
    Foreign,
    /// Could not be examined.
    Unreadable(String),
}

impl FileState {
    /// Short description for reports.
    pub fn describe(&self) -> String {
        match self {
            FileState::Dead => "dead (no process holds it)".into(),
            FileState::Live => "live (held by a running process)".into(),
            FileState::NotRegular => "not a regular file".into(),
            FileState::Foreign => "not a data plane file (no dataplane_<pid>_ prefix)".into(),
            FileState::Unreadable(e) => format!("cannot examine: {e}"),
        }
    }
}

/// Examines one directory entry; for a dead candidate the returned descriptor holds the
/// exclusive lock, so it can be removed without a race.
fn examine(path: &Path) -> (FileState, u64, Option<OwnedFd>) {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => return (FileState::Unreadable(e.to_string()), 0, None),
    };
    if !meta.file_type().is_file() {
        return (FileState::NotRegular, 0, None);
    }
    let Some(owner) = pid_of_prefix(name) else {
        return (FileState::Foreign, meta.len(), None);
    };
    if process_alive(owner) {
        return (FileState::Live, meta.len(), None);
    }
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => return (FileState::Unreadable(e.to_string()), meta.len(), None),
    };
    match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => (FileState::Dead, meta.len(), Some(fd)),
        Err(rustix::io::Errno::WOULDBLOCK) => (FileState::Live, meta.len(), None),
        Err(e) => (FileState::Unreadable(e.to_string()), meta.len(), None),
    }
}

/// The entries of a mount directory, sorted.
fn entries(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .collect();
    paths.sort();
    Ok(paths)
}

/// Every file in the given mounts with its state (locks are released again).
pub fn scan(mounts: &[Mount]) -> Vec<FoundFile> {
    let mut out = Vec::new();
    for m in mounts {
        let Ok(paths) = entries(&m.path) else {
            continue;
        };
        for path in paths {
            let (state, size, _lock) = examine(&path);
            out.push(FoundFile { path, size, state });
        }
    }
    out
}

/// What a cleanup did.
#[derive(Debug, Default)]
pub struct CleanupReport {
    /// Files removed (or that would be, in a dry run), with sizes.
    pub removed: Vec<(PathBuf, u64)>,
    /// Files kept, with the reason.
    pub kept: Vec<(PathBuf, String)>,
    /// Files that should have gone but could not be removed.
    pub errors: Vec<(PathBuf, String)>,
}

impl CleanupReport {
    /// One line per file, in the order removed, kept, failed.
    pub fn lines(&self, dry_run: bool) -> Vec<String> {
        let verb = if dry_run { "Would remove" } else { "Removed" };
        let mut v: Vec<String> = self
            .removed
            .iter()
            .map(|(p, s)| {
                format!(
                    "{verb} leftover hugepage file {} ({} MiB)",
                    p.display(),
                    s.div_ceil(MIB)
                )
            })
            .collect();
        v.extend(
            self.kept
                .iter()
                .map(|(p, why)| format!("Kept {}: {why}", p.display())),
        );
        v.extend(
            self.errors
                .iter()
                .map(|(p, e)| format!("Could not remove {}: {e}", p.display())),
        );
        v
    }
}

/// Removes leftover files (ours and DPDK's that no live process holds) from `mounts`.
pub fn cleanup(mounts: &[Mount], dry_run: bool) -> CleanupReport {
    let mut r = CleanupReport::default();
    for m in mounts {
        let paths = match entries(&m.path) {
            Ok(p) => p,
            Err(e) => {
                r.errors.push((m.path.clone(), e.to_string()));
                continue;
            }
        };
        for path in paths {
            let (state, size, lock) = examine(&path);
            match state {
                FileState::Dead if dry_run => r.removed.push((path, size)),
                FileState::Dead => match std::fs::remove_file(&path) {
                    Ok(()) => r.removed.push((path, size)),
                    Err(e) => r.errors.push((path, e.to_string())),
                },
                other => r.kept.push((path, other.describe())),
            }
            drop(lock);
        }
    }
    r
}

/// Where DPDK's EAL keeps per-prefix runtime directories: /var/run/dpdk for root, else
/// $XDG_RUNTIME_DIR/dpdk.
pub fn dpdk_runtime_bases() -> Vec<PathBuf> {
    let mut v = vec![PathBuf::from("/var/run/dpdk")];
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        v.push(PathBuf::from(x).join("dpdk"));
    }
    v
}

/// The process id in one of our prefixes, `dataplane_<pid>_<nonce>`.
fn pid_of_prefix(name: &str) -> Option<i32> {
    name.strip_prefix(OUR_PREFIX)?
        .split('_')
        .next()?
        .parse()
        .ok()
        .filter(|&pid: &i32| pid > 0)
}

fn process_alive(pid: i32) -> bool {
    match rustix::process::Pid::from_raw(pid) {
        // Signal 0 checks existence; EPERM still means the process exists.
        Some(p) => matches!(
            rustix::process::test_kill_process(p),
            Ok(()) | Err(rustix::io::Errno::PERM)
        ),
        None => false,
    }
}

/// Removes the EAL runtime directories our prefix left when a process died (EAL removes
/// nothing itself; our engine removes its own on a normal exit). Returns removed paths;
/// directories of other prefixes are never touched.
pub fn cleanup_dpdk_runtime_dirs(dry_run: bool) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for base in dpdk_runtime_bases() {
        let Ok(entries) = std::fs::read_dir(&base) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            if let Some(pid) = pid_of_prefix(&name)
                && is_dir
                && !process_alive(pid)
                && (dry_run || std::fs::remove_dir_all(e.path()).is_ok())
            {
                removed.push(e.path());
            }
        }
    }
    removed
}

/// Human-readable status: mounts, page counts, files.
pub fn status_text() -> String {
    let mut s = String::new();
    let mounts = mounts();
    let _ = writeln!(
        s,
        "default huge page size: {}",
        size_name(default_page_size())
    );
    if mounts.is_empty() {
        let _ = writeln!(
            s,
            "hugetlbfs mounts: none (huge regions use anonymous huge pages)"
        );
    } else {
        let _ = writeln!(s, "hugetlbfs mounts:");
        for m in &mounts {
            let _ = writeln!(
                s,
                "  {} (pages of {})",
                m.path.display(),
                size_name(m.page_size)
            );
        }
    }
    let _ = writeln!(s, "pages (free / total):");
    for c in page_counts() {
        let place = c.node.map_or("machine".to_owned(), |n| format!("node {n}"));
        let resv = if c.node.is_none() {
            format!(", {} reserved", c.reserved)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "  {place:<8} {:>8}: {} / {}{resv}",
            size_name(c.page_size),
            c.free,
            c.total
        );
    }
    let files = scan(&mounts);
    if files.is_empty() {
        let _ = writeln!(s, "files: none");
    } else {
        let _ = writeln!(s, "files:");
        for f in files {
            let _ = writeln!(
                s,
                "  {} ({} MiB): {}",
                f.path.display(),
                f.size.div_ceil(MIB),
                f.state.describe()
            );
        }
    }
    s
}

#[cfg(test)]
mod tests;
