//! Reorders and the bench sections (`bench_rx`, `bench_tx`, the peer benches).

use super::*;

/// Where a reorder runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReorderKind {
    /// CUDA kernels on the GPU of the output region.
    Gpu,
    /// Plain CPU code on the application's thread.
    Cpu,
}

/// `rx.reorder_configs[]`: packets of some flows are put back in sequence order, a batch at
/// a time, into one contiguous buffer of `memory_region`.
#[derive(Clone, Debug)]
pub struct ReorderConfig {
    /// Unique per interface.
    pub name: String,
    /// GPU or CPU.
    pub kind: ReorderKind,
    /// Region of the output buffers.
    pub memory_region: String,
    /// Bytes skipped at the start of each packet.
    pub payload_byte_offset: u32,
    /// Flows whose packets are reordered.
    pub flow_ids: Vec<u32>,
    /// Optional sample conversion (`data_types`).
    pub conversion: Option<gpudirect::reorder::Conversion>,
    /// Batch and slot of each packet (`method`).
    pub method: gpudirect::reorder::Method,
    /// Where it is defined.
    pub location: Location,
}

impl ReorderConfig {
    /// The kernel parameters for packets from a region of `source_buf_size`-byte buffers:
    /// each slot takes up to `source_buf_size - payload_byte_offset` payload bytes.
    pub fn spec(&self, source_buf_size: usize) -> gpudirect::reorder::ReorderSpec {
        gpudirect::reorder::ReorderSpec {
            method: self.method,
            payload_byte_offset: self.payload_byte_offset,
            in_slot_bytes: source_buf_size.saturating_sub(self.payload_byte_offset as usize) as u32,
            conversion: self.conversion,
        }
    }
}

/// Application sections beside the data plane's own.
#[derive(Clone, Debug, Default)]
pub struct BenchConfig {
    /// `bench_rx` entries.
    pub rx: Vec<BenchRxConfig>,
    /// `bench_tx` entries.
    pub tx: Vec<BenchTxConfig>,
    /// `rdma_bench_server`.
    pub rdma_server: Option<PeerBenchConfig>,
    /// `rdma_bench_client`.
    pub rdma_client: Option<PeerBenchConfig>,
    /// `socket_bench_server`.
    pub socket_server: Option<PeerBenchConfig>,
    /// `socket_bench_client`.
    pub socket_client: Option<PeerBenchConfig>,
    /// `bench_reorder_quantize`: verify a converting reorder's output.
    pub reorder_quantize: Option<ReorderQuantizeConfig>,
}

/// `bench_reorder_quantize`: which converting reorder the bench verifies and how much it
/// must verify. The generators write that reorder's sequence (and batch) fields; every
/// output batch is checked sample by sample against the frames sent.
#[derive(Clone, Copy, Debug)]
pub struct ReorderQuantizeConfig {
    /// The conversion (`input_type`, `output_type`, `endianness`); a reorder with exactly
    /// this conversion must exist.
    pub conversion: gpudirect::reorder::Conversion,
    /// Batches that must be verified for the run to pass.
    pub verify_batches: u64,
    /// Chunks of `chunk_elements` output samples that must be verified per batch (every
    /// chunk of every batch is checked; fewer filled chunks fail the batch).
    pub verify_chunks: u64,
    /// Output samples per chunk.
    pub chunk_elements: u64,
    /// Where it is defined.
    pub location: Location,
}

/// `bench_rx[]`: a checker of received traffic.
#[derive(Clone, Debug)]
pub struct BenchRxConfig {
    /// Interface to read.
    pub interface_name: String,
    /// Queue to read; `None` for every RX queue of the interface.
    pub queue_id: Option<u16>,
    /// Core to pin the checker thread to; `None` for unpinned.
    pub cpu_core: Option<u32>,
    /// `gpu_direct`: whether the queues' payloads must arrive in GPU memory (checked when
    /// the bench starts); `None` when not given.
    pub gpu_direct: Option<bool>,
    /// `split_boundary`: whether the queues must split headers from payloads (two
    /// segments); `None` when not given.
    pub split_boundary: Option<bool>,
    /// `batch_size`: the most packets the application takes at once; the queues' bursts
    /// must not be larger.
    pub batch_size: Option<u32>,
    /// `max_packet_size`: longer packets are counted as oversize and fail the run.
    pub max_packet_size: Option<u32>,
    /// `header_size`: with `split_boundary`, the header segment's buffers must hold it.
    pub header_size: Option<u32>,
    /// Where it is defined.
    pub location: Location,
}

/// `bench_tx[]`: a traffic generator.
#[derive(Clone, Debug)]
pub struct BenchTxConfig {
    /// Interface to send on.
    pub interface_name: String,
    /// Queue to send on.
    pub queue_id: u16,
    /// Core to pin the generator thread to; `None` for unpinned.
    pub cpu_core: Option<u32>,
    /// Packets per burst.
    pub batch_size: u32,
    /// Payload bytes after the header area.
    pub payload_size: u32,
    /// Header area bytes (Ethernet + IPv4 + UDP = 42, padded up to this).
    pub header_size: u32,
    /// UDP source ports, rotated per packet.
    pub udp_src_port: PortRange,
    /// UDP destination ports, rotated per packet.
    pub udp_dst_port: PortRange,
    /// IPv4 source.
    pub ip_src_addr: Ipv4Addr,
    /// IPv4 destination.
    pub ip_dst_addr: Ipv4Addr,
    /// Ethernet source.
    pub eth_src_addr: [u8; 6],
    /// Ethernet destination.
    pub eth_dst_addr: [u8; 6],
    /// `sequence_number_offset` / `sequence_number_start`: a 32-bit big-endian counter at
    /// this offset from the payload start (after `header_size`), counting from `start`, one
    /// per frame of the generator (what a reorder sorts by).
    pub sequence_number: Option<SequenceField>,
    /// `gpu_direct`: frames are written into GPU memory by a kernel (the queue's region
    /// must be `device`). Queues in `device` memory get the GPU writer either way.
    pub gpu_direct: bool,
    /// Where it is defined.
    pub location: Location,
}

/// Where the generator writes its frame counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceField {
    /// Bytes after the payload start.
    pub offset: u32,
    /// First value.
    pub start: u32,
}

/// `rdma_bench_*` / `socket_bench_*`: one side of a request/response benchmark.
#[derive(Clone, Debug)]
pub struct PeerBenchConfig {
    /// True for the server side.
    pub server: bool,
    /// Whether this side sends.
    pub send: bool,
    /// Whether this side receives.
    pub receive: bool,
    /// Core of the application thread.
    pub cpu_core: Option<u32>,
    /// Bytes per message.
    pub message_size: u64,
    /// Outstanding sends (RDMA).
    pub tx_depth: u32,
    /// Posted receives (RDMA).
    pub rx_depth: u32,
    /// Iterations (sockets; 0 = time-bounded).
    pub iterations: i64,
    /// Server address.
    pub server_address: Ipv4Addr,
    /// Client address.
    pub client_address: Ipv4Addr,
    /// Server port.
    pub server_port: u16,
}
