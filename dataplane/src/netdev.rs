//! Kernel network interfaces' MTU, read and raised through `SIOCGIFMTU`/`SIOCSIFMTU` on a
//! datagram socket: for engines that send through a kernel interface (DPDK's af_packet),
//! whose frames the kernel drops above the interface's MTU.

use rustix::ioctl::{Ioctl, Updater, ioctl};
use rustix::net::{AddressFamily, SocketType, socket};

/// `struct ifreq` with its union used as `ifr_mtu` (40 bytes on Linux).
#[repr(C)]
struct InterfaceRequest {
    name: [u8; 16],
    mtu: i32,
    _rest: [u8; 20],
}

const SIOCGIFMTU: rustix::ioctl::Opcode = 0x8921;
const SIOCSIFMTU: rustix::ioctl::Opcode = 0x8922;

fn request(name: &str) -> std::io::Result<InterfaceRequest> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() > 15 || bytes.contains(&0) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("`{name}` is not a network interface name"),
        ));
    }
    let mut req = InterfaceRequest {
        name: [0; 16],
        mtu: 0,
        _rest: [0; 20],
    };
    req.name[..bytes.len()].copy_from_slice(bytes);
    Ok(req)
}

fn call<const OPCODE: rustix::ioctl::Opcode>(req: &mut InterfaceRequest) -> std::io::Result<()>
where
    for<'a> Updater<'a, OPCODE, InterfaceRequest>: Ioctl,
{
    let fd = socket(AddressFamily::INET, SocketType::DGRAM, None)?;
    // SAFETY: both opcodes take a `struct ifreq` the kernel reads (name) and writes (MTU);
    // `InterfaceRequest` has its layout and lives for the call.
    unsafe { ioctl(&fd, Updater::<OPCODE, InterfaceRequest>::new(req)) }?;
    Ok(())
}

/// The MTU of interface `name`.
pub fn mtu(name: &str) -> std::io::Result<u32> {
    let mut req = request(name)?;
    call::<SIOCGIFMTU>(&mut req)?;
    Ok(req.mtu.max(0) as u32)
}

/// Raises the MTU of interface `name` to `mtu` when it is lower; never lowers it (other
/// users of the interface may rely on it). Returns the MTU it had.
pub fn raise_mtu(name: &str, mtu: u32) -> std::io::Result<u32> {
    let had = self::mtu(name)?;
    if had < mtu {
        let mut req = request(name)?;
        req.mtu = i32::try_from(mtu).unwrap_or(i32::MAX);
        call::<SIOCSIFMTU>(&mut req)?;
    }
    Ok(had)
}

/// Multicast groups joined on a kernel interface through a socket of our own, for a port
/// the kernel does not receive for (DPDK's af_packet and af_xdp, or a NIC whose kernel
/// driver keeps its netdev beside DPDK, as mlx5 does): the kernel sends the IGMP reports
/// (IPv4) or MLD reports (IPv6) and admits the group addresses on the interface; dropping
/// it leaves the groups. The sockets are bound to ports of their own, so the groups'
/// datagrams are not queued to them.
#[derive(Debug)]
pub struct GroupMembership {
    sockets: Vec<std::net::UdpSocket>,
    interface: String,
}

impl GroupMembership {
    /// Leaves the groups, then waits until the interface has sent a packet per IP version
    /// joined (the kernel's leave reports) or `limit` passed, and 300 ms more for them to
    /// be delivered; false when the limit ran out. The reports leave from a kernel timer,
    /// which busy-polling threads on every core can hold back for hundreds of
    /// milliseconds, and an interface taken down first never sends them. Without a packet
    /// counter it waits 300 ms.
    pub fn leave(self, limit: std::time::Duration) -> bool {
        let sent = || tx_packets(&self.interface);
        let (before, want) = (sent(), self.sockets.len() as u64);
        drop(self.sockets);
        let Some(before) = before else {
            std::thread::sleep(std::time::Duration::from_millis(300));
            return true;
        };
        let start = std::time::Instant::now();
        while sent().is_some_and(|n| n < before + want) {
            if start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Counted is not yet delivered: the peer of a veth takes them in a softirq of
        // its own, which missed them when the interface went down at once.
        std::thread::sleep(std::time::Duration::from_millis(300));
        true
    }
}

/// Packets interface `name` has sent (its sysfs counter).
fn tx_packets(name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/sys/class/net/{name}/statistics/tx_packets"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Joins `groups` on interface `name` (any-source, or the one source of a
/// source-specific entry): IPv4 groups from an IPv4 socket (IGMPv3 reports), IPv6 groups
/// from an IPv6 one (MLDv2 reports).
pub fn join_groups(
    name: &str,
    groups: &[crate::config::MulticastGroup],
) -> std::io::Result<GroupMembership> {
    use rustix::net::sockopt;
    use std::net::{Ipv4Addr, Ipv6Addr};
    let mut sockets = Vec::new();
    for v4 in [true, false] {
        let family: Vec<_> = groups.iter().filter(|g| g.group.is_ipv4() == v4).collect();
        if family.is_empty() {
            continue;
        }
        let socket = if v4 {
            std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?
        } else {
            std::net::UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0))?
        };
        let index = rustix::net::netdevice::name_to_index(&socket, name)?;
        sockopt::set_socket_recv_buffer_size(&socket, 4096)?;
        for g in family {
            join_by_index(&socket, index, g, name)?;
        }
        sockets.push(socket);
    }
    Ok(GroupMembership {
        sockets,
        interface: name.to_owned(),
    })
}

/// Joins group `g` on the interface of index `index` (0: the one the kernel routes the
/// group to; `on` names it in errors) from `socket`, whose family is the group's:
/// any-source, or its one source.
pub(crate) fn join_by_index(
    socket: &std::net::UdpSocket,
    index: u32,
    g: &crate::config::MulticastGroup,
    on: &str,
) -> std::io::Result<()> {
    use rustix::net::sockopt;
    use std::net::{IpAddr, Ipv4Addr};
    let joined = match (g.group, g.source) {
        (IpAddr::V4(group), None) => sockopt::set_ip_add_membership_with_ifindex(
            socket,
            &group,
            &Ipv4Addr::UNSPECIFIED,
            index,
        )
        .map_err(std::io::Error::from),
        (IpAddr::V6(group), None) => {
            sockopt::set_ipv6_add_membership(socket, &group, index).map_err(std::io::Error::from)
        }
        (group, Some(source)) => join_source_group(socket, index, group, source),
    };
    joined.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "join {}{} on {on}: {e}",
                g.group,
                g.source.map(|s| format!(" from {s}")).unwrap_or_default()
            ),
        )
    })
}

/// MCAST_JOIN_SOURCE_GROUP: the source-specific join by interface index, for either IP
/// version (the address-based IP_ADD_SOURCE_MEMBERSHIP needs an IPv4 address on the
/// interface, which a DPDK port's netdev often lacks).
fn join_source_group(
    socket: &std::net::UdpSocket,
    index: u32,
    group: std::net::IpAddr,
    source: std::net::IpAddr,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let req = libc::group_source_req {
        gsr_interface: index,
        gsr_group: crate::sockaddr::storage(group),
        gsr_source: crate::sockaddr::storage(source),
    };
    let level = if group.is_ipv4() {
        libc::IPPROTO_IP
    } else {
        libc::IPPROTO_IPV6
    };
    // SAFETY: `req` lives across the call and its size is passed; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            libc::MCAST_JOIN_SOURCE_GROUP,
            (&req as *const libc::group_source_req).cast(),
            size_of::<libc::group_source_req>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The kernel interface of PCI device `address` (`0000:01:00.0`), when its driver has one
/// (mlx5 keeps it beside DPDK; a device bound to vfio-pci has none).
pub fn of_pci_device(address: &str) -> Option<String> {
    std::fs::read_dir(format!("/sys/bus/pci/devices/{address}/net"))
        .ok()?
        .filter_map(|e| e.ok())
        .find_map(|e| e.file_name().to_str().map(str::to_owned))
}

/// The kernel interface that has address `ip` (IPv4 or IPv6), if any.
pub fn with_address(ip: std::net::IpAddr) -> std::io::Result<Option<String>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut found = None;
    let mut at = list;
    while !at.is_null() {
        // SAFETY: a node of the list getifaddrs returned, alive until freeifaddrs.
        let node = unsafe { &*at };
        // SAFETY: the node's address is null or a valid address of its family.
        if unsafe { crate::sockaddr::ip_at(node.ifa_addr) } == Some(ip) {
            // SAFETY: the node's name is a NUL-terminated string.
            let name = unsafe { std::ffi::CStr::from_ptr(node.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
            break;
        }
        at = node.ifa_next;
    }
    // SAFETY: the list getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(list) };
    Ok(found)
}
