//! RDMA for the data plane. Parts that need no RDMA device to be tested: reading a
//! device's GID table from sysfs and choosing the RoCE v2 GID that carries an interface's
//! IPv4 address (a wrong GID index is the most common RoCE connection failure), connection
//! management as state machines without I/O ([`cm`]), and the per-connection worker table
//! with its stop-then-join order ([`workers`]). [`verbs`] runs RC connections over real
//! verbs and rdma_cm (sideway, which loads rdma-core at run time).

pub mod cm;
pub mod verbs;
pub mod workers;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// One entry of a port's GID table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// RDMA device name, e.g. `mlx5_0` or `rxe0`.
    pub device: String,
    /// Port number of the device (1-based, as verbs count them).
    pub port: u8,
    /// Index in the port's GID table.
    pub index: u16,
    /// The 16-byte GID.
    pub gid: [u8; 16],
    /// `RoCE v2`, `IB/RoCE v1`, ...
    pub kind: String,
    /// Network device the GID belongs to.
    pub netdev: Option<String>,
}

impl GidEntry {
    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        let g = &self.gid;
        (g[..10].iter().all(|b| *b == 0) && g[10] == 0xff && g[11] == 0xff)
            .then(|| Ipv4Addr::new(g[12], g[13], g[14], g[15]))
    }

    /// True for a RoCE v2 (routable, UDP-encapsulated) GID.
    pub fn is_roce_v2(&self) -> bool {
        self.kind.eq_ignore_ascii_case("roce v2")
    }
}

/// Errors reading the GID tables.
#[derive(Debug, thiserror::Error)]
pub enum RdmaError {
    /// No RDMA devices under the sysfs root.
    #[error("no RDMA devices found under {0}")]
    NoDevices(PathBuf),
    /// No RoCE v2 GID carries the address.
    #[error("no RoCE v2 GID carries {addr} (GIDs with IPv4 addresses: {seen})")]
    NoGidForAddress {
        /// The address looked for.
        addr: Ipv4Addr,
        /// What was found instead.
        seen: String,
    },
    /// sysfs could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned())
}

fn parse_gid(text: &str) -> Option<[u8; 16]> {
    let hex: String = text.chars().filter(|c| *c != ':').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Reads every non-zero GID of every port under `root` (normally `/sys/class/infiniband`).
pub fn gid_table(root: &Path) -> Result<Vec<GidEntry>, RdmaError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| RdmaError::Io { path, source }
    };
    let mut out = Vec::new();
    let mut devices: Vec<_> = std::fs::read_dir(root)
        .map_err(io(root))?
        .filter_map(|e| e.ok())
        .collect();
    devices.sort_by_key(|e| e.file_name());
    for dev in devices {
        let device = dev.file_name().to_string_lossy().into_owned();
        let ports_dir = dev.path().join("ports");
        let Ok(ports) = std::fs::read_dir(&ports_dir) else {
            continue;
        };
        for port in ports.filter_map(|e| e.ok()) {
            let Ok(port_num) = port.file_name().to_string_lossy().parse::<u8>() else {
                continue;
            };
            let Ok(gids) = std::fs::read_dir(port.path().join("gids")) else {
                continue;
            };
            for g in gids.filter_map(|e| e.ok()) {
                let Ok(index) = g.file_name().to_string_lossy().parse::<u16>() else {
                    continue;
                };
                let Some(gid) = read_trim(&g.path()).and_then(|t| parse_gid(&t)) else {
                    continue;
                };
                if gid.iter().all(|b| *b == 0) {
                    continue;
                }
                let attrs = port.path().join("gid_attrs");
                let kind =
                    read_trim(&attrs.join("types").join(index.to_string())).unwrap_or_default();
                let netdev = read_trim(&attrs.join("ndevs").join(index.to_string()));
                out.push(GidEntry {
                    device: device.clone(),
                    port: port_num,
                    index,
                    gid,
                    kind,
                    netdev,
                });
            }
        }
    }
    if out.is_empty() {
        return Err(RdmaError::NoDevices(root.to_owned()));
    }
    out.sort_by_key(|e| (e.device.clone(), e.port, e.index));
    Ok(out)
}

/// The RoCE v2 GID whose IPv4-mapped address is `addr`.
pub fn roce_v2_gid_for(table: &[GidEntry], addr: Ipv4Addr) -> Result<&GidEntry, RdmaError> {
    table
        .iter()
        .find(|e| e.is_roce_v2() && e.ipv4() == Some(addr))
        .ok_or_else(|| RdmaError::NoGidForAddress {
            addr,
            seen: table
                .iter()
                .filter_map(|e| {
                    e.ipv4()
                        .map(|a| format!("{}:{} #{} {a} ({})", e.device, e.port, e.index, e.kind))
                })
                .collect::<Vec<_>>()
                .join(", "),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a sysfs-shaped tree (no RDMA device exists on CI machines; the layout is the
    /// kernel's documented one).
    fn fake_sysfs(entries: &[(&str, u8, u16, &str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (dev, port, idx, gid, kind) in entries {
            let p = dir.path().join(dev).join("ports").join(port.to_string());
            std::fs::create_dir_all(p.join("gids")).unwrap();
            std::fs::create_dir_all(p.join("gid_attrs/types")).unwrap();
            std::fs::write(p.join("gids").join(idx.to_string()), format!("{gid}\n")).unwrap();
            std::fs::write(
                p.join("gid_attrs/types").join(idx.to_string()),
                format!("{kind}\n"),
            )
            .unwrap();
        }
        dir
    }

    #[test]
    fn picks_the_roce_v2_gid_of_the_address_not_index_zero() {
        let t = fake_sysfs(&[
            (
                "mlx5_0",
                1,
                0,
                "fe80:0000:0000:0000:0200:00ff:fe00:0001",
                "IB/RoCE v1",
            ),
            (
                "mlx5_0",
                1,
                1,
                "fe80:0000:0000:0000:0200:00ff:fe00:0001",
                "RoCE v2",
            ),
            (
                "mlx5_0",
                1,
                2,
                "0000:0000:0000:0000:0000:ffff:0a64:0101",
                "IB/RoCE v1",
            ),
            (
                "mlx5_0",
                1,
                3,
                "0000:0000:0000:0000:0000:ffff:0a64:0101",
                "RoCE v2",
            ),
            (
                "mlx5_1",
                1,
                3,
                "0000:0000:0000:0000:0000:ffff:0a64:0301",
                "RoCE v2",
            ),
            (
                "mlx5_1",
                1,
                4,
                "0000:0000:0000:0000:0000:0000:0000:0000",
                "RoCE v2",
            ),
        ]);
        let table = gid_table(t.path()).unwrap();
        assert_eq!(table.len(), 5, "the all-zero GID is skipped");
        let e = roce_v2_gid_for(&table, Ipv4Addr::new(10, 100, 1, 1)).unwrap();
        assert_eq!((e.device.as_str(), e.port, e.index), ("mlx5_0", 1, 3));
        let e = roce_v2_gid_for(&table, Ipv4Addr::new(10, 100, 3, 1)).unwrap();
        assert_eq!((e.device.as_str(), e.index), ("mlx5_1", 3));
        let err = roce_v2_gid_for(&table, Ipv4Addr::new(10, 9, 9, 9))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no RoCE v2 GID carries 10.9.9.9")
                && err.contains("mlx5_0:1 #3 10.100.1.1"),
            "{err}"
        );
    }

    #[test]
    fn empty_sysfs_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        assert!(matches!(gid_table(t.path()), Err(RdmaError::NoDevices(_))));
    }
}
