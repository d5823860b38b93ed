//! Socket addresses in the C layouts the kernel reads and writes (`sockaddr_in`,
//! `sockaddr_in6`, `sockaddr_storage`), for the system calls std and rustix do not wrap.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Room for either address family: a `sockaddr_in6`, whose front holds a `sockaddr_in`
/// when the family is `AF_INET` (16 of its 28 bytes, same alignment).
pub(crate) type RawAddr = libc::sockaddr_in6;

/// An all-zero [`RawAddr`] (family 0: no address).
pub(crate) fn empty() -> RawAddr {
    // SAFETY: all-zero bytes are a valid sockaddr_in6.
    unsafe { std::mem::zeroed() }
}

fn v4(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

fn v6(a: SocketAddrV6) -> libc::sockaddr_in6 {
    libc::sockaddr_in6 {
        sin6_family: libc::AF_INET6 as libc::sa_family_t,
        sin6_port: a.port().to_be(),
        sin6_flowinfo: a.flowinfo(),
        sin6_addr: libc::in6_addr {
            s6_addr: a.ip().octets(),
        },
        sin6_scope_id: a.scope_id(),
    }
}

/// `a` as the kernel reads it, with the length to pass beside it.
pub(crate) fn encode(a: SocketAddr) -> (RawAddr, libc::socklen_t) {
    match a {
        SocketAddr::V4(a) => {
            let mut raw = empty();
            // SAFETY: a sockaddr_in (16 bytes, 4-byte aligned) fits the front of a
            // sockaddr_in6 (28 bytes, 4-byte aligned).
            unsafe { std::ptr::write((&mut raw as *mut RawAddr).cast(), v4(a)) };
            (raw, size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(a) => (v6(a), size_of::<libc::sockaddr_in6>() as libc::socklen_t),
    }
}

/// The address the kernel wrote into `raw`; `None` for another family.
pub(crate) fn decode(raw: &RawAddr) -> Option<SocketAddr> {
    match i32::from(raw.sin6_family) {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in at the front (family AF_INET); it fits
            // and is aligned, as in `encode`.
            let sin = unsafe { &*(raw as *const RawAddr).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => Some(SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(raw.sin6_addr.s6_addr),
            u16::from_be(raw.sin6_port),
            raw.sin6_flowinfo,
            raw.sin6_scope_id,
        ))),
        _ => None,
    }
}

/// `ip` (port 0) in a `sockaddr_storage`, as the protocol-independent multicast options
/// (`MCAST_JOIN_SOURCE_GROUP`) take it.
pub(crate) fn storage(ip: IpAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let (raw, _) = encode(SocketAddr::new(ip, 0));
    // SAFETY: a sockaddr_in6 fits the front of a sockaddr_storage (128 bytes, aligned for
    // every address type).
    unsafe { std::ptr::write((&mut s as *mut libc::sockaddr_storage).cast(), raw) };
    s
}

/// The IP address at `sa` (from `getifaddrs`); `None` for a null pointer or another family.
///
/// # Safety
/// `sa` is null or points at a valid socket address of the size its family implies.
pub(crate) unsafe fn ip_at(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: non-null and valid, by the caller's promise.
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).into())
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let sin6 = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            Some(Ipv6Addr::from(sin6.sin6_addr.s6_addr).into())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_of_both_families_come_back_as_they_went_in() {
        for a in [
            "192.0.2.7:5000".parse::<SocketAddr>().unwrap(),
            "[fd00:18::1]:6000".parse().unwrap(),
            "[::]:0".parse().unwrap(),
        ] {
            let (raw, len) = encode(a);
            assert_eq!(decode(&raw), Some(a));
            let want = if a.is_ipv4() { 16 } else { 28 };
            assert_eq!(len as usize, want);
        }
        assert_eq!(decode(&empty()), None);
    }
}
