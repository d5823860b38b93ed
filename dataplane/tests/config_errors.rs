//! Bad configurations give errors that name the key path, line and column.

#[macro_use]
mod common;

use dataplane::config::{self, ConfigError, DiagnosticKind, Severity};

const GOOD: &str = config_yaml!(
    raw,
    0,
    loopback,
    r#"    memory_regions:
    - name: bufs
      kind: host
      affinity: 0
      num_bufs: 1024
      buf_size: 2048
    interfaces:
    - name: loop0
      address: loopback
      tx:
        queues:
        - name: tq
          id: 0
          cpu_core: 0
          batch_size: 64
          memory_regions: [bufs]
      rx:
        queues:
        - name: rq
          id: 0
          cpu_core: 0
          batch_size: 64
          memory_regions: [bufs]
        flows:
        - name: f0
          id: 1
          action: {type: queue, id: 0}
          match: {udp_src: 4096, udp_dst: "5000-5010"}
"#
);

fn load(text: &str) -> Result<config::Loaded, ConfigError> {
    config::load_with(text, "test.yaml", &|core| core < 2)
}

fn errors(text: &str) -> Vec<String> {
    match load(text) {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(e) => e.errors().map(|d| d.to_string()).collect(),
    }
}

fn one_error(text: &str) -> String {
    let e = errors(text);
    assert_eq!(e.len(), 1, "{e:#?}");
    e.into_iter().next().unwrap()
}

#[test]
fn good_config_loads_with_daqiri_and_dataplane_roots_and_bare_cfg() {
    let c = load(GOOD).unwrap().config;
    assert_eq!(c.engine.name(), "loopback");
    assert_eq!(
        c.interfaces[0].rx.as_ref().unwrap().flows[0]
            .matches
            .udp_dst
            .unwrap()
            .len(),
        11
    );
    load(&GOOD.replace("dataplane:", "daqiri:")).unwrap();
    // The cfg map itself at the root.
    let bare: String = GOOD
        .lines()
        .filter(|l| !l.starts_with("dataplane:") && !l.trim_start().starts_with("cfg:"))
        .map(|l| format!("{}\n", l.get(4..).unwrap_or("")))
        .collect();
    load(&bare).unwrap();
}

#[test]
fn typo_is_unknown_key_with_suggestion_and_position() {
    let all = errors(&GOOD.replacen("batch_size: 64", "batch_sise: 64", 1));
    let e = all
        .iter()
        .find(|e| e.contains("unknown key"))
        .expect("unknown key error");
    assert!(
        all.iter()
            .any(|e| e.contains("missing required key `batch_size`")),
        "{all:#?}"
    );
    assert!(
        e.contains("interfaces[0].tx.queues[0].batch_sise (line 22, column 11)"),
        "{e}"
    );
    assert!(
        e.contains("unknown key `batch_sise`, did you mean `batch_size`?"),
        "{e}"
    );
}

#[test]
fn broken_yaml_names_line_and_column() {
    let e = one_error(&GOOD.replace("affinity: 0", "affinity: [0"));
    assert!(e.contains("invalid YAML"), "{e}");
    assert!(e.contains("line "), "{e}");
    let e = one_error("dataplane:\n  cfg:\n    version: 1\n    version: 1\n");
    assert!(e.contains("line 4") && e.contains("duplicate"), "{e}");
}

#[test]
fn wrong_types_negative_and_huge_numbers() {
    let e = one_error(&GOOD.replace("num_bufs: 1024", "num_bufs: many"));
    assert!(
        e.contains(
            "memory_regions[0].num_bufs (line 12, column 17): expected an integer, got \"many\""
        ),
        "{e}"
    );
    let e = one_error(&GOOD.replace("num_bufs: 1024", "num_bufs: -5"));
    assert!(e.contains("-5 is out of range: must be at least 1"), "{e}");
    let e = one_error(&GOOD.replace("num_bufs: 1024", "num_bufs: 99999999999999999999999999"));
    assert!(
        e.contains("memory_regions[0].num_bufs") && e.contains("out of range"),
        "{e}"
    );
    let e = one_error(&GOOD.replace("buf_size: 2048", "buf_size: 1.5"));
    assert!(e.contains("expected an integer, got 1.5"), "{e}");
    let e = one_error(&GOOD.replace("loopback: \"sw\"", "loopback: \"sw\"\n    debug: yes"));
    assert!(
        e.contains("debug") && e.contains("expected true or false"),
        "{e}"
    );
    let e = one_error(&GOOD.replace("kind: host", "kind: hots"));
    assert!(
        e.contains("unknown value `hots`") && e.contains("did you mean `host`"),
        "{e}"
    );
}

#[test]
fn batch_size_zero_is_rejected() {
    let e = errors(&GOOD.replacen("batch_size: 64", "batch_size: 0", 1));
    assert!(
        e.iter()
            .any(|e| e.contains("interfaces[0].tx.queues[0].batch_size")
                && e.contains("batch_size must be at least 1, got 0")),
        "{e:#?}"
    );
}

#[test]
fn ring_packets_is_range_checked_and_planned_in_full_bursts() {
    let with = |v: &str| {
        GOOD.replacen(
            "          batch_size: 64\n          memory_regions: [bufs]\n      rx:",
            &format!("          batch_size: 64\n          ring_packets: {v}\n          memory_regions: [bufs]\n      rx:"),
            1,
        )
    };
    let e = one_error(&with("0"));
    assert!(
        e.contains("interfaces[0].tx.queues[0].ring_packets")
            && e.contains("line 23, column 25")
            && e.contains("out of range"),
        "{e}"
    );
    let e = one_error(&with("1000000"));
    assert!(e.contains("at most 262144"), "{e}");
    let cfg = load(&with("1000")).expect("loads").config;
    let plan = dataplane::plan::Plan::from_config(&cfg).expect("plans");
    // 1000 packets in bursts of 64: 16 bursts; the RX queue has the default 8192: 128.
    let rings: Vec<usize> = plan.queues.iter().map(|q| q.ring_bursts).collect();
    assert_eq!(rings.iter().copied().max(), Some(128), "{rings:?}");
    assert!(rings.contains(&16), "{rings:?}");
}

#[test]
fn duplicate_names_are_rejected() {
    let dup_region = GOOD.replace(
        "    interfaces:",
        "    - name: bufs\n      kind: host\n      affinity: 0\n      num_bufs: 8\n      buf_size: 64\n    interfaces:",
    );
    let e = errors(&dup_region);
    assert!(
        e.iter().any(|e| e.contains("memory_regions[1].name")
            && e.contains("duplicate memory region name `bufs`")),
        "{e:#?}"
    );
    let e = errors(&GOOD.replace("name: rq", "name: tq"));
    assert!(
        e.iter().any(|e| e.contains("duplicate queue name `tq`")),
        "{e:#?}"
    );
}

#[test]
fn unknown_references_are_rejected_with_suggestions() {
    let e = errors(&GOOD.replacen("memory_regions: [bufs]", "memory_regions: [bufz]", 1));
    assert!(
        e.iter().any(
            |e| e.contains("interfaces[0].tx.queues[0].memory_regions[0]")
                && e.contains("unknown memory region `bufz`, did you mean `bufs`?")
        ),
        "{e:#?}"
    );
    let e = one_error(&GOOD.replace(
        "action: {type: queue, id: 0}",
        "action: {type: queue, id: 3}",
    ));
    assert!(e.contains("flow `f0` sends to queue 3"), "{e}");
}

#[test]
fn too_few_buffers_says_how_many_are_needed() {
    let e = one_error(&GOOD.replace("num_bufs: 1024", "num_bufs: 100"));
    assert!(e.contains("memory_regions[0].num_bufs"), "{e}");
    assert!(
        e.contains("need at least 128") && e.contains("set num_bufs to 256 or more"),
        "{e}"
    );
}

#[test]
fn placeholders_are_rejected() {
    let e = one_error(&GOOD.replace("address: loopback", "address: <0000:00:00.0>"));
    assert!(e.contains("interfaces[0].address (line 16, column 16): placeholder `<0000:00:00.0>` must be replaced"), "{e}");
}

#[test]
fn unsupported_reference_keys_are_named() {
    let e = one_error(&GOOD.replace(
        "          cpu_core: 0\n          batch_size: 64\n          memory_regions: [bufs]\n      rx:",
        "          cpu_core: 0\n          batch_size: 64\n          memory_regions: [bufs]\n          split_boundary: 64\n      rx:",
    ));
    assert!(
        e.contains("not supported yet: interfaces[0].tx.queues[0].split_boundary"),
        "{e}"
    );
    let e = one_error(&GOOD.replace(
        "          memory_regions: [bufs]\n      rx:",
        "          memory_regions: [bufs]\n          offloads: [vlan_push]\n      rx:",
    ));
    assert!(e.contains("not supported: offloads vlan_push"), "{e}");
}

#[test]
fn missing_core_is_a_warning_in_validate() {
    let loaded = load(&GOOD.replacen("cpu_core: 0", "cpu_core: 7", 1)).unwrap();
    let w: Vec<_> = loaded
        .warnings
        .iter()
        .filter(|d| d.severity == Severity::Warning && d.kind == DiagnosticKind::Machine)
        .collect();
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(
        w[0].to_string()
            .contains("interfaces[0].tx.queues[0].cpu_core")
            && w[0].to_string().contains("cpu_core 7")
    );
}

#[test]
fn unquoted_pci_address_is_a_string() {
    let text = GOOD
        .replace("    loopback: \"sw\"\n", "")
        .replace("address: loopback", "address: 0000:01:00.0");
    let c = match config::load_with(&text, "t", &|_| true) {
        Ok(l) => l.config,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(c.interfaces[0].address, "0000:01:00.0");
    assert_eq!(c.engine.name(), "dpdk");
}

#[test]
fn no_input_panics() {
    for text in [
        "",
        "~",
        "[]",
        "42",
        "dataplane: 3",
        "dataplane:\n  cfg: []",
        "daqiri:\n  cfg:\n    interfaces: {a: 1}",
        "bench_tx: 5",
        "\t\u{0}",
    ] {
        let _ = config::load_with(text, "t", &|_| true);
    }
}

#[test]
fn roce_flow_control_keys_load_and_are_range_checked() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/rdma_loopback.yaml"),
    )
    .unwrap();
    let tuned = text.replacen(
        "transport_mode: RC\n",
        "transport_mode: RC\n        min_rnr_timer: 5\n        rnr_retry: 3\n        retry_count: 2\n        max_inflight_bytes: 262144\n",
        1,
    );
    let cfg = load(&tuned).expect("tuned config loads").config;
    let roce = cfg.interfaces[0].roce.as_ref().unwrap();
    assert_eq!(
        (roce.min_rnr_timer, roce.rnr_retry, roce.retry_count),
        (5, 3, 2)
    );
    // 256 KiB of 64 KiB messages: 4 sends in flight; small messages cap at 1024.
    assert_eq!(roce.send_window(65536), 4);
    assert_eq!(roce.send_window(64), 1024);
    // The other interface kept the defaults.
    let other = cfg.interfaces[1].roce.as_ref().unwrap();
    assert_eq!((other.min_rnr_timer, other.rnr_retry), (12, 7));
    let e = one_error(&text.replacen(
        "transport_mode: RC\n",
        "transport_mode: RC\n        min_rnr_timer: 32\n",
        1,
    ));
    assert!(
        e.contains("roce_config.min_rnr_timer") && e.contains("out of range"),
        "{e}"
    );
}

#[test]
fn reorder_configs_are_checked_as_in_the_reference() {
    let with = |reorder: &str| {
        GOOD.replace(
            "          match: {udp_src: 4096, udp_dst: \"5000-5010\"}\n",
            &format!("          match: {{udp_src: 4096, udp_dst: \"5000-5010\"}}\n        reorder_configs:\n{reorder}"),
        )
        .replace(
            "      buf_size: 2048\n",
            "      buf_size: 2048\n    - {name: out, kind: host, affinity: 0, num_bufs: 4, buf_size: 65536}\n",
        )
    };
    let ok = "        - {name: r, reorder_type: cpu, memory_region: out, payload_byte_offset: 48, flow_ids: [1], method: {seq_packets_per_batch: {sequence_number: {bit_offset: 336, bit_width: 16}, packets_per_batch: 32}}}\n";
    let cfg = load(&with(ok)).expect("a valid reorder loads").config;
    let r = &cfg.interfaces[0].rx.as_ref().unwrap().reorder[0];
    assert_eq!(r.spec(2048).batch_bytes(), 32 * 2000);
    // The output must hold a batch: 64 x 2000 bytes > 65536.
    let e = one_error(&with(
        &ok.replace("packets_per_batch: 32", "packets_per_batch: 64"),
    ));
    assert!(e.contains("a batch needs 128000 bytes"), "{e}");
    let e = errors(&with(&ok.replace("reorder_type: cpu", "reorder_type: gpu")));
    assert!(
        e.len() == 2 && e[0].contains("source region `bufs` is host"),
        "{e:?}"
    );
    assert!(e[1].contains("output region `out` is host"), "{e:?}");
    let e = one_error(&with(&ok.replace("flow_ids: [1]", "flow_ids: [9]")));
    assert!(e.contains("no flow in rx.flows has id 9"), "{e}");
    let e = one_error(&with(
        &ok.replace("packets_per_batch: 32", "packets_per_batch: 24"),
    ));
    assert!(e.contains("must divide 2^16"), "{e}");
    let e = one_error(&with(&ok.replace(
        "method: {seq_packets_per_batch: {sequence_number: {bit_offset: 336, bit_width: 16}, packets_per_batch: 32}}",
        "data_types: {input_type: int4, output_type: fp64}, method: {seq_batch_number: {sequence_number: {bit_offset: 336, bit_width: 10}, batch_number: {bit_offset: 352, bit_width: 2}}}",
    )));
    assert!(e.contains("not supported: output_type fp64"), "{e}");
}

#[test]
fn limits_that_would_panic_at_start_are_validation_errors() {
    // The buffer pool holds at most 2^30 buffers.
    let e = one_error(&GOOD.replace("num_bufs: 1024", "num_bufs: 1073741825"));
    assert!(
        e.contains("memory_regions[0].num_bufs (line 12, column 17)")
            && e.contains("at most 1073741824"),
        "{e}"
    );
    // Segment lengths are 32-bit; 1 GiB is the most a buffer may have.
    let e = one_error(&GOOD.replace("buf_size: 2048", "buf_size: 4294967296"));
    assert!(
        e.contains("memory_regions[0].buf_size") && e.contains("at most 1073741824"),
        "{e}"
    );
    // C APIs (EAL arguments, device names) end at a NUL byte.
    let e = one_error(&GOOD.replace("address: loopback", "address: \"loop\\0back\""));
    assert!(
        e.contains("interfaces[0].address (line 16, column 16): contains a NUL byte"),
        "{e}"
    );
    let e = one_error(&GOOD.replace("- name: tq", "- name: \"t\\0q\""));
    assert!(e.contains("contains a NUL byte"), "{e}");
    // A name of megabytes is refused without being echoed back.
    let huge = "x".repeat(5 << 20);
    let e = one_error(&GOOD.replace("- name: loop0", &format!("- name: {huge}")));
    assert!(
        e.contains("interfaces[0].name") && e.contains("the limit is 4096"),
        "{e}"
    );
    assert!(e.len() < 500, "the error is {} bytes long", e.len());
}

#[test]
fn host_regions_are_capped_at_the_machines_memory() {
    let total = config::host_memory_bytes().expect("/proc/meminfo");
    // One region larger than the machine.
    let bufs = (total / 65536 + 1).min(1 << 30);
    let e = one_error(
        &GOOD
            .replace("num_bufs: 1024", &format!("num_bufs: {bufs}"))
            .replace("buf_size: 2048", "buf_size: 65536"),
    );
    assert!(
        e.contains("memory_regions[0].num_bufs") && e.contains("more than this machine's"),
        "{e}"
    );
    // Two regions that fit alone but not together.
    let half = total / 2 / 65536 + 16;
    let two = GOOD
        .replace("num_bufs: 1024", &format!("num_bufs: {half}"))
        .replace("buf_size: 2048", "buf_size: 65536")
        .replace(
            "    interfaces:",
            &format!("    - {{name: more, kind: host, affinity: 0, num_bufs: {half}, buf_size: 65536}}\n    interfaces:"),
        )
        .replace("memory_regions: [bufs]\n      rx", "memory_regions: [more]\n      rx");
    let e = one_error(&two);
    assert!(
        e.contains("the host memory regions need") && e.contains("together"),
        "{e}"
    );
    // Device memory is the GPU's: not counted here.
    let dev = GOOD
        .replace("num_bufs: 1024", &format!("num_bufs: {bufs}"))
        .replace("buf_size: 2048", "buf_size: 65536")
        .replace("kind: host", "kind: device");
    assert!(
        errors_or_none(&dev)
            .iter()
            .all(|e| !e.contains("this machine's")),
        "device regions are not capped by host memory"
    );
}

fn errors_or_none(text: &str) -> Vec<String> {
    match load(text) {
        Ok(_) => Vec::new(),
        Err(e) => e.errors().map(|d| d.to_string()).collect(),
    }
}

#[test]
fn the_reader_refuses_devices_fifos_directories_and_huge_files() {
    let err = |p: &std::path::Path| match config::load_file(p) {
        Ok(_) => panic!("{} loaded", p.display()),
        Err(e) => e.to_string(),
    };
    let e = err(std::path::Path::new("/dev/zero"));
    assert!(e.contains("not a regular file (a character device)"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let e = err(dir.path());
    assert!(e.contains("not a regular file (a directory)"), "{e}");
    // A FIFO nobody writes to would block a plain read forever.
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let e = err(&fifo);
    assert!(e.contains("not a regular file (a FIFO)"), "{e}");
    let big = dir.path().join("big.yaml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(config::MAX_FILE_BYTES + 1).unwrap();
    let e = err(&big);
    assert!(
        e.contains("configurations are limited to 16777216 bytes"),
        "{e}"
    );
}

#[test]
fn multi_queue_vdevs_name_the_option_that_opens_more_queues() {
    let dpdk = |address: &str| {
        GOOD.replace("    loopback: \"sw\"\n", "")
            .replace("address: loopback", &format!("address: \"{address}\""))
            .replace(
                "        - name: rq\n",
                "        - {name: rq2, id: 1, cpu_core: 0, batch_size: 64, memory_regions: [bufs]}\n        - name: rq\n",
            )
    };
    let e = one_error(&dpdk("net_af_packet0,iface=veth0"));
    assert!(
        e.contains("interfaces[0].address")
            && e.contains("net_af_packet0 opens 1 queue pair(s) (no qpairs, so 1)")
            && e.contains("add `,qpairs=2` to the vdev string"),
        "{e}"
    );
    let e = one_error(&dpdk("net_af_xdp0,iface=veth0,queue_count=1"));
    assert!(e.contains("add `,queue_count=2`"), "{e}");
    assert!(load(&dpdk("net_af_packet0,iface=veth0,qpairs=2")).is_ok());
    assert!(
        load(&dpdk("net_ring0")).is_ok(),
        "other vdevs open what is asked"
    );
    let e = one_error(&dpdk("net_ring0").replace("buf_size: 2048", "buf_size: 70000"));
    assert!(
        e.contains("memory_regions[0].buf_size")
            && e.contains("a DPDK mbuf holds at most 65407 bytes"),
        "{e}"
    );
}

/// A GPU region may name its GPU by UUID (as `nvidia-smi -L` prints it); a host region
/// may not, and the error says why, where.
#[test]
fn gpu_regions_take_a_gpu_uuid_as_affinity() {
    let uuid = "GPU-e628b6a2-430e-0ad3-3329-96d309cd2ba7";
    let text = GOOD.replace(
        "      kind: host\n      affinity: 0",
        &format!("      kind: device\n      affinity: {uuid}"),
    );
    let c = load(&text).expect("loads").config;
    assert_eq!(c.memory_regions[0].gpu_uuid.as_deref(), Some(uuid));

    let e = one_error(&GOOD.replace("affinity: 0", &format!("affinity: \"{uuid}\"")));
    assert!(e.contains("memory_regions[0].affinity"), "{e}");
    assert!(e.contains("line 11, column 17"), "{e}");
    assert!(e.contains("only device and host_pinned regions"), "{e}");
    // Without a GPU (CI) the start says so, naming the region.
    if !gpudirect::driver_present() {
        let err = dataplane::DataPlane::start(&c)
            .err()
            .expect("no GPU")
            .to_string();
        assert!(
            err.contains("memory region bufs") && err.contains("CUDA"),
            "{err}"
        );
    }
}

/// The reference's bench keys describe what the application expects; where the queues
/// disagree, the error names the key and says why.
#[test]
fn bench_keys_that_disagree_with_the_queues_are_named() {
    let with = |bench: &str| format!("{GOOD}{bench}");
    let e = one_error(&with(
        "bench_tx: {interface_name: loop0, gpu_direct: true}\n",
    ));
    assert!(
        e.contains("bench_tx[0].gpu_direct") && e.contains("sends from host memory"),
        "{e}"
    );
    let e = one_error(&with(
        "bench_tx: {interface_name: loop0, split_boundary: true}\n",
    ));
    assert!(
        e.contains("not supported yet: bench_tx.split_boundary"),
        "{e}"
    );
    load(&with(
        "bench_tx: {interface_name: loop0, split_boundary: false, gpu_direct: false}\n",
    ))
    .expect("the defaults are accepted");
    let e = one_error(&with(
        "bench_rx: {interface_name: loop0, gpu_direct: true}\n",
    ));
    assert!(
        e.contains("bench_rx[0].gpu_direct") && e.contains("host memory only"),
        "{e}"
    );
    let e = one_error(&with("bench_rx: {interface_name: loop0, batch_size: 32}\n"));
    assert!(
        e.contains("bench_rx[0].batch_size") && e.contains("up to 64 packets"),
        "{e}"
    );
    let e = one_error(&with(
        "bench_rx: {interface_name: loop0, split_boundary: true}\n",
    ));
    assert!(e.contains("bench_rx[0].split_boundary"), "{e}");
    load(&with(
        "bench_rx: {interface_name: loop0, gpu_direct: false, split_boundary: false, batch_size: 64, max_packet_size: 2048, header_size: 64}\n",
    ))
    .expect("keys that agree with the queue");
    let e = one_error(&with(
        "bench_reorder_quantize: {input_type: int4, output_type: fp32, verify_batches: 3}\n",
    ));
    assert!(
        e.contains("bench_reorder_quantize") && e.contains("no reorder_configs entry converts"),
        "{e}"
    );
}

/// `multicast_groups`: groups must be multicast and sources unicast, of the group's IP
/// version; IPv6 groups are refused by name on the socket engine (its sockets are IPv4)
/// and taken on a DPDK port; an engine that would not join (the loopback), a TCP interface
/// or a UDP client refuses the key rather than ignoring it.
#[test]
fn multicast_groups_are_checked_and_refused_where_nothing_joins() {
    let on_loopback = GOOD.replace(
        "      address: loopback\n",
        "      address: loopback\n      multicast_groups: [\"239.1.1.1\"]\n",
    );
    let e = one_error(&on_loopback);
    assert!(
        e.contains("interfaces[0].multicast_groups")
            && e.contains("not supported on the loopback engine"),
        "{e}"
    );
    let bad = |groups: &str| {
        errors(&GOOD.replace(
            "      address: loopback\n",
            &format!("      address: loopback\n      multicast_groups: {groups}\n"),
        ))
    };
    let e = bad("[\"10.0.0.1\"]");
    assert!(
        e.iter().any(|m| m.contains("multicast_groups[0]")
            && m.contains("10.0.0.1 is not a multicast group")),
        "{e:#?}"
    );
    let e = bad("[{group: 232.1.1.1, source: 239.0.0.1}]");
    assert!(e.iter().any(|m| m.contains("multicast_groups[0].source") && m.contains("not a unicast source")), "{e:#?}");
    let e = bad("[{group: \"ff3e::1\", source: 10.0.0.1}]");
    assert!(
        e.iter()
            .any(|m| m.contains("source 10.0.0.1 and group ff3e::1 are of different IP versions")),
        "{e:#?}"
    );
    let e = bad("[\"fd00::1\"]");
    assert!(
        e.iter()
            .any(|m| m.contains("fd00::1 is not a multicast group (ff00::/8)")),
        "{e:#?}"
    );
    let dpdk = GOOD
        .replace("    loopback: \"sw\"\n", "")
        .replace(
            "      address: loopback\n",
            "      address: net_null0\n      multicast_groups: [\"ff15::7\", {group: \"ff3e::8\", source: \"fd00::1\"}]\n",
        );
    let c = load(&dpdk).expect("a DPDK port takes IPv6 groups").config;
    assert_eq!(c.interfaces[0].multicast.len(), 2);
    assert_eq!(c.interfaces[0].multicast[1].ipv4(), None);
    let socket = |socket_config: &str| {
        format!(
            "\ndataplane:\n  cfg:\n    version: 1\n    stream_type: socket\n    master_core: 0\n    memory_regions:\n    - {{name: bufs, kind: host, affinity: 0, num_bufs: 64, buf_size: 2048}}\n    interfaces:\n    - name: s0\n      address: 127.0.0.1\n      socket_config: {socket_config}\n      multicast_groups: [\"239.1.1.1\"]\n      rx:\n        queues:\n        - {{name: q, id: 0, cpu_core: 0, batch_size: 8, memory_regions: [bufs]}}\n"
        )
    };
    load(&socket(
        "{mode: server, local_addr: \"udp://127.0.0.1:5000\"}",
    ))
    .expect("a UDP server joins");
    let e = one_error(
        &socket("{mode: server, local_addr: \"udp://127.0.0.1:5000\"}")
            .replace("[\"239.1.1.1\"]", "[\"ff15::7\"]"),
    );
    assert!(
        e.contains("IPv6 group ff15::7 on an IPv4 local_addr"),
        "{e}"
    );
    // IPv6 sockets join IPv6 groups; the groups of one interface are of its version.
    let v6 = socket("{mode: server, local_addr: \"udp://[::]:5000\"}");
    load(&v6.replace(
        "[\"239.1.1.1\"]",
        "[\"ff15::7\", {group: \"ff3e::8\", source: \"fd00::1\"}]",
    ))
    .expect("an IPv6 UDP server joins IPv6 groups");
    let e = one_error(&v6);
    assert!(
        e.contains("IPv4 group 239.1.1.1 on an IPv6 local_addr"),
        "{e}"
    );
    let e = one_error(&socket(
        "{mode: server, local_addr: \"tcp://127.0.0.1:5000\"}",
    ));
    assert!(e.contains("multicast is UDP"), "{e}");
    let e = one_error(&socket(
        "{mode: client, remote_addr: \"udp://127.0.0.1:5000\"}",
    ));
    assert!(
        e.contains("a UDP server (mode: server) joins groups"),
        "{e}"
    );
}

/// IPv6 on the socket engine: `[addr]:port` URIs, legacy keys and `allowed_peers`
/// prefixes of either version; one version per interface; refused on the RDMA engine;
/// flow rules on IPv4 or UDP fields refused on an IPv6 interface (an IPv6 datagram has
/// none for them to match).
#[test]
fn ipv6_addresses_are_read_and_refused_where_they_cannot_work() {
    let socket = |engine: &str, socket_config: &str, flows: &str| {
        format!(
            "\ndataplane:\n  cfg:\n    version: 1\n    stream_type: {engine}\n    master_core: 0\n    memory_regions:\n    - {{name: bufs, kind: host, affinity: 0, num_bufs: 64, buf_size: 2048}}\n    interfaces:\n    - name: s0\n      address: \"::1\"\n      socket_config: {socket_config}\n      rx:\n{flows}        queues:\n        - {{name: q, id: 0, cpu_core: 0, batch_size: 8, memory_regions: [bufs]}}\n"
        )
    };
    let server = "{mode: server, local_addr: \"udp://[fd00::1]:5000\", allowed_peers: [\"fd00::/64\", \"10.0.0.0/8\", \"::1\"]}";
    let c = load(&socket("socket", server, ""))
        .expect("IPv6 on sockets")
        .config;
    let s = c.interfaces[0].socket.as_ref().unwrap();
    let local = s.local.unwrap();
    assert_eq!((local.ip.to_string(), local.port), ("fd00::1".into(), 5000));
    let peers = s.peer_filter();
    for (peer, allowed) in [
        ("fd00::9", true),
        ("fd01::9", false),
        ("::1", true),
        ("10.1.2.3", true),
        ("::ffff:10.1.2.3", true),
        ("11.1.2.3", false),
    ] {
        assert_eq!(peers.allows(peer.parse().unwrap()), allowed, "{peer}");
    }
    let bare = "{mode: client, local_addr: \"tcp://fd00::1\", remote_addr: \"tcp://[fd00::2]:80\"}";
    let c = load(&socket("socket", bare, ""))
        .expect("a bare IPv6 address")
        .config;
    assert_eq!(
        c.interfaces[0].socket.as_ref().unwrap().local.unwrap().port,
        0
    );
    for (bad, says) in [
        ("udp://[fd00::1:5000", "`[` without `]`"),
        ("udp://[fd00::1]:x", "bad port"),
        ("udp://fd00::zz", "bad IP address"),
    ] {
        let e = errors(&socket(
            "socket",
            &format!("{{mode: server, local_addr: \"{bad}\"}}"),
            "",
        ));
        assert!(
            e.iter()
                .any(|e| e.contains(says) && e.contains("local_addr")),
            "{bad}: {e:?}"
        );
    }
    let e = one_error(&socket(
        "socket",
        "{mode: client, local_addr: \"udp://[fd00::1]:5000\", remote_addr: \"udp://10.0.0.1:5000\"}",
        "",
    ));
    assert!(
        e.contains("remote_addr") && e.contains("different IP versions"),
        "{e}"
    );
    let e = errors(&socket(
        "socket",
        "{mode: server, local_addr: \"roce://[fd00::1]:5000\"}\n      roce_config: {transport_mode: RC}",
        "",
    ));
    assert!(
        e.iter()
            .any(|e| e.contains("not supported on the rdma engine: IPv6")),
        "{e:?}"
    );
    let flows = "        flows:\n        - {name: f, id: 1, action: {type: queue, id: 0}, match: {udp_dst: 5000}}\n";
    let e = one_error(&socket("socket", server, flows));
    assert!(
        e.contains("match.udp_dst") && e.contains("IPv6 socket interface"),
        "{e}"
    );
}

/// `descriptors` (a DPDK port's ring depth): 64 to 32768, named with its position when out
/// of range; refused on engines without device rings (here the software loopback); taken
/// on a DPDK port.
#[test]
fn ring_descriptors_are_checked_and_only_dpdk_ports_take_them() {
    let with = |text: &str, value: &str| {
        text.replacen(
            "      rx:\n        queues:",
            &format!("      rx:\n        descriptors: {value}\n        queues:"),
            1,
        )
    };
    let e = errors(&with(GOOD, "32"));
    assert!(
        e.iter().any(
            |e| e.contains("interfaces[0].rx.descriptors (line 25, column 22)")
                && e.contains("32 is out of range: must be at least 64")
        ),
        "{e:#?}"
    );
    let e = one_error(&with(GOOD, "512"));
    assert!(
        e.contains("interfaces[0].rx.descriptors")
            && e.contains("the loopback engine has no device rings"),
        "{e}"
    );
    let dpdk = with(GOOD, "512")
        .replace("    loopback: \"sw\"\n", "")
        .replace("address: loopback", "address: net_null0");
    let c = load(&dpdk).unwrap().config;
    assert_eq!(c.engine.name(), "dpdk");
    assert_eq!(c.interfaces[0].rx.as_ref().unwrap().descriptors, Some(512));
}
