//! Huge pages on a real hugetlbfs: as root, the test reserves pages, mounts a private
//! hugetlbfs in a temporary directory, runs the `dataplane` binary against it, and restores
//! both afterwards. Where that is impossible (not root, no hugetlbfs, pages cannot be
//! reserved) it prints why and skips visibly.

#[macro_use]
#[path = "../../bench/tests/common/mod.rs"]
mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const NR: &str = "/proc/sys/vm/nr_hugepages";
const FREE: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages";

/// Two huge regions: 9 MiB and 1.1 MiB, so 5 + 1 pages of 2 MiB.
const HUGE_CFG: &str = config_yaml!(
    raw,
    0,
    loopback,
    r#"    memory_regions:
    - {name: txh, kind: huge, affinity: 0, num_bufs: 8192, buf_size: 1088}
    - {name: rxh, kind: huge, affinity: 0, num_bufs: 1024, buf_size: 1088}
    interfaces:
    - name: loop0
      address: loopback
      tx:
        queues:
        - {name: tq, id: 0, cpu_core: 1, batch_size: 64, memory_regions: [txh]}
      rx:
        queues:
        - {name: rq, id: 0, cpu_core: 1, batch_size: 64, timeout_us: 100, memory_regions: [rxh]}
bench_tx:
- {interface_name: loop0, queue_id: 0, cpu_core: -1, batch_size: 64, header_size: 64, payload_size: 64, eth_src_addr: "02:00:00:00:00:01", eth_dst_addr: "02:00:00:00:00:02", ip_src_addr: 198.18.0.1, ip_dst_addr: 198.18.0.2, udp_src_port: "4096-4099", udp_dst_port: 5000}
bench_rx:
- {interface_name: loop0, queue_id: -1, cpu_core: -1}
"#
);
const PAGES_NEEDED: u64 = 6;

/// Reserved pages and the private mount, restored on drop (also when an assertion fails).
struct HugeEnv {
    mount: PathBuf,
    _dir: tempfile::TempDir,
    saved_nr: u64,
}

impl Drop for HugeEnv {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
        let _ = fs::write(NR, self.saved_nr.to_string());
    }
}

fn read_u64(p: &str) -> u64 {
    fs::read_to_string(p)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The tests change machine-wide state; they take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn setup() -> Result<HugeEnv, String> {
    if !rustix::process::geteuid().is_root() {
        return Err("not root".into());
    }
    if !Path::new(FREE).exists() {
        return Err("kernel has no 2 MiB huge pages".into());
    }
    let saved_nr = read_u64(NR);
    let want = saved_nr + 128;
    fs::write(NR, want.to_string()).map_err(|e| format!("cannot write {NR}: {e}"))?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mount = dir.path().to_path_buf();
    let env = HugeEnv {
        mount: mount.clone(),
        _dir: dir,
        saved_nr,
    };
    if read_u64(FREE) < 16 {
        return Err(format!("could reserve only {} free pages", read_u64(FREE)));
    }
    let ok = Command::new("mount")
        .args(["-t", "hugetlbfs", "-o", "pagesize=2M", "none"])
        .arg(&mount)
        .status()
        .map_err(|e| e.to_string())?
        .success();
    if !ok {
        return Err("mount -t hugetlbfs failed".into());
    }
    Ok(env)
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

struct Run<'a> {
    env: &'a HugeEnv,
    cfg: PathBuf,
}

impl Run<'_> {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_dataplane"));
        c.args(args).env("DATAPLANE_HUGETLBFS", &self.env.mount);
        c
    }

    fn bench(&self, seconds: &str) -> Command {
        let mut c = self.cmd(&["bench", "raw"]);
        c.arg(&self.cfg).args(["--seconds", seconds, "--json"]);
        c
    }

    fn output(&self, mut c: Command) -> (Output, String, String) {
        let out = c.output().expect("run dataplane");
        let (so, se) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        (out, so, se)
    }

    /// Starts a long bench and waits until its two region files exist.
    fn start_long_bench(&self) -> Child {
        let mut child = self
            .bench("60")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn bench");
        let start = Instant::now();
        let ours = |d: &Path| {
            files(d)
                .iter()
                .filter(|f| f.starts_with("dataplane_"))
                .count()
        };
        while ours(&self.env.mount) < 2 {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "region files never appeared"
            );
            assert!(child.try_wait().unwrap().is_none(), "bench exited early");
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }
}

fn kill(child: &Child, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_child(child);
    rustix::process::kill_process(pid, sig).expect("kill");
}

#[test]
fn hugepage_files_are_cleaned_on_every_path() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = ready_or_skip!("hugepage tests", setup());
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = cfg_dir.path().join("huge.yaml");
    fs::write(&cfg, HUGE_CFG).unwrap();
    let run = Run {
        env: &env,
        cfg: cfg.clone(),
    };
    let free_before = read_u64(FREE);

    killed_bench_leaves_files_that_cleanup_removes(&run, free_before);
    next_start_removes_a_dead_runs_files(&run);
    sigterm_ends_with_a_report_and_no_files(&run);
    failed_init_removes_the_region_files(&run, cfg_dir.path());
    preflight_without_free_pages_allocates_nothing(&run, free_before);
}

const OTHERS: [&str; 3] = ["notes.txt", "rtemap_0", "rtemap_9"];

/// A bench that is SIGKILLed leaves its files and pages behind; cleanup gets both back.
fn killed_bench_leaves_files_that_cleanup_removes(run: &Run, free_before: u64) {
    let env = run.env;
    let mut child = run.start_long_bench();
    let left = files(&env.mount);
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(
        left.iter()
            .all(|f| f.starts_with("dataplane_") && f.contains("map_")),
        "{left:?}"
    );
    kill(&child, rustix::process::Signal::KILL);
    child.wait().unwrap();
    assert_eq!(files(&env.mount), left, "SIGKILL leaves the files");
    assert_eq!(read_u64(FREE), free_before - PAGES_NEEDED, "and the pages");

    // Files that are not leftovers: one held by a live process (us), one of another name,
    // and a directory with a leftover's name (hugetlbfs has no symlinks; the scanner also
    // never follows them: lstat and O_NOFOLLOW).
    let held_path = env.mount.join("dataplane_1_000000map_0");
    let held = fs::File::create(&held_path).unwrap();
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let foreign = env.mount.join("notes.txt");
    fs::File::create(&foreign).unwrap();
    // Another program's DPDK file, unlocked: not ours, so never removed.
    fs::File::create(env.mount.join("rtemap_0")).unwrap();
    fs::create_dir(env.mount.join("rtemap_9")).unwrap();

    let (out, so, _) = run.output(run.cmd(&["hugepages", "cleanup", "--dry-run"]));
    assert!(out.status.success());
    assert_eq!(
        so.matches("Would remove leftover hugepage file").count(),
        2,
        "{so}"
    );
    assert_eq!(files(&env.mount).len(), 6, "a dry run removes nothing");

    let (out, so, _) = run.output(run.cmd(&["hugepages", "status"]));
    assert!(out.status.success());
    assert!(
        so.contains("dead (no process holds it)")
            && so.contains("live (held by a running process)"),
        "{so}"
    );

    let (out, so, _) = run.output(run.cmd(&["hugepages", "cleanup"]));
    assert!(out.status.success(), "{so}");
    for f in &left {
        let line = format!(
            "Removed leftover hugepage file {}",
            env.mount.join(f).display()
        );
        assert!(so.contains(&line), "`{line}` missing in:\n{so}");
    }
    assert!(
        so.contains("(10 MiB)") && so.contains("(2 MiB)"),
        "sizes: {so}"
    );
    assert!(
        so.contains("dataplane_1_000000map_0: live (held by a running process)"),
        "{so}"
    );
    assert!(
        so.contains("notes.txt: not a data plane file")
            && so.contains("rtemap_0: not a data plane file"),
        "{so}"
    );
    assert!(so.contains("rtemap_9: not a regular file"), "{so}");
    assert_eq!(
        files(&env.mount),
        vec![
            "dataplane_1_000000map_0",
            "notes.txt",
            "rtemap_0",
            "rtemap_9"
        ]
    );
    assert_eq!(read_u64(FREE), free_before, "the pages came back");
    drop(held);
    fs::remove_file(&held_path).unwrap();
}

/// After a SIGKILL, the next start removes the dead run's files itself.
fn next_start_removes_a_dead_runs_files(run: &Run) {
    let env = run.env;
    let mut child = run.start_long_bench();
    kill(&child, rustix::process::Signal::KILL);
    child.wait().unwrap();
    let (out, so, se) = run.output(run.bench("1"));
    assert!(out.status.success(), "{se}");
    assert_eq!(
        se.matches("Removed leftover hugepage file").count(),
        2,
        "{se}"
    );
    assert!(
        so.lines().last().unwrap().contains("\"lossless\":true"),
        "{so}"
    );
    assert_eq!(files(&env.mount), OTHERS, "a normal exit leaves nothing");
}

/// SIGTERM during a bench: final report, no files.
fn sigterm_ends_with_a_report_and_no_files(run: &Run) {
    let env = run.env;
    let mut child = run.start_long_bench();
    kill(&child, rustix::process::Signal::TERM);
    let status = child.wait().unwrap();
    let mut last = String::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        last = line.unwrap();
    }
    // An interrupted run exits 128 + SIGTERM after its report.
    assert_eq!(status.code(), Some(143), "{status:?}");
    assert!(last.contains("\"lossless\":true"), "{last}");
    assert!(last.contains("\"interrupted\":true"), "{last}");
    assert_eq!(files(&env.mount), OTHERS);
}

/// Init failing after the regions were made: the socket engine cannot bind its
/// port (this test holds it).
fn failed_init_removes_the_region_files(run: &Run, dir: &Path) {
    let env = run.env;
    let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let bad = dir.join("bad.yaml");
    let text = HUGE_CFG
        .replace("stream_type: raw", "stream_type: socket")
        .replace("    loopback: \"sw\"\n", "")
        .replace(
            "      address: loopback\n",
            &format!("      address: 127.0.0.1\n      socket_config: {{mode: server, local_addr: \"udp://127.0.0.1:{port}\"}}\n"),
        );
    fs::write(&bad, text).unwrap();
    let mut c = run.cmd(&["capture"]);
    c.arg(&bad)
        .arg(dir.join("never.pcap"))
        .args(["--seconds", "1"])
        .env("DATAPLANE_LOG", "debug");
    let (out, _, se) = run.output(c);
    assert!(!out.status.success());
    assert!(
        se.contains("backed by"),
        "the region file was made first: {se}"
    );
    assert!(
        se.contains(&format!("cannot bind udp://127.0.0.1:{port}")),
        "{se}"
    );
    drop(held);
    assert_eq!(files(&env.mount), OTHERS, "and removed again");
}

/// Preflight with no free pages: the numbers and the commands, nothing allocated.
fn preflight_without_free_pages_allocates_nothing(run: &Run, free_before: u64) {
    let env = run.env;
    let nr = read_u64(NR);
    fs::write(NR, "0").unwrap();
    let (out, _, se) = run.output(run.bench("1"));
    fs::write(NR, nr.to_string()).unwrap();
    assert!(!out.status.success());
    for needle in [
        "hugepage preflight: not enough free 2 MiB huge pages; nothing was allocated",
        "node 0: need 6 pages (12 MiB) for regions [txh 5, rxh 1]; 0 free of 0",
        "echo 6 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
    ] {
        assert!(se.contains(needle), "`{needle}` missing in:\n{se}");
    }
    assert_eq!(files(&env.mount), OTHERS);
    assert_eq!(read_u64(FREE), free_before);
}

/// This process's region files in every hugetlbfs mount.
fn ours() -> Vec<PathBuf> {
    let prefix = dataplane::hugepages::file_prefix();
    dataplane::hugepages::scan(&dataplane::hugepages::mounts())
        .into_iter()
        .map(|f| f.path)
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect()
}

/// RDMA configurations start through the same plane: the hugepage preflight refuses them
/// before anything is allocated, and their region files go when the plane goes, or when
/// the engine fails to start (here, without an RDMA device, its listener cannot bind).
#[cfg(feature = "rdma")]
#[test]
fn rdma_configs_get_the_same_hugepage_preflight_and_cleanup() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = ready_or_skip!("RDMA hugepage test", setup());
    let _ = &env;
    let text = config_yaml!(
        socket,
        0,
        r#"    memory_regions:
    - {name: DATA_RX_GPU_SERVER, kind: huge, affinity: 0, num_bufs: 64, buf_size: 65536}
    - {name: DATA_TX_GPU_SERVER, kind: huge, affinity: 0, num_bufs: 16, buf_size: 65536}
    interfaces:
    - name: server
      address: 198.18.0.1
      socket_config: {mode: server, local_addr: "roce://198.18.0.1:4791"}
      roce_config: {transport_mode: RC}
      rx:
        queues:
        - {name: rq, id: 0, cpu_core: 0, batch_size: 1}
      tx:
        queues:
        - {name: tq, id: 0, cpu_core: 0, batch_size: 1}
"#
    );
    let cfg = dataplane::config::load_with(text, "rdma-huge", &|_| true)
        .unwrap()
        .config;
    let nr = read_u64(NR);
    fs::write(NR, "0").unwrap();
    let refused = dataplane::DataPlane::start(&cfg);
    fs::write(NR, nr.to_string()).unwrap();
    let e = refused.err().expect("no free pages").to_string();
    assert!(e.contains("hugepage preflight"), "{e}");
    assert!(e.contains("DATA_RX_GPU_SERVER 2"), "{e}");
    assert!(ours().is_empty(), "nothing was allocated: {:?}", ours());
    match dataplane::DataPlane::start(&cfg) {
        Ok(plane) => {
            assert_eq!(ours().len(), 2, "both regions are hugepage files");
            drop(plane);
        }
        Err(e) => eprintln!("the RDMA engine did not start here ({e}); its regions must be gone"),
    }
    assert!(ours().is_empty(), "the files are removed: {:?}", ours());
}

/// A panic while a data plane with huge regions runs: unwinding drops it and its files.
#[test]
fn a_panic_removes_the_files() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = ready_or_skip!("hugepage panic test", setup());
    let _ = &env;
    // In-process: the data plane picks the first writable 2 MiB mount; search all of them.
    let cfg = dataplane::config::load_str(HUGE_CFG, "huge")
        .unwrap()
        .config;
    let result = std::thread::spawn({
        move || {
            let _dp = dataplane::DataPlane::start(&cfg).expect("start");
            assert_eq!(ours().len(), 2, "files exist while running");
            panic!("deliberate panic with a running data plane");
        }
    })
    .join();
    assert!(result.is_err(), "the thread panicked");
    assert!(
        ours().is_empty(),
        "unwinding removed the files: {:?}",
        ours()
    );
}

/// The DPDK engine in hugepage mode: our regions as files, EAL's pools from huge pages with
/// `--huge-unlink`; the preflight counts both, and nothing is left afterwards.
#[cfg(feature = "dpdk")]
#[test]
fn dpdk_in_hugepage_mode_leaves_nothing() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = ready_or_skip!("DPDK hugepage test", setup());
    let text = fs::read_to_string(common::config_path("dpdk_ring.yaml"))
        .unwrap()
        .replace(
            "kind: \"host\"          # host memory: EAL runs with --no-huge",
            "kind: \"huge\"",
        )
        .replace("kind: \"host\"", "kind: \"huge\"")
        .replace("num_bufs: 16384", "num_bufs: 4096");
    assert_eq!(text.matches("kind: \"huge\"").count(), 2, "{text}");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("dpdk_huge.yaml");
    fs::write(&cfg, &text).unwrap();
    let free_before = read_u64(FREE);
    // A runtime directory a dead DPDK run of ours left (pid far above pid_max).
    let dead_dir = PathBuf::from("/var/run/dpdk/dataplane_2147483000_000000");
    fs::create_dir_all(&dead_dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["bench", "raw"])
        .arg(&cfg)
        .args(["--seconds", "1", "--json"])
        .env("DATAPLANE_HUGETLBFS", &env.mount)
        .output()
        .unwrap();
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{se}");
    assert!(
        so.lines().last().unwrap().contains("\"lossless\":true"),
        "{so}"
    );
    assert!(files(&env.mount).is_empty(), "{:?}", files(&env.mount));
    assert_eq!(read_u64(FREE), free_before, "every page came back");
    assert!(
        !dead_dir.exists() && se.contains("Removed leftover DPDK runtime directory"),
        "{se}"
    );

    // Too few pages: the preflight names EAL's share too.
    let nr = read_u64(NR);
    fs::write(NR, "8").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["bench", "raw"])
        .arg(&cfg)
        .args(["--seconds", "1"])
        .env("DATAPLANE_HUGETLBFS", &env.mount)
        .output()
        .unwrap();
    fs::write(NR, nr.to_string()).unwrap();
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(se.contains("DPDK EAL mbuf pools"), "{se}");
    assert!(files(&env.mount).is_empty());
}
