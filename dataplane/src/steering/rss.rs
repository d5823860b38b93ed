//! Toeplitz receive-side scaling hash over the IPv4/UDP 4-tuple, with the standard 40-byte
//! key that NICs and DPDK default to, and the redirection table that maps a hash to one of
//! a flow's queues.

/// The standard RSS key (Microsoft's verification key, also DPDK's and mlx5's default).
pub const STANDARD_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// Entries of the redirection table (as on ConnectX and most DPDK PMDs by default).
pub const RETA_SIZE: u32 = 128;

/// Bytes hashed at most: source and destination address, source and destination port.
const INPUT_BYTES: usize = 12;

/// Per input byte position and byte value, the 32-bit contribution to the hash. Toeplitz is
/// linear over XOR, so the hash is the XOR of one table entry per input byte.
static TABLE: [[u32; 256]; INPUT_BYTES] = build_table(&STANDARD_KEY);

/// The 32 key bits that start at bit `bit` of the key.
const fn key_window(key: &[u8; 40], bit: usize) -> u32 {
    let mut w = 0u32;
    let mut i = 0;
    while i < 32 {
        let b = bit + i;
        let set = (key[b / 8] >> (7 - (b % 8))) & 1;
        w = (w << 1) | set as u32;
        i += 1;
    }
    w
}

const fn build_table(key: &[u8; 40]) -> [[u32; 256]; INPUT_BYTES] {
    let mut t = [[0u32; 256]; INPUT_BYTES];
    let mut pos = 0;
    while pos < INPUT_BYTES {
        let mut v = 0;
        while v < 256 {
            let mut h = 0u32;
            let mut bit = 0;
            while bit < 8 {
                if (v >> (7 - bit)) & 1 == 1 {
                    h ^= key_window(key, pos * 8 + bit);
                }
                bit += 1;
            }
            t[pos][v] = h;
            v += 1;
        }
        pos += 1;
    }
    t
}

/// Hash of an input of at most 12 bytes, through the table.
#[inline]
fn hash_bytes(input: &[u8]) -> u32 {
    let mut h = 0;
    for (pos, &b) in input.iter().enumerate() {
        h ^= TABLE[pos][b as usize];
    }
    h
}

/// RSS hash of an IPv4/UDP 4-tuple (addresses and ports in host order).
#[inline]
pub fn hash_ipv4_udp(src: u32, dst: u32, sport: u16, dport: u16) -> u32 {
    let mut input = [0u8; 12];
    input[0..4].copy_from_slice(&src.to_be_bytes());
    input[4..8].copy_from_slice(&dst.to_be_bytes());
    input[8..10].copy_from_slice(&sport.to_be_bytes());
    input[10..12].copy_from_slice(&dport.to_be_bytes());
    hash_bytes(&input)
}

/// RSS hash of an IPv4 address pair (packets without a UDP header).
#[inline]
pub fn hash_ipv4(src: u32, dst: u32) -> u32 {
    let mut input = [0u8; 8];
    input[0..4].copy_from_slice(&src.to_be_bytes());
    input[4..8].copy_from_slice(&dst.to_be_bytes());
    hash_bytes(&input)
}

/// The redirection table's choice among `n` queues: entry `hash % 128`, filled round-robin.
#[inline]
pub fn reta_index(hash: u32, n: usize) -> usize {
    ((hash % RETA_SIZE) as usize) % n.max(1)
}

/// Bit-by-bit Toeplitz over any input with any 40-byte key: the textbook definition, kept
/// as the oracle for the table version.
pub fn toeplitz_reference(key: &[u8; 40], input: &[u8]) -> u32 {
    let mut result = 0u32;
    for (i, &byte) in input.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                result ^= key_window(key, i * 8 + bit);
            }
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(s: &str) -> u32 {
        u32::from(s.parse::<Ipv4Addr>().unwrap())
    }

    /// Microsoft's published RSS verification vectors (destination, source, IPv4 only,
    /// IPv4 with ports). The input order is source address, destination address, source
    /// port, destination port.
    const VECTORS: &[(&str, u16, &str, u16, u32, u32)] = &[
        (
            "161.142.100.80",
            1766,
            "66.9.149.187",
            2794,
            0x323e8fc2,
            0x51ccc178,
        ),
        (
            "65.69.140.83",
            4739,
            "199.92.111.2",
            14230,
            0xd718262a,
            0xc626b0ea,
        ),
        (
            "12.22.207.184",
            38024,
            "24.19.198.95",
            12898,
            0xd2d0a5de,
            0x5c2b394a,
        ),
        (
            "209.142.163.6",
            2217,
            "38.27.205.30",
            48228,
            0x82989176,
            0xafc7327f,
        ),
        (
            "202.188.127.2",
            1303,
            "153.39.163.191",
            44251,
            0x5d1809c5,
            0x10e828a2,
        ),
    ];

    #[test]
    fn published_verification_vectors() {
        for &(dst, dport, src, sport, ip_only, with_ports) in VECTORS {
            assert_eq!(hash_ipv4(ip(src), ip(dst)), ip_only, "{src} -> {dst}");
            assert_eq!(
                hash_ipv4_udp(ip(src), ip(dst), sport, dport),
                with_ports,
                "{src}:{sport} -> {dst}:{dport}"
            );
        }
    }

    #[test]
    fn table_agrees_with_the_bitwise_definition() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = x.to_be_bytes();
            let input = [
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[3], b[1], b[6], b[0],
            ];
            assert_eq!(
                hash_bytes(&input),
                toeplitz_reference(&STANDARD_KEY, &input)
            );
        }
    }

    #[test]
    fn redirection_spreads_over_all_queues() {
        let mut seen = [0u32; 3];
        for sport in 0..3000u16 {
            let h = hash_ipv4_udp(ip("10.0.0.1"), ip("10.0.0.2"), sport, 5000);
            seen[reta_index(h, 3)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 500), "{seen:?}");
    }
}
