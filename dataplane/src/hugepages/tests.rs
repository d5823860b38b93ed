use super::*;
use std::collections::BTreeMap;

#[test]
fn mountinfo_lines_give_hugetlbfs_mounts_and_page_sizes() {
    let text = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
42 27 0:39 / /tmp/hp\\040one rw,relatime - hugetlbfs none rw,pagesize=2M
43 27 0:40 / /mnt/huge rw,relatime shared:5 - hugetlbfs nodev rw,pagesize=1024M
44 27 0:41 / /dev/hugepages rw,relatime - hugetlbfs hugetlbfs rw
";
    let m = parse_mountinfo(text, 2 << 20);
    assert_eq!(
        m,
        vec![
            Mount {
                path: "/tmp/hp one".into(),
                page_size: 2 << 20
            },
            Mount {
                path: "/mnt/huge".into(),
                page_size: 1 << 30
            },
            Mount {
                path: "/dev/hugepages".into(),
                page_size: 2 << 20
            },
        ]
    );
}

#[test]
fn names_that_cleanup_considers() {
    for n in ["dataplane_12_abcdefmap_0", "dataplane_4194304_xmap_3"] {
        assert!(is_candidate_name(n), "{n}");
    }
    // Other programs' files (DPDK's own prefix, any `map_`), and our prefix without a
    // process id, are never ours to remove.
    for n in [
        "notes.txt",
        "rtemap_3",
        "dpdkmap_17",
        "xmap_1",
        "dataplane_x_map_0",
        "dataplane_-1_map_0",
        "dataplane_0_map_0",
    ] {
        assert!(!is_candidate_name(n), "{n}");
    }
}

fn counts(total: u64, free: u64, node_free: Option<u64>) -> Vec<PageCounts> {
    let mut v = vec![PageCounts {
        page_size: 2 << 20,
        node: None,
        total,
        free,
        reserved: 0,
    }];
    if let Some(f) = node_free {
        v.push(PageCounts {
            page_size: 2 << 20,
            node: Some(0),
            total,
            free: f,
            reserved: 0,
        });
    }
    v
}

#[test]
fn preflight_states_numbers_and_commands() {
    let mut per_node = BTreeMap::new();
    per_node.insert(0, (35, vec![("rx".to_owned(), 34), ("tx".to_owned(), 1)]));
    let need = Need {
        page_size: 2 << 20,
        per_node,
    };
    assert!(check(&need, &counts(64, 40, Some(40)), true).is_ok());
    let e = check(&need, &counts(0, 0, Some(0)), false).unwrap_err().0;
    assert!(
        e.contains("node 0: need 35 pages (70 MiB) for regions [rx 34, tx 1]; 0 free of 0"),
        "{e}"
    );
    assert!(
        e.contains("echo 35 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"),
        "{e}"
    );
    assert!(
        e.contains("mount -t hugetlbfs -o pagesize=2M nodev /dev/hugepages"),
        "{e}"
    );
    assert!(e.contains("nothing was allocated"), "{e}");
    let e = check(&need, &counts(40, 30, None), true).unwrap_err().0;
    assert!(e.contains("echo 45 >"), "{e}");
    assert!(!e.contains("mount -t"), "{e}");
}

#[test]
fn dead_runtime_directories_of_our_prefix_are_recognised() {
    assert_eq!(pid_of_prefix("dataplane_1234_abcdef"), Some(1234));
    assert_eq!(pid_of_prefix("rte"), None);
    assert!(process_alive(std::process::id() as i32));
    assert!(!process_alive(i32::MAX - 7));
}

#[test]
fn sizes() {
    assert_eq!(parse_size("2M"), Some(2 << 20));
    assert_eq!(parse_size("1G"), Some(1 << 30));
    assert_eq!(parse_size("2048k"), Some(2 << 20));
    assert_eq!(size_of_dir("hugepages-1048576kB"), Some(1 << 30));
}
