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
