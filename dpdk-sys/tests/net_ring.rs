//! The bindings against the real DPDK: EAL without hugepages, a `net_ring` port looping TX
//! to RX, frames in and out through the shim, then teardown.

use dpdk_sys::*;
use std::ffi::CString;

fn errno_text() -> String {
    // SAFETY: rte_strerror returns a static or thread-local string for any errno.
    unsafe {
        std::ffi::CStr::from_ptr(rte_strerror(shim_rte_errno()))
            .to_string_lossy()
            .into_owned()
    }
}

#[test]
fn net_ring_port_loops_frames_back() {
    let prefix = format!("--file-prefix=dpdksys_test_{}", std::process::id());
    let args: Vec<CString> = [
        "dpdk-sys-test",
        prefix.as_str(),
        "-l",
        "0",
        "--no-huge",
        "-m",
        "128",
        "--no-pci",
        "--no-shconf",
        "--vdev=net_ring0",
        "--log-level=lib.eal:error",
    ]
    .iter()
    .map(|s| CString::new(*s).unwrap())
    .collect();
    let mut argv: Vec<*mut std::os::raw::c_char> =
        args.iter().map(|a| a.as_ptr() as *mut _).collect();
    // SAFETY: argv holds valid C strings that outlive the call; EAL is initialised once.
    let ret = unsafe { rte_eal_init(argv.len() as i32, argv.as_mut_ptr()) };
    assert!(ret >= 0, "rte_eal_init: {}", errno_text());

    let mut port = 0u16;
    let name = CString::new("net_ring0").unwrap();
    // SAFETY: valid name and out pointer.
    let found = unsafe { rte_eth_dev_get_port_by_name(name.as_ptr(), &mut port) };
    assert_eq!(found, 0);

    let pool_name = CString::new("test_pool").unwrap();
    // SAFETY: valid arguments; the pool lives until rte_eal_cleanup.
    let pool = unsafe {
        rte_pktmbuf_pool_create(
            pool_name.as_ptr(),
            4095,
            256,
            0,
            RTE_MBUF_DEFAULT_BUF_SIZE as u16,
            rte_socket_id() as i32,
        )
    };
    assert!(!pool.is_null(), "pool: {}", errno_text());

    let conf = rte_eth_conf::default();
    // SAFETY: a stopped port, default configuration, queues set up before start.
    unsafe {
        assert_eq!(rte_eth_dev_configure(port, 1, 1, &conf), 0);
        assert_eq!(
            rte_eth_rx_queue_setup(port, 0, 512, 0, std::ptr::null(), pool),
            0
        );
        assert_eq!(rte_eth_tx_queue_setup(port, 0, 512, 0, std::ptr::null()), 0);
        assert_eq!(rte_eth_dev_start(port), 0);
    }

    const N: usize = 32;
    let mut tx = [std::ptr::null_mut::<rte_mbuf>(); N];
    // SAFETY: the pool is valid and tx has room for N pointers.
    let allocated = unsafe { shim_rte_pktmbuf_alloc_bulk(pool, tx.as_mut_ptr(), N as u32) };
    assert_eq!(allocated, 0);
    for (i, &m) in tx.iter().enumerate() {
        // SAFETY: a freshly allocated mbuf with at least 64 bytes of room.
        unsafe {
            let data = shim_rte_pktmbuf_data(m) as *mut u8;
            std::ptr::write_bytes(data, i as u8, 60);
            shim_rte_pktmbuf_set_len(m, 60);
        }
    }
    // SAFETY: the port is started; the PMD takes ownership of sent mbufs.
    let sent = unsafe { shim_rte_eth_tx_burst(port, 0, tx.as_mut_ptr(), N as u16) };
    assert_eq!(sent as usize, N);

    let mut rx = [std::ptr::null_mut::<rte_mbuf>(); N];
    let mut got = 0usize;
    for _ in 0..1000 {
        // SAFETY: rx has room for the rest.
        got += unsafe { shim_rte_eth_rx_burst(port, 0, rx[got..].as_mut_ptr(), (N - got) as u16) }
            as usize;
        if got == N {
            break;
        }
    }
    assert_eq!(got, N);
    for (i, &m) in rx.iter().enumerate() {
        // SAFETY: received mbufs are ours until freed.
        unsafe {
            assert_eq!(shim_rte_pktmbuf_data_len(m), 60);
            let d = std::slice::from_raw_parts(shim_rte_pktmbuf_data(m) as *const u8, 60);
            assert!(
                d.iter().all(|&b| b == i as u8),
                "frame {i} arrived intact and in order"
            );
        }
    }
    // SAFETY: every mbuf is freed once; then the port and EAL go down in order.
    unsafe {
        shim_rte_pktmbuf_free_bulk(rx.as_mut_ptr(), N as u32);
        assert_eq!(rte_mempool_in_use_count(pool), 0);
        assert_eq!(rte_eth_dev_stop(port), 0);
        assert_eq!(rte_eth_dev_close(port), 0);
        assert_eq!(rte_eal_cleanup(), 0);
    }
    // EAL leaves its runtime directory behind.
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/dpdksys_test_{}", std::process::id()));
}
