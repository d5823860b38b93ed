//! The verdict of the previous frame, reused for the next when every byte the rules read
//! is the same: a stream's frames differ in their payload, lengths and checksums, rarely
//! in the fields that steer them, so a burst of one stream is classified once.
//!
//! Only frames of the common layout take part (untagged IPv4 without options, not a
//! fragment, 42 bytes or more), where the header fields sit at fixed offsets. The
//! layout's own bytes (EtherType, version and header length, fragment field, protocol)
//! are always compared, so an equal key also proves the same layout.

use super::classifier::{Classifier, Decisive, Verdict};

/// Bytes 0..40 of a frame, as five words; every field the rules read lies inside.
const WORDS: usize = 5;

/// Which of a frame's first 40 bytes decide the verdict, as a mask over five words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DecisiveBytes([u64; WORDS]);

/// Byte ranges of the common layout.
pub(crate) mod at {
    use std::ops::Range;
    pub const ETH_DST: Range<usize> = 0..6;
    pub const ETH_SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    pub const VERSION_IHL: Range<usize> = 14..15;
    pub const TOTAL_LEN: Range<usize> = 16..18;
    pub const FRAGMENT: Range<usize> = 20..22;
    pub const PROTOCOL: Range<usize> = 23..24;
    pub const IP_SRC: Range<usize> = 26..30;
    pub const IP_DST: Range<usize> = 30..34;
    pub const UDP_SRC: Range<usize> = 34..36;
    pub const UDP_DST: Range<usize> = 36..38;
}

impl DecisiveBytes {
    /// The layout's own bytes, which every key compares.
    pub(crate) fn layout() -> Self {
        let mut d = Self([0; WORDS]);
        for r in [at::ETHERTYPE, at::VERSION_IHL, at::FRAGMENT, at::PROTOCOL] {
            d.add(r);
        }
        d
    }

    /// Adds the bytes of `range` (inside 0..40).
    pub(crate) fn add(&mut self, range: std::ops::Range<usize>) {
        for b in range {
            self.0[b / 8] |= 0xff << ((b % 8) * 8);
        }
    }

    /// The decisive bytes of `frame`, or `None` when it is not of the common layout.
    #[inline]
    fn key(&self, frame: &[u8]) -> Option<[u64; WORDS]> {
        let head: &[u8; 42] = frame.get(..42)?.try_into().ok()?;
        let mut key = [0u64; WORDS];
        for (w, k) in key.iter_mut().enumerate() {
            let mut word = [0u8; 8];
            word.copy_from_slice(&head[w * 8..w * 8 + 8]);
            // Little-endian on every target, so the mask's byte positions hold.
            *k = u64::from_le_bytes(word) & self.0[w];
        }
        Some(key)
    }
}

/// Word-wise equality without a branch per word (`==` on arrays calls `memcmp`).
#[inline]
fn same(a: &[u64; WORDS], b: &[u64; WORDS]) -> bool {
    a.iter().zip(b).fold(0, |d, (x, y)| d | (x ^ y)) == 0
}

/// True when `frame` has the common layout (the parser's fast path).
#[inline]
fn common_layout(frame: &[u8]) -> bool {
    frame.len() >= 42
        && frame[12] == 0x08
        && frame[13] == 0x00
        && frame[14] == 0x45
        && u16::from_be_bytes([frame[20], frame[21]]) & 0x1fff == 0
}

/// The last verdict and its key, kept by one classifying thread between frames (and
/// bursts: a stream keeps its fields from burst to burst).
#[derive(Clone, Copy, Debug, Default)]
pub struct VerdictMemo {
    last: Option<Remembered>,
}

/// A remembered verdict: the key over the bytes the rules read, and where its target
/// spread it (RSS), the key over those and the hash's 4-tuple.
#[derive(Clone, Copy, Debug)]
struct Remembered {
    rules_key: [u64; WORDS],
    spread_key: Option<[u64; WORDS]>,
    verdict: Verdict,
    epoch: u64,
}

impl VerdictMemo {
    /// `frame`'s verdict under `rules`: the previous one when the bytes that decided it
    /// are those of the previous frame (of the same rule set), else classified. A verdict
    /// a rule's queue or the unmatched queue gave needs only the bytes the rules read
    /// equal (a stream whose source port rotates keeps it); one RSS gave needs the
    /// 4-tuple equal too.
    #[inline]
    pub fn classify(&mut self, rules: &Classifier, frame: &[u8]) -> Verdict {
        let Some(&Decisive {
            rules: by_rules,
            spread,
        }) = rules.decisive_bytes()
        else {
            return rules.classify(frame);
        };
        let Some(rules_key) = by_rules.key(frame) else {
            return rules.classify(frame);
        };
        if let Some(r) = &self.last
            && same(&r.rules_key, &rules_key)
            && r.epoch == rules.epoch()
        {
            match r.spread_key {
                None => return r.verdict,
                Some(k) if spread.key(frame).is_some_and(|now| same(&k, &now)) => {
                    return r.verdict;
                }
                Some(_) => {}
            }
        }
        let (verdict, spread_by_rss) = rules.classify_spread(frame);
        // Remembered only for the common layout: the key compares its bytes, so an equal
        // key later proves that layout again.
        if common_layout(frame) {
            self.last = Some(Remembered {
                rules_key,
                spread_key: if spread_by_rss {
                    spread.key(frame)
                } else {
                    None
                },
                verdict,
                epoch: rules.epoch(),
            });
        }
        verdict
    }
}
