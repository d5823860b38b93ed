//! Finds the system DPDK with pkg-config, compiles the shim with DPDK's own flags, and
//! generates bindings for a narrow set of functions and types.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=src/wrapper.h");
    println!("cargo:rerun-if-changed=src/shim.h");
    println!("cargo:rerun-if-changed=src/shim.c");
    let lib = pkg_config::Config::new()
        .atleast_version("22.11")
        .probe("libdpdk")
        .unwrap_or_else(|e| {
            panic!(
                "DPDK >= 22.11 not found with pkg-config ({e}); install it with: apt-get install dpdk libdpdk-dev libclang-dev pkg-config"
            )
        });
    // The version the bindings were generated against, for start-up messages.
    println!("cargo:rustc-env=DATAPLANE_DPDK_VERSION={}", lib.version);
    // libdpdk.pc also carries `-include rte_config.h -march=corei7`, which pkg-config's
    // include paths leave out; both the shim and bindgen need them.
    let out = Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .expect("run pkg-config");
    let cflags: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect();

    let mut shim = cc::Build::new();
    shim.file("src/shim.c")
        .include("src")
        .opt_level(3)
        .warnings(false);
    for p in &lib.include_paths {
        shim.include(p);
    }
    for f in &cflags {
        if !f.starts_with("-I") {
            shim.flag(f);
        }
    }
    shim.compile("dataplane_dpdk_shim");

    let mut builder = bindgen::Builder::default()
        .header("src/wrapper.h")
        .clang_arg("-Isrc")
        .clang_args(cflags.iter().map(|s| s.as_str()))
        .allowlist_function(
            "rte_eal_(init|cleanup|process_type)|rte_strerror|rte_socket_id|rte_thread_(register|unregister)\
             |rte_eth_(dev_configure|dev_info_get|dev_start|dev_stop|dev_close|dev_count_avail|dev_get_port_by_name|dev_socket_id|rx_queue_setup|tx_queue_setup|stats_get|stats_reset|promiscuous_enable|allmulticast_enable|tx_done_cleanup|dev_set_mtu|dev_adjust_nb_rx_tx_desc|dev_get_mtu|macaddr_get|link_get_nowait|find_next_owned_by|dev_is_valid_port|set_queue_rate_limit|read_clock)\
             |rte_pktmbuf_pool_create(_extbuf)?|rte_mempool_(free|avail_count|in_use_count|lookup)\
             |rte_flow_(validate|create|destroy|flush|isolate)\
             |rte_extmem_(register|unregister)|rte_dev_dma_(map|unmap)|rte_mem_virt2memseg_list|rte_malloc_get_socket_stats\
             |shim_.*",
        )
        .allowlist_type("rte_malloc_socket_stats|rte_eth_conf|rte_eth_dev_info|rte_eth_stats|rte_eth_rxconf|rte_eth_txconf|rte_flow_.*|rte_pktmbuf_extmem|rte_eth_rxseg.*|rte_ether_addr|rte_eth_link|shim_.*")
        .allowlist_var("shim_.*|RTE_ETH_.*|RTE_MBUF_DEFAULT_.*|RTE_PKTMBUF_HEADROOM|RTE_MAX_ETHPORTS|SOCKET_ID_ANY|RTE_ETHER_.*")
        .opaque_type("rte_arp_ipv4|rte_arp_hdr|rte_gtp_psc_.*|rte_l2tpv2_combined_msg_hdr")
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for p in &lib.include_paths {
        builder = builder.clang_arg(format!("-I{}", p.display()));
    }
    let bindings = builder.generate().expect("generate DPDK bindings");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    bindings
        .write_to_file(out_dir.join("bindings.rs"))
        .expect("write bindings");
}
