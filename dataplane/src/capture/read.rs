//! Reading a capture back: the frames of a pcap or pcapng file with their timestamps, in
//! file order, for replay.

use std::path::Path;

/// One frame of a capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedFrame {
    /// When it was captured, in nanoseconds (the file's clock).
    pub timestamp_ns: u64,
    /// Its bytes as captured.
    pub bytes: Vec<u8>,
    /// Its length on the wire; more than `bytes` when the capture cut it short.
    pub original_len: u32,
}

/// Why a capture could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be opened.
    #[error("{path}: {source}")]
    Open {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not a pcap or pcapng file, or damaged at a packet.
    #[error("{path}: {what}")]
    Format {
        /// The file.
        path: String,
        /// What was wrong, and at which packet.
        what: String,
    },
}

/// Every frame of the pcap or pcapng file at `path` (told apart by its magic number).
/// pcap timestamps in microseconds or nanoseconds, pcapng enhanced and simple packet
/// blocks (a simple block has no timestamp: it takes its predecessor's).
pub fn read_capture(path: &Path) -> Result<Vec<CapturedFrame>, ReadError> {
    let name = path.display().to_string();
    let open = |source| ReadError::Open {
        path: name.clone(),
        source,
    };
    let bytes = std::fs::read(path).map_err(open)?;
    let format = |what: String| ReadError::Format {
        path: name.clone(),
        what,
    };
    let mut out = Vec::new();
    match bytes.get(..4) {
        Some([0x0a, 0x0d, 0x0d, 0x0a]) => {
            let mut r = pcap_file::pcapng::PcapNgReader::new(bytes.as_slice())
                .map_err(|e| format(format!("not a pcapng file: {e}")))?;
            while let Some(block) = r.next_block() {
                let at = out.len();
                let block = block.map_err(|e| format(format!("packet {at}: {e}")))?;
                match block {
                    pcap_file::pcapng::Block::EnhancedPacket(p) => out.push(CapturedFrame {
                        timestamp_ns: p.timestamp.as_nanos() as u64,
                        original_len: p.original_len,
                        bytes: p.data.into_owned(),
                    }),
                    pcap_file::pcapng::Block::SimplePacket(p) => out.push(CapturedFrame {
                        timestamp_ns: out.last().map_or(0, |f: &CapturedFrame| f.timestamp_ns),
                        original_len: p.original_len,
                        bytes: p.data.into_owned(),
                    }),
                    _ => {}
                }
            }
        }
        _ => {
            let mut r = pcap_file::pcap::PcapReader::new(bytes.as_slice())
                .map_err(|e| format(format!("not a pcap or pcapng file: {e}")))?;
            while let Some(p) = r.next_packet() {
                let at = out.len();
                let p = p.map_err(|e| format(format!("packet {at}: {e}")))?;
                out.push(CapturedFrame {
                    timestamp_ns: p.timestamp.as_nanos() as u64,
                    original_len: p.orig_len,
                    bytes: p.data.into_owned(),
                });
            }
        }
    }
    Ok(out)
}
