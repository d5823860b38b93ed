//! The system calls of the socket engine that std and rustix do not offer: sockets
//! configured before `bind` (SO_REUSEPORT, buffer sizes, SO_RXQ_OVFL, busy polling),
//! batched datagram I/O (`recvmmsg`, `sendmmsg` with UDP GSO) and the socket's drop counter
//! (SO_MEMINFO). Everything else uses std's socket types over the descriptors made here.
//!
//! The option numbers are Linux's generic ones, the same on x86_64 and aarch64.

use crate::sockaddr::{self, RawAddr};
use std::io::{self, IoSlice, IoSliceMut};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

const SO_RXQ_OVFL: libc::c_int = 40;
const SO_BUSY_POLL: libc::c_int = 46;
const SO_MEMINFO: libc::c_int = 55;
const SO_PREFER_BUSY_POLL: libc::c_int = 69;
const SO_BUSY_POLL_BUDGET: libc::c_int = 70;
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
/// IPV6_MULTICAST_ALL (Linux 4.20): like IP_MULTICAST_ALL, for IPv6 groups.
const IPV6_MULTICAST_ALL: libc::c_int = 29;
/// SO_TIMESTAMPNS (the "old" one: a `timespec` with the native `time_t`, 64-bit here).
const SO_TIMESTAMPNS: libc::c_int = 35;
/// `SK_MEMINFO_DROPS`: index of the drop counter in SO_MEMINFO's array.
const MEMINFO_DROPS: usize = 8;
const MEMINFO_FIELDS: usize = 9;

/// Datagrams per `recvmmsg`/`sendmmsg` call at most.
pub const MAX_MESSAGES: usize = 64;

/// Socket buffer sizes asked for and granted (the kernel doubles what it grants and caps
/// it at `net.core.rmem_max` / `wmem_max`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BufferSizes {
    /// Receive buffer the kernel gave, bytes.
    pub receive: usize,
    /// Send buffer the kernel gave, bytes.
    pub send: usize,
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `value` lives across the call and its size is passed; the kernel only reads it.
    check(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

fn get_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `value`, which is that large.
    check(unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(value)
}

/// A new non-blocking socket of `kind` (SOCK_DGRAM or SOCK_STREAM) for addresses of
/// `at`'s family.
fn socket(at: SocketAddr, kind: libc::c_int) -> io::Result<OwnedFd> {
    let family = if at.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain system call; on success the descriptor is new and ours.
    let fd =
        check(unsafe { libc::socket(family, kind | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn bind(fd: &OwnedFd, at: SocketAddr) -> io::Result<()> {
    let (sa, len) = sockaddr::encode(at);
    // SAFETY: `sa` holds a valid address of `len` bytes.
    check(unsafe { libc::bind(fd.as_raw_fd(), (&sa as *const RawAddr).cast(), len) }).map(drop)
}

/// Asks for `receive`/`send` bytes of socket buffer (0: leave the kernel's default) and
/// reads back what was granted.
fn size_buffers(fd: RawFd, receive: usize, send: usize) -> io::Result<BufferSizes> {
    let clamp = |n: usize| n.min(i32::MAX as usize / 2) as libc::c_int;
    // With CAP_NET_ADMIN the *FORCE options grant the size past net.core.rmem_max /
    // wmem_max; without, the plain ones get what those limits allow.
    for (asked, force, plain) in [
        (receive, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (send, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        if asked > 0 && set_int(fd, libc::SOL_SOCKET, force, clamp(asked)).is_err() {
            set_int(fd, libc::SOL_SOCKET, plain, clamp(asked))?;
        }
    }
    Ok(BufferSizes {
        receive: get_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)?.max(0) as usize,
        send: get_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF)?.max(0) as usize,
    })
}

/// A non-blocking UDP socket bound to `at` (SO_REUSEPORT when `shared`, so several
/// sockets share the address and the kernel spreads flows over them), with SO_RXQ_OVFL
/// on and the buffers sized; connected to `peer` when given.
pub fn udp_socket(
    at: SocketAddr,
    shared: bool,
    peer: Option<SocketAddr>,
    receive_buffer: usize,
    send_buffer: usize,
) -> io::Result<(UdpSocket, BufferSizes)> {
    let fd = socket(at, libc::SOCK_DGRAM)?;
    let raw = fd.as_raw_fd();

    if shared {
        set_int(raw, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    }
    set_int(raw, libc::SOL_SOCKET, SO_RXQ_OVFL, 1)?;
    let sizes = size_buffers(raw, receive_buffer, send_buffer)?;
    bind(&fd, at)?;
    let socket = UdpSocket::from(fd);
    if let Some(p) = peer {
        socket.connect(p)?;
    }
    Ok((socket, sizes))
}

/// Joins `groups` on the interface whose address is `interface` (unspecified: the one the
/// kernel routes each group to): any-source or source-specific memberships, the kernel
/// sending the IGMP (IPv4) or MLD (IPv6) reports. The socket, of the groups' family, then
/// takes datagrams of its own groups only (IP_MULTICAST_ALL / IPV6_MULTICAST_ALL off), not
/// those other sockets of the host joined.
pub fn join_groups(
    socket: &UdpSocket,
    groups: &[crate::config::MulticastGroup],
    interface: IpAddr,
) -> io::Result<()> {
    use rustix::net::sockopt;
    let fd = socket.as_raw_fd();
    let on = if interface.is_unspecified() {
        "the routed interface".to_owned()
    } else {
        interface.to_string()
    };
    match interface {
        IpAddr::V4(interface) => {
            set_int(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_ALL, 0)?;
            for g in groups {
                // Validation gives the socket groups of its own family.
                let Some((group, source)) = g.ipv4() else {
                    return Err(io::Error::new(
                        io::ErrorKind::Unsupported,
                        format!("IPv6 group {} on an IPv4 socket", g.group),
                    ));
                };
                match source {
                    None => sockopt::set_ip_add_membership(socket, &group, &interface),
                    Some(source) => {
                        sockopt::set_ip_add_source_membership(socket, &group, &interface, &source)
                    }
                }
                .map_err(|e| {
                    io::Error::new(
                        io::Error::from(e).kind(),
                        format!(
                            "join {}{} on {on}: {e}",
                            g.group,
                            g.source.map(|s| format!(" from {s}")).unwrap_or_default()
                        ),
                    )
                })?;
            }
        }
        IpAddr::V6(_) => {
            // Older kernels lack the option; they then deliver every joined group.
            let _ = set_int(fd, libc::IPPROTO_IPV6, IPV6_MULTICAST_ALL, 0);
            let index = interface_index(socket, interface)?;
            for g in groups {
                if g.group.is_ipv4() {
                    return Err(io::Error::new(
                        io::ErrorKind::Unsupported,
                        format!("IPv4 group {} on an IPv6 socket", g.group),
                    ));
                }
                crate::netdev::join_by_index(socket, index, g, &on)?;
            }
        }
    }
    Ok(())
}

/// The index of the kernel interface that has address `ip` (0 when `ip` is unspecified:
/// the kernel chooses by route).
fn interface_index(socket: &UdpSocket, ip: IpAddr) -> io::Result<u32> {
    if ip.is_unspecified() {
        return Ok(0);
    }
    let name = crate::netdev::with_address(ip)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("no kernel interface has address {ip}"),
        )
    })?;
    Ok(rustix::net::netdevice::name_to_index(socket, &name)?)
}

/// Sends multicast out of the interface whose address is `interface`.
pub fn multicast_from(socket: &UdpSocket, interface: IpAddr) -> io::Result<()> {
    match interface {
        IpAddr::V4(a) => rustix::net::sockopt::set_ip_multicast_if(socket, &a)?,
        IpAddr::V6(_) => {
            let index = interface_index(socket, interface)?;
            rustix::net::sockopt::set_ipv6_multicast_if(socket, index)?;
        }
    }
    Ok(())
}

/// A non-blocking TCP listener on `at` (SO_REUSEADDR, so a restarted server binds again
/// at once).
pub fn tcp_listener(at: SocketAddr, backlog: i32) -> io::Result<TcpListener> {
    let fd = socket(at, libc::SOCK_STREAM)?;
    set_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    bind(&fd, at)?;
    // SAFETY: plain system call on our descriptor.
    check(unsafe { libc::listen(fd.as_raw_fd(), backlog) })?;
    Ok(TcpListener::from(fd))
}

/// Connects to `peer` from `local` (port 0: any), waiting at most `timeout`; the stream
/// is left non-blocking.
pub fn tcp_connect(
    local: SocketAddr,
    peer: SocketAddr,
    timeout: Duration,
    buffers: (usize, usize),
) -> io::Result<TcpStream> {
    let fd = socket(peer, libc::SOCK_STREAM)?;
    set_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    size_buffers(fd.as_raw_fd(), buffers.0, buffers.1)?;
    bind(&fd, local)?;
    let (sa, len) = sockaddr::encode(peer);
    // SAFETY: `sa` holds a valid address of `len` bytes.
    let ret = unsafe { libc::connect(fd.as_raw_fd(), (&sa as *const RawAddr).cast(), len) };
    if ret < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd.
        let ready = check(unsafe { libc::poll(&mut pfd, 1, ms) })?;
        if ready == 0 {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no answer within {timeout:?}"),
            ));
        }
        let err = get_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_ERROR)?;
        if err != 0 {
            return Err(io::Error::from_raw_os_error(err));
        }
    }
    Ok(TcpStream::from(fd))
}

/// Sizes a connected or accepted TCP stream's buffers.
pub fn size_stream_buffers(s: &TcpStream, receive: usize, send: usize) -> io::Result<BufferSizes> {
    size_buffers(s.as_raw_fd(), receive, send)
}

/// Turns on busy polling of the device queue for `micros` per blocking receive
/// (SO_BUSY_POLL) and, where the kernel has them, SO_PREFER_BUSY_POLL and a budget.
/// Returns what the kernel refused.
pub fn busy_poll(fd: &impl AsRawFd, micros: u32, budget: u32) -> Vec<String> {
    let fd = fd.as_raw_fd();
    let mut refused = Vec::new();
    let tries = [
        ("SO_BUSY_POLL", SO_BUSY_POLL, micros as libc::c_int),
        ("SO_PREFER_BUSY_POLL", SO_PREFER_BUSY_POLL, 1),
        (
            "SO_BUSY_POLL_BUDGET",
            SO_BUSY_POLL_BUDGET,
            budget as libc::c_int,
        ),
    ];
    for (name, opt, value) in tries {
        if let Err(e) = set_int(fd, libc::SOL_SOCKET, opt, value) {
            refused.push(format!("{name}: {e}"));
        }
    }
    refused
}

/// Asks the kernel to hand over runs of equal-sized datagrams of one flow as one
/// coalesced read (UDP GRO; [`Received::segment`] then says the datagram size).
pub fn udp_gro(socket: &UdpSocket) -> io::Result<()> {
    set_int(socket.as_raw_fd(), libc::SOL_UDP, UDP_GRO, 1)
}

/// Asks the kernel to stamp every datagram with its receive time (SO_TIMESTAMPNS; read
/// back as [`Received::timestamp_ns`]).
pub fn rx_timestamps(socket: &UdpSocket) -> io::Result<()> {
    set_int(socket.as_raw_fd(), libc::SOL_SOCKET, SO_TIMESTAMPNS, 1)
}

/// Packets the kernel dropped on this socket because its receive buffer was full
/// (`sk_drops`, from SO_MEMINFO).
pub fn socket_drops(fd: &impl AsRawFd) -> io::Result<u32> {
    let mut info = [0u32; MEMINFO_FIELDS];
    let mut len = size_of_val(&info) as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`, which is that large.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    Ok(info[MEMINFO_DROPS])
}

/// One received read: a datagram, or with UDP GRO several of one size back to back.
#[derive(Clone, Copy, Debug)]
pub struct Received {
    /// Bytes placed in its buffers.
    pub len: usize,
    /// It was longer than its buffers (the rest is lost).
    pub truncated: bool,
    /// Its sender.
    pub from: SocketAddr,
    /// UDP GRO: the read holds datagrams of this size (the last may be shorter).
    pub segment: Option<usize>,
    /// The kernel's receive time (ns since the Unix epoch) with SO_TIMESTAMPNS on, else 0.
    pub timestamp_ns: u64,
}

/// Control space per message: SO_RXQ_OVFL's `u32`, UDP_GRO's `int` and SO_TIMESTAMPNS's
/// `timespec`, with headers.
const RX_CONTROL: usize = 128;

/// Receives up to [`MAX_MESSAGES`] reads without blocking; read `i` goes into
/// `buffers[i * per_read..(i + 1) * per_read]` (filled in order). Returns what arrived
/// (into `out`, from index 0) and the socket's drop counter as the last read carried it
/// (SO_RXQ_OVFL), if it did.
pub fn receive_datagrams(
    socket: &UdpSocket,
    buffers: &mut [IoSliceMut<'_>],
    per_read: usize,
    out: &mut Vec<Received>,
) -> io::Result<Option<u32>> {
    out.clear();
    let per_read = per_read.max(1);
    let n = buffers.len().div_ceil(per_read).min(MAX_MESSAGES);
    if n == 0 {
        return Ok(None);
    }
    let mut names = [sockaddr::empty(); MAX_MESSAGES];
    let mut control = [[0u64; RX_CONTROL / 8]; MAX_MESSAGES];
    // SAFETY: as above.
    let mut headers: [libc::mmsghdr; MAX_MESSAGES] = unsafe { std::mem::zeroed() };
    for i in 0..n {
        let h = &mut headers[i].msg_hdr;
        h.msg_name = (&mut names[i] as *mut RawAddr).cast();
        h.msg_namelen = size_of::<RawAddr>() as libc::socklen_t;
        // IoSliceMut is guaranteed to be ABI-compatible with iovec on Unix.
        let first = i * per_read;
        let count = per_read.min(buffers.len() - first);
        h.msg_iov = (&mut buffers[first] as *mut IoSliceMut<'_>).cast();
        h.msg_iovlen = count as _;
        h.msg_control = control[i].as_mut_ptr().cast();
        h.msg_controllen = RX_CONTROL as _;
    }
    // SAFETY: every header points at live storage of this frame (name, one iovec over a
    // buffer the caller lends mutably for the call, control space) with its size; the
    // kernel writes only within those sizes.
    let got = unsafe {
        libc::recvmmsg(
            socket.as_raw_fd(),
            headers.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if got < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    let got = got as usize;
    let mut drops = None;
    for i in 0..got {
        let h = &headers[i].msg_hdr;
        let mut segment = None;
        let mut timestamp_ns = 0;
        // SAFETY: `h` is a header the kernel filled; the CMSG macros stay within
        // msg_control..msg_control+msg_controllen, which is this frame's control array.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                let data = libc::CMSG_DATA(c);
                match ((*c).cmsg_level, (*c).cmsg_type) {
                    (libc::SOL_SOCKET, SO_RXQ_OVFL) => {
                        drops = Some(std::ptr::read_unaligned(data.cast::<u32>()));
                    }
                    (libc::SOL_SOCKET, SO_TIMESTAMPNS) => {
                        let t = std::ptr::read_unaligned(data.cast::<libc::timespec>());
                        timestamp_ns = (t.tv_sec as u64) * 1_000_000_000 + t.tv_nsec as u64;
                    }
                    (libc::SOL_UDP, UDP_GRO) => {
                        let g = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                        segment = (g > 0).then_some(g as usize);
                    }
                    _ => {}
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
        out.push(Received {
            len: headers[i].msg_len as usize,
            truncated: h.msg_flags & libc::MSG_TRUNC != 0,
            // An unnamed sender (no family) cannot be told apart; it reads as 0.0.0.0:0.
            from: sockaddr::decode(&names[i]).unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))),
            segment,
            timestamp_ns,
        });
    }
    Ok(drops)
}

/// One datagram to send (or, with `segment` set, several of `segment` bytes each that the
/// kernel cuts from the concatenated slices: UDP GSO).
pub struct Outgoing<'a> {
    /// The bytes, possibly spread over several slices.
    pub slices: &'a [IoSlice<'a>],
    /// GSO segment size; `None` for one datagram.
    pub segment: Option<u16>,
}

/// Sends `messages` (at most [`MAX_MESSAGES`]) without blocking, to `to` or to the
/// connected peer. Returns how many messages the kernel took (0 when its buffer is full).
pub fn send_datagrams(
    socket: &UdpSocket,
    messages: &[Outgoing<'_>],
    to: Option<SocketAddr>,
) -> io::Result<usize> {
    let n = messages.len().min(MAX_MESSAGES);
    if n == 0 {
        return Ok(0);
    }
    let mut name = to.map(sockaddr::encode);
    let mut control = [[0u64; RX_CONTROL / 8]; MAX_MESSAGES];
    // SAFETY: all-zero is a valid mmsghdr.
    let mut headers: [libc::mmsghdr; MAX_MESSAGES] = unsafe { std::mem::zeroed() };
    for i in 0..n {
        let m = &messages[i];
        let h = &mut headers[i].msg_hdr;
        if let Some((sa, len)) = &mut name {
            h.msg_name = (sa as *mut RawAddr).cast();
            h.msg_namelen = *len;
        }
        // IoSlice is ABI-compatible with iovec; the kernel only reads through it.
        h.msg_iov = m.slices.as_ptr() as *mut libc::iovec;
        h.msg_iovlen = m.slices.len() as _;
        if let Some(seg) = m.segment {
            h.msg_control = control[i].as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE is a pure size computation.
            let space = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
            h.msg_controllen = space as _;
            // SAFETY: the control array of this message is RX_CONTROL >= `space` bytes
            // and aligned for cmsghdr (u64 array); the macros stay inside it.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(h);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
            }
        }
    }
    // SAFETY: every header points at storage that lives across the call (the caller's
    // slices, this frame's name and control arrays) with its size; the kernel reads them.
    let sent = unsafe {
        libc::sendmmsg(
            socket.as_raw_fd(),
            headers.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    if sent < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ if e.raw_os_error() == Some(libc::ENOBUFS) => Ok(0),
            _ => Err(e),
        };
    }
    Ok(sent as usize)
}
