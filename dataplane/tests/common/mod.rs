//! Helpers shared by the integration tests (each test binary uses some of them).
#![allow(dead_code)]

use std::path::PathBuf;

#[macro_use]
mod skip;
#[macro_use]
mod yaml;
pub mod spead;
pub mod traffic;

/// A shipped configuration, by its name in `configs/` (of the source tree the test was
/// built in, else of the current directory: test binaries carried to another machine run
/// from a copy of the repository).
pub fn config_path(name: &str) -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../configs")
        .join(name);
    if built.exists() {
        built
    } else {
        PathBuf::from("configs").join(name)
    }
}

/// A version-1 `raw` configuration from `body`, the rest of its `cfg` (`memory_regions`,
/// `interfaces`, ...) written from column 0: the header (`dataplane: cfg:`, version,
/// stream type, master core 0) goes in front and `body`'s lines get the header's indent,
/// so errors name lines and columns as in the written-out file (the header is lines 2
/// to 6, `body` starts at line 7).
pub fn raw_config(body: &str) -> String {
    config_with_header("raw", &[], body)
}

/// The error that loading and planning `text` ends in (panics when it plans).
pub fn plan_error(text: &str) -> String {
    match dataplane::config::load_str(text, "test.yaml") {
        Ok(l) => match dataplane::plan::Plan::from_config(&l.config) {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    }
}

/// [`raw_config`] with `stream_type: socket` (kernel sockets).
pub fn socket_config(body: &str) -> String {
    config_with_header("socket", &[], body)
}

/// [`raw_config`] on the software loopback (`loopback: "sw"`, line 7; `body` from line 8).
pub fn loopback_config(body: &str) -> String {
    config_with_header("raw", &["loopback: \"sw\""], body)
}

fn config_with_header(stream_type: &str, extra: &[&str], body: &str) -> String {
    let mut text = format!(
        "\ndataplane:\n  cfg:\n    version: 1\n    stream_type: {stream_type}\n    master_core: 0\n"
    );
    for line in extra
        .iter()
        .copied()
        .chain(body.trim_start_matches('\n').lines())
    {
        text.push_str("    ");
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// The software loopback most tests run on: one interface with a TX queue `tq` and an RX
/// queue `rq` (both id 0, on core 0 by default), each in a region of its own (`tx`,
/// `rx`; host memory by default).
/// The fields add to it; each is YAML written from column 0, indented here to where it
/// goes. [`LoopPair::text`] gives the configuration ([`loopback_config`]),
/// [`LoopPair::config`] loads it.
#[derive(Clone, Copy)]
pub struct LoopPair<'a> {
    /// The interface's name.
    pub interface: &'a str,
    /// The TX and RX regions' `kind`.
    pub kind: &'a str,
    /// `num_bufs` of the TX and RX regions.
    pub bufs: (u32, u32),
    /// `buf_size` of both regions.
    pub buf_size: u32,
    /// Both queues' `batch_size`.
    pub batch: u32,
    /// Both queues' `cpu_core`.
    pub core: u32,
    /// `cfg` keys before `memory_regions`.
    pub top: &'a str,
    /// More `memory_regions` entries.
    pub regions: &'a str,
    /// Keys of `tx` before its queues.
    pub tx: &'a str,
    /// More keys of the TX queue.
    pub tx_queue: &'a str,
    /// Keys of `rx` before its queues.
    pub rx: &'a str,
    /// The RX queue's keys after `batch_size` (its region and timeout by default).
    pub rx_queue: &'a str,
    /// Keys of `rx` after its queues.
    pub rx_after: &'a str,
}

impl Default for LoopPair<'_> {
    fn default() -> Self {
        LoopPair {
            interface: "loop0",
            kind: "host",
            bufs: (2048, 2048),
            buf_size: 2048,
            batch: 32,
            core: 0,
            top: "",
            regions: "",
            tx: "",
            tx_queue: "",
            rx: "",
            rx_queue: "timeout_us: 100\nmemory_regions: [rx]",
            rx_after: "",
        }
    }
}

impl LoopPair<'_> {
    /// The configuration's text.
    pub fn text(&self) -> String {
        let LoopPair {
            interface,
            kind,
            bufs: (tx_bufs, rx_bufs),
            buf_size,
            batch,
            core,
            ..
        } = *self;
        let mut body = indented(self.top, 0);
        body.push_str(&format!(
            "memory_regions:\n\
             - {{name: tx, kind: {kind}, affinity: 0, num_bufs: {tx_bufs}, buf_size: {buf_size}}}\n\
             - {{name: rx, kind: {kind}, affinity: 0, num_bufs: {rx_bufs}, buf_size: {buf_size}}}\n"
        ));
        body.push_str(&indented(self.regions, 0));
        body.push_str(&format!(
            "interfaces:\n- name: {interface}\n  address: loopback\n  tx:\n"
        ));
        body.push_str(&indented(self.tx, 4));
        body.push_str(&format!(
            "    queues:\n    - name: tq\n      id: 0\n      cpu_core: {core}\n      batch_size: {batch}\n      memory_regions: [tx]\n"
        ));
        body.push_str(&indented(self.tx_queue, 6));
        body.push_str("  rx:\n");
        body.push_str(&indented(self.rx, 4));
        body.push_str(&format!(
            "    queues:\n    - name: rq\n      id: 0\n      cpu_core: {core}\n      batch_size: {batch}\n"
        ));
        body.push_str(&indented(self.rx_queue, 6));
        body.push_str(&indented(self.rx_after, 4));
        loopback_config(&body)
    }

    /// The configuration, loaded (panics with the text on an error).
    pub fn config(&self) -> dataplane::config::Config {
        let text = self.text();
        dataplane::config::load_str(&text, "loop-pair.yaml")
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
            .config
    }
}

/// `text`'s lines, each with `by` spaces in front and a line end.
pub fn indented(text: &str, by: usize) -> String {
    text.lines().map(|l| format!("{:by$}{l}\n", "")).collect()
}

/// The `--json` report: the result in the envelope on the last line of a `dataplane`
/// run's stdout (the envelope's own fields checked; `cli/tests/json_contract.rs` checks
/// them against the schema files).
pub fn last_json(stdout: &[u8]) -> serde_json::Value {
    let mut envelope = json_envelope(stdout);
    envelope["result"].take()
}

/// The last line of a helper's stdout (a peer's own JSON, not a `dataplane` envelope).
pub fn last_json_line(stdout: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(stdout);
    serde_json::from_str(text.lines().last().expect("a report line")).expect("JSON line")
}

/// The whole envelope on the last line of stdout, its version and fields checked.
pub fn json_envelope(stdout: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(stdout);
    let line = text.lines().last().expect("a report line");
    let v: serde_json::Value = serde_json::from_str(line).expect("JSON report");
    assert_eq!(v["schema_version"], 1, "{line}");
    assert!(
        v["command"].is_string() && v["dataplane"]["version"].is_string(),
        "{line}"
    );
    assert!(v["result"].is_object(), "{line}");
    v
}

/// The queue the rules of `configs/sw_loopback_4q.yaml` (and `dpdk_ring_4q.yaml`) give to
/// UDP source port `s`, destination port `d` (written out by hand from the file's comments,
/// independent of the classifier).
pub fn queue_by_rules(s: u16, d: u16) -> Option<u16> {
    match (s, d) {
        (_, 5000) => Some(0),
        (_, 5001) => Some(1),
        (4096..=4099, 5002..=5003) => Some(2),
        (4100..=4103, _) => Some(3),
        _ => None,
    }
}

/// Checks a 4-queue bench report against a replay of the generator: it rotates source
/// ports 4096..4103 and destination ports 5000..5003 by packet number, so every packet's
/// Runs `dataplane bench raw` on shipped config `name` for one second, payloads verified,
/// Two network namespaces joined by a veth pair, removed (with the pair) on drop.
pub struct VethPair {
    namespaces: [String; 2],
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .status();
        }
    }
}

/// Runs `ip ARGS`, quietly; true on success.
pub fn ip(args: &[&str]) -> bool {
    std::process::Command::new("ip")
        .args(args)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Namespaces `ns[i]`, each with its end `dev[i]` of one veth pair, up, with IPv4 address
/// `addr[i]` (CIDR) when given. Root only: the error says why not.
pub fn veth_pair(
    ns: [&str; 2],
    dev: [&str; 2],
    addr: [Option<&str>; 2],
) -> Result<VethPair, String> {
    if !rustix::process::geteuid().is_root() {
        return Err("not root".into());
    }
    for n in ns {
        let _ = ip(&["netns", "del", n]);
        if !ip(&["netns", "add", n]) {
            return Err(format!("cannot create network namespace {n}"));
        }
    }
    let guard = VethPair {
        namespaces: ns.map(str::to_owned),
    };
    let ok = ip(&[
        "link", "add", dev[0], "netns", ns[0], "type", "veth", "peer", "name", dev[1], "netns",
        ns[1],
    ]) && (0..2).all(|i| {
        ip(&["-n", ns[i], "link", "set", "lo", "up"])
            && addr[i].is_none_or(|a| ip(&["-n", ns[i], "addr", "add", a, "dev", dev[i]]))
            && ip(&["-n", ns[i], "link", "set", dev[i], "up"])
    });
    if !ok {
        return Err("cannot set up the veth pair".into());
    }
    Ok(guard)
}

/// `ip netns exec NS ARGS...`: `ARGS` run in network namespace `ns`.
pub fn in_netns(ns: &str, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new("ip");
    c.args(["netns", "exec", ns]).args(args);
    c
}

/// Runs `f` on a thread inside network namespace `ns`: sockets it opens and threads it
/// starts live there.
pub fn on_thread_in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    use std::os::fd::AsFd;
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap();
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// What `ARGS` print to stdout in network namespace `ns`, trimmed.
pub fn netns_output(ns: &str, args: &[&str]) -> String {
    let out = in_netns(ns, args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The MTU of interface `dev` in network namespace `ns`.
pub fn netdev_mtu(ns: &str, dev: &str) -> u32 {
    netns_output(ns, &["cat", &format!("/sys/class/net/{dev}/mtu")])
        .parse()
        .unwrap()
}

/// The `dataplane` binary with `ARGS` in network namespace `ns`, ended after a minute
/// (exit 124) if it hangs.
pub fn dataplane_in(ns: &str, bin: &str, args: &[&str]) -> std::process::Command {
    let mut c = in_netns(ns, &["timeout", "60", bin]);
    c.args(args);
    c
}

/// [`dataplane_in`] started, its stdout and stderr piped.
pub fn spawn_piped(mut c: std::process::Command) -> std::process::Child {
    use std::process::Stdio;
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// tcpdump writing what interface `dev` of namespace `ns` sees into a pcap file, packet
/// by packet, until [`Tcpdump::stop`].
pub struct Tcpdump(std::process::Child);

impl Tcpdump {
    /// Starts capturing (`extra`: more tcpdump arguments, such as a snap length or a
    /// filter) and gives tcpdump half a second to open the interface.
    pub fn start(ns: &str, dev: &str, file: &std::path::Path, extra: &[&str]) -> Self {
        use std::process::Stdio;
        let child = in_netns(ns, &["tcpdump", "-i", dev, "-U", "-w"])
            .arg(file)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        Self(child)
    }

    /// Stops it (SIGINT, so the file is complete) and waits.
    pub fn stop(mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// tcpdump's verbose decoding of a capture file, one line a packet (`flags`: more, such
/// as `-e` for the link-layer header).
pub fn tcpdump_text(file: &std::path::Path, flags: &[&str]) -> String {
    let out = std::process::Command::new("tcpdump")
        .args(["-Z", "root", "-nn", "-vv"])
        .args(flags)
        .arg("-r")
        .arg(file)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The folder of the reference's example configurations, if this checkout has it
/// (`DAQIRI_EXAMPLES` overrides).
pub fn reference_examples_dir() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    [
        std::env::var_os("DAQIRI_EXAMPLES").map(PathBuf::from),
        Some(root.join("shared/daqiri-examples")),
        Some(root.join("../shared/daqiri-examples")),
        Some(PathBuf::from("/work/shared/daqiri-examples")),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.is_dir())
}

/// A reference example mapped to this machine, changing only what names the reference's
/// hardware: NIC addresses become the software loopback (interfaces that named one NIC
/// port name one loopback port), every worker and bench core becomes `core`, the main
/// core 0, and with `host_memory` GPU regions become host regions, GPU reorders CPU ones
/// and `gpu_direct` generators CPU ones; `<...>` placeholders of MAC and IP addresses get local values.
/// `None` (and a SKIP line) when the reference examples are not in this checkout.
pub fn mapped_reference_example(name: &str, core: u32, host_memory: bool) -> Option<String> {
    let Some(dir) = reference_examples_dir() else {
        eprintln!("SKIP: reference examples not found (set DAQIRI_EXAMPLES to the folder)");
        return None;
    };
    let text = std::fs::read_to_string(dir.join(name)).expect("reference example");
    let mut out = String::new();
    for line in text.lines() {
        let (indent, body) = line.split_at(line.len() - line.trim_start().len());
        let key = body
            .trim_start_matches("- ")
            .split(':')
            .next()
            .unwrap_or("");
        let value = body.split_once(':').map(|(_, v)| v.trim()).unwrap_or("");
        let dash = if body.starts_with("- ") { "- " } else { "" };
        let mapped = match key {
            "loopback" => Some("\"sw\"".to_owned()),
            "address" if value.starts_with('<') || value.contains(':') => {
                Some("\"loopback\"".to_owned())
            }
            "cpu_core" => Some(core.to_string()),
            "master_core" => Some("0".to_owned()),
            "kind" if host_memory && value.contains("device") => Some("\"host\"".to_owned()),
            // GPU-only work has a CPU counterpart where memory is mapped to the host.
            "reorder_type" if host_memory && value.contains("gpu") => Some("\"cpu\"".to_owned()),
            "gpu_direct" if host_memory && value == "true" => Some("false".to_owned()),
            "eth_src_addr" if value.starts_with('<') => Some("\"02:00:00:00:00:01\"".to_owned()),
            "eth_dst_addr" if value.starts_with('<') => Some("\"02:00:00:00:00:02\"".to_owned()),
            _ if value.starts_with('<') && value.ends_with('>') => {
                Some(value[1..value.len() - 1].to_owned())
            }
            _ => None,
        };
        match mapped {
            Some(v) => out.push_str(&format!("{indent}{dash}{key}: {v}\n")),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    Some(out)
}

/// tcpdump's view of a capture file: (timestamp ns, hex bytes) per packet.
pub fn tcpdump(path: &std::path::Path) -> Option<Vec<(u64, Vec<u8>)>> {
    let out = match std::process::Command::new("tcpdump")
        .args(["-r"])
        .arg(path)
        .args(["-Z", "root", "-nn", "-tt", "--nano", "-xx"])
        .output()
    {
        Ok(o) if o.status.success() => o,
        Ok(o) => panic!("tcpdump: {}", String::from_utf8_lossy(&o.stderr)),
        Err(_) => {
            eprintln!("SKIP tcpdump read-back: tcpdump is not installed");
            return None;
        }
    };
    let mut packets: Vec<(u64, Vec<u8>)> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if !line.starts_with(char::is_whitespace) {
            // "SECONDS.NANOS summary...": a new packet.
            let ts = line.split_whitespace().next().unwrap();
            let (s, ns) = ts.split_once('.').unwrap();
            let ts = s.parse::<u64>().unwrap() * 1_000_000_000 + ns.parse::<u64>().unwrap();
            packets.push((ts, Vec::new()));
        } else if let Some((offset, data)) = line
            .strip_prefix("\t0x")
            .and_then(|h| h.split_once(':'))
            .filter(|(o, _)| o.len() == 4 && o.chars().all(|c| c.is_ascii_hexdigit()))
        {
            // "\t0x0010:  4500 0034 ...": the packet's bytes from that offset.
            let last = packets.last_mut().expect("a packet line first");
            assert_eq!(usize::from_str_radix(offset, 16).unwrap(), last.1.len());
            for word in data.split_whitespace() {
                for i in (0..word.len()).step_by(2) {
                    last.1
                        .push(u8::from_str_radix(&word[i..i + 2], 16).unwrap());
                }
            }
        }
        // Other indented lines are tcpdump's decoding of the frame's contents.
    }
    Some(packets)
}

/// Checks every frame of a capture read back (as `bench raw`'s generators make them):
/// `configs/rdma_loopback.yaml`'s text with the server's RX queue split: a 64-byte header
/// region `HDR` first, then `DATA_RX_GPU_SERVER` for the payload.
pub fn rdma_loopback_with_split_server_rx(original: &str) -> String {
    let text = original
        .replace(
            r#"    - {name: "DATA_RX_GPU_SERVER""#,
            "    - {name: \"HDR\", kind: \"host\", affinity: 0, num_bufs: 128, buf_size: 64}\n    - {name: \"DATA_RX_GPU_SERVER\"",
        )
        .replace(
            r#"{name: "Server_RX_Queue", id: 0, cpu_core: 1, batch_size: 1}"#,
            r#"{name: "Server_RX_Queue", id: 0, cpu_core: 1, batch_size: 1, memory_regions: ["HDR", "DATA_RX_GPU_SERVER"]}"#,
        );
    assert_eq!(
        text.matches(r#"memory_regions: ["HDR""#).count(),
        1,
        "the split applies"
    );
    text
}

/// Wraps each datagram in a UDP frame (10.0.0.1:7000 to 10.0.0.2:7001) and sends the
/// frames through `tx` in bursts of 16, waiting while the queue is full.
pub fn send_udp_frames(tx: &mut dataplane::TxQueue, datagrams: &[Vec<u8>]) {
    use std::net::SocketAddrV4;
    let udp = dataplane::packet::UdpFrame::new(
        "10.0.0.1:7000".parse::<SocketAddrV4>().unwrap(),
        "10.0.0.2:7001".parse::<SocketAddrV4>().unwrap(),
    );
    let frames: Vec<Vec<u8>> = datagrams
        .iter()
        .map(|d| {
            let mut frame = vec![0u8; udp.header_len() + d.len()];
            udp.write(d, &mut frame).unwrap();
            frame
        })
        .collect();
    send_frames(tx, &frames);
}

/// Sends whole frames through `tx` in bursts of 16, waiting while the queue is full.
pub fn send_frames(tx: &mut dataplane::TxQueue, frames: &[Vec<u8>]) {
    for group in frames.chunks(16) {
        let mut b = loop {
            match tx.alloc(group.len()) {
                Ok(b) => break b,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        };
        for (k, f) in group.iter().enumerate() {
            b.buffer_mut(k, 0).unwrap()[..f.len()].copy_from_slice(f);
            b.set_len(k, 0, f.len());
        }
        while let Err(back) = tx.send(b) {
            b = back.burst;
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
