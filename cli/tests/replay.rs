//! `dataplane replay`: a pcap sent through the software loopback at its own gaps, at a
//! fixed rate and unpaced in loops, each reported in the JSON envelope with its packet
//! count and (when paced) its send-time error; a queue without `accurate_send` and a
//! file that is not a capture are refused with exit status 1 and a message that says why.

#[path = "../../bench/tests/common/mod.rs"]
mod common;

use std::process::Command;

/// A pcap (microsecond timestamps, Ethernet) of `n` UDP frames 100 us apart.
fn pcap(n: u32) -> Vec<u8> {
    let mut out = 0xa1b2_c3d4u32.to_le_bytes().to_vec();
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    for i in 0..n {
        let payload: Vec<u8> = (0..64 + i % 200).map(|k| (k ^ i) as u8).collect();
        let mut frame = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(7000, 7001)
            .write(&mut frame, &payload)
            .unwrap();
        let us = 100 * i;
        out.extend_from_slice(&(1_700_000_000 + us / 1_000_000).to_le_bytes());
        out.extend_from_slice(&(us % 1_000_000).to_le_bytes());
        out.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        out.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        out.extend_from_slice(&frame);
    }
    out
}

fn config(accurate_send: bool) -> String {
    common::LoopPair {
        bufs: (1024, 2048),
        buf_size: 1536,
        tx: &format!("accurate_send: {accurate_send}"),
        rx_queue: "memory_regions: [rx]",
        ..Default::default()
    }
    .text()
}

/// `dataplane replay ARGS`: exit status, stdout, stderr.
fn replay(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .arg("replay")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn result(stdout: &str) -> serde_json::Value {
    let line = stdout.lines().last().expect("a JSON line");
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["command"], "replay");
    v["result"].clone()
}

#[test]
fn a_capture_is_replayed_paced_at_a_rate_and_in_loops() {
    let dir = tempfile::tempdir().unwrap();
    let (capture, paced, plain) = (
        dir.path().join("in.pcap"),
        dir.path().join("paced.yaml"),
        dir.path().join("plain.yaml"),
    );
    std::fs::write(&capture, pcap(500)).unwrap();
    std::fs::write(&paced, config(true)).unwrap();
    std::fs::write(&plain, config(false)).unwrap();
    let (capture, paced, plain) = (
        capture.to_str().unwrap(),
        paced.to_str().unwrap(),
        plain.to_str().unwrap(),
    );

    let (code, stdout, stderr) = replay(&[paced, capture, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("replayed 500 packets"), "{stdout}");
    assert!(
        stdout.contains("send-time error (how late packets went): median"),
        "{stdout}"
    );
    let r = result(&stdout);
    assert_eq!(r["packets"], 500);
    assert_eq!(r["scheduled_ns"], 499 * 100_000, "the file's 100 us gaps");
    assert_eq!(r["send_error"]["packets"], 500);

    let (code, stdout, stderr) = replay(&[paced, capture, "--pps", "1000000", "--json", "-q"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result(&stdout)["scheduled_ns"], 499 * 1000);

    let (code, stdout, stderr) =
        replay(&[plain, capture, "--unpaced", "--loops", "3", "--json", "-q"]);
    assert_eq!(code, 0, "{stderr}");
    let r = result(&stdout);
    assert_eq!(
        (r["packets"].as_u64(), r["loops"].as_u64()),
        (Some(1500), Some(3))
    );
    assert!(r["send_error"].is_null());

    let (code, _, stderr) = replay(&[plain, capture]);
    assert_eq!(code, 1);
    assert!(stderr.contains("has no accurate_send"), "{stderr}");
    let (code, _, stderr) = replay(&[paced, paced]);
    assert_eq!(code, 1);
    assert!(stderr.contains("not a pcap or pcapng file"), "{stderr}");
    let (code, _, stderr) = replay(&[paced, capture, "--interface", "eth9"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("no interface named `eth9`"), "{stderr}");
}

/// On a socket queue the replay sends each frame's UDP payload as a datagram: a UDP
/// socket of the test receives every one, in order, byte for byte.
#[test]
fn a_socket_queue_replays_the_frames_payloads_as_datagrams() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    listener
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let cfg = dir.path().join("socket.yaml");
    std::fs::write(
        &cfg,
        format!(
            r#"
dataplane:
  cfg:
    version: 1
    stream_type: socket
    master_core: 0
    memory_regions:
    - {{name: tx, kind: host, affinity: 0, num_bufs: 1024, buf_size: 2048}}
    interfaces:
    - name: out
      address: 127.0.0.1
      socket_config: {{mode: client, remote_addr: "udp://127.0.0.1:{port}"}}
      tx:
        accurate_send: true
        queues: [{{name: tq, id: 0, cpu_core: 0, batch_size: 16, memory_regions: [tx]}}]
"#
        ),
    )
    .unwrap();
    let capture = dir.path().join("in.pcap");
    std::fs::write(&capture, pcap(200)).unwrap();
    let (code, stdout, stderr) = replay(&[
        cfg.to_str().unwrap(),
        capture.to_str().unwrap(),
        "--speed",
        "4",
        "--json",
        "-q",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result(&stdout)["packets"], 200);
    let mut buf = [0u8; 2048];
    for i in 0..200u32 {
        let n = listener.recv(&mut buf).expect("every datagram arrives");
        let want: Vec<u8> = (0..64 + i % 200).map(|k| (k ^ i) as u8).collect();
        assert!(buf[..n] == want[..], "datagram {i}");
    }
}
