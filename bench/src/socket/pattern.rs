//! What the socket bench's messages carry: a 64 KiB base pattern XOR a key per UDP message
//! (stream, sequence) or per 64 KiB block of a TCP stream, so filling and checking cost a
//! load and an XOR per word, and every message differs.

use super::*;

/// Words of the base pattern (64 KiB, more than the largest UDP payload).
pub(super) const BASE_WORDS: usize = 8192;

/// The base pattern: pseudo-random words, made once. A message's word `i` is
/// `base[i] ^ key`, with a key per message (UDP) or per 64 KiB block of the stream (TCP):
/// every message differs, and filling or checking costs a load and an XOR per word.
pub(super) fn base() -> &'static [u64; BASE_WORDS] {
    static BASE: std::sync::OnceLock<Box<[u64; BASE_WORDS]>> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut b = Box::new([0u64; BASE_WORDS]);
        for w in b.iter_mut() {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            *w = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
        b
    })
}

/// A key spread over all 64 bits.
#[inline]
pub(super) fn mix(k: u64) -> u64 {
    let k = (k ^ (k >> 31)).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    k ^ (k >> 29) ^ 0xA5A5_5A5A_0F0F_F0F0
}

pub(super) fn message_key(stream: u32, seq: u64) -> u64 {
    mix(seq ^ (u64::from(stream) << 48))
}

/// Writes `base[first + i] ^ key` as word `i` of `dst` (whole words only).
#[inline]
pub(super) fn fill_words(dst: &mut [u8], first: usize, key: u64) {
    for (w, b) in dst.chunks_exact_mut(8).zip(&base()[first..]) {
        w.copy_from_slice(&(b ^ key).to_le_bytes());
    }
}

/// True when the whole words of `src` are `base[first + i] ^ key`.
#[inline]
pub(super) fn words_match(src: &[u8], first: usize, key: u64) -> bool {
    let mut diff = 0u64;
    for (w, b) in src.chunks_exact(8).zip(&base()[first..]) {
        diff |= u64::from_le_bytes(w.try_into().expect("8 bytes")) ^ b ^ key;
    }
    diff == 0
}

/// Word `i` of a UDP message body with `key`.
#[inline]
pub(super) fn body_word(key: u64, i: usize) -> u64 {
    base()[i % BASE_WORDS] ^ key
}

pub(super) fn fill_udp(buf: &mut [u8], stream: u32, seq: u64, kind: u32) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..12].copy_from_slice(&stream.to_le_bytes());
    buf[12..16].copy_from_slice(&kind.to_le_bytes());
    let key = message_key(stream, seq);
    let body = &mut buf[HEADER..];
    let whole = body.len() / 8;
    fill_words(body, 0, key);
    let tail = &mut body[whole * 8..];
    let n = tail.len();
    tail.copy_from_slice(&body_word(key, whole).to_le_bytes()[..n]);
}

pub(super) fn check_udp_body(m: &[u8], stream: u32, seq: u64) -> bool {
    let key = message_key(stream, seq);
    let body = &m[HEADER..];
    let whole = body.len() / 8;
    let tail = &body[whole * 8..];
    words_match(body, 0, key) && tail == &body_word(key, whole).to_le_bytes()[..tail.len()]
}

/// Stream word `w` (bytes `8w..8w+8`) of a TCP stream.
#[inline]
pub(super) fn stream_word(w: u64) -> u64 {
    base()[(w % BASE_WORDS as u64) as usize] ^ mix(TCP_KEY ^ (w / BASE_WORDS as u64))
}

/// Byte `o` of a TCP stream.
#[inline]
pub(super) fn stream_byte(o: u64) -> u8 {
    stream_word(o / 8).to_le_bytes()[(o % 8) as usize]
}

/// Fills `buf` with stream bytes from offset `o`.
pub(super) fn fill_stream(buf: &mut [u8], mut o: u64) {
    let mut at = 0;
    while at < buf.len() && !o.is_multiple_of(8) {
        buf[at] = stream_byte(o);
        at += 1;
        o += 1;
    }
    // Whole words, one 64 KiB block (one key) at a time.
    while buf.len() - at >= 8 {
        let w = o / 8;
        let first = (w % BASE_WORDS as u64) as usize;
        let words = ((buf.len() - at) / 8).min(BASE_WORDS - first);
        let key = mix(TCP_KEY ^ (w / BASE_WORDS as u64));
        fill_words(&mut buf[at..at + words * 8], first, key);
        at += words * 8;
        o += words as u64 * 8;
    }
    for b in &mut buf[at..] {
        *b = stream_byte(o);
        o += 1;
    }
}

/// True when `chunk` is the stream's bytes from offset `o`.
pub(super) fn check_stream(chunk: &[u8], mut o: u64) -> bool {
    let mut at = 0;
    while at < chunk.len() && !o.is_multiple_of(8) {
        if chunk[at] != stream_byte(o) {
            return false;
        }
        at += 1;
        o += 1;
    }
    while chunk.len() - at >= 8 {
        let w = o / 8;
        let first = (w % BASE_WORDS as u64) as usize;
        let words = ((chunk.len() - at) / 8).min(BASE_WORDS - first);
        let key = mix(TCP_KEY ^ (w / BASE_WORDS as u64));
        if !words_match(&chunk[at..at + words * 8], first, key) {
            return false;
        }
        at += words * 8;
        o += words as u64 * 8;
    }
    chunk[at..]
        .iter()
        .enumerate()
        .all(|(k, &b)| b == stream_byte(o + k as u64))
}
