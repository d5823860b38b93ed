//! GPU kernels (compiled once per process and GPU with NVRTC, then cached) and the
//! [`Gpu`] handle that launches them on its own stream.
//!
//! - `batched_copy`: one block per item copies `len` bytes from `src` to `dst` (device
//!   memory, or pinned host memory mapped into the GPU's address space). Staged ingest,
//!   header-data split and arrival-order gather are all made of it.
//! - `reorder`: one warp per packet reads the packet's sequence number, and copies (or
//!   converts, 16 input bytes per lane at a time) its payload into slot
//!   `seq % packets_per_batch` of one output buffer. The last block to finish zeroes
//!   slots no packet filled, so a batch is one launch.
//! - `write_frames`: one warp per test frame, from a template and per-frame fields
//!   ([`crate::frames`] is the CPU version).
//!
//! [`crate::reorder`] is the CPU implementation of the same arithmetic.

use crate::frames::{FrameFields, FrameTemplate};
use crate::reorder::{Method, ReorderSpec};
use crate::{GpuError, PinnedBuffer, context, digest_bytes, driver};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaStream, LaunchConfig, PushKernelArg,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The error of a failed range check, built out of line: the checks sit in functions whose
/// loops run per packet, and the message's formatting code must not change how those
/// loops are compiled.
#[cold]
#[inline(never)]
fn out_of_range(what: std::fmt::Arguments<'_>) -> GpuError {
    GpuError::OutOfRange(what.to_string())
}

const SOURCE: &str = r#"
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

// Block-wide copy and zero fill, 16 bytes at a time where the addresses allow.
__device__ void copy_bytes(u8* d, const u8* s, u32 n) {
    u32 start = 0;
    if ((((u64)s | (u64)d) & 15) == 0) {
        u32 v = n / 16, b = blockDim.x;
        const uint4* s4 = (const uint4*)s;
        uint4* d4 = (uint4*)d;
        // Up to four independent loads in flight per thread before any store: PCIe reads
        // of pinned host memory need many outstanding requests to fill the link.
        for (u32 base = threadIdx.x; base < v; base += 4 * b) {
            uint4 x[4];
#pragma unroll
            for (u32 j = 0; j < 4; j++)
                if (base + j * b < v) x[j] = s4[base + j * b];
#pragma unroll
            for (u32 j = 0; j < 4; j++)
                if (base + j * b < v) d4[base + j * b] = x[j];
        }
        start = v * 16;
    }
    for (u32 k = start + threadIdx.x; k < n; k += blockDim.x) d[k] = s[k];
}

__device__ void zero_bytes(u8* d, u32 n) {
    u32 head = (u32)((16 - ((u64)d & 15)) & 15);
    if (head > n) head = n;
    for (u32 k = threadIdx.x; k < head; k += blockDim.x) d[k] = 0;
    u8* a = d + head;
    u32 rest = n - head, v = rest / 16;
    for (u32 k = threadIdx.x; k < v; k += blockDim.x) ((uint4*)a)[k] = make_uint4(0, 0, 0, 0);
    for (u32 k = v * 16 + threadIdx.x; k < rest; k += blockDim.x) a[k] = 0;
}

extern "C" __global__ void batched_copy(const u64* src, const u64* dst, const u32* len, u32 n) {
    u32 i = blockIdx.x;
    if (i >= n) return;
    const u8* s = (const u8*)src[i];
    u8* d = (u8*)dst[i];
    copy_bytes(d, s, len[i]);
}

__device__ int read_field(const u8* p, u32 len, u32 off, u32 width, u32* out) {
    if ((off + width + 7) / 8 > len) return 0;
    u32 first = off / 8, shift = off % 8, bytes = (shift + width + 7) / 8;
    u64 v = 0;
    for (u32 k = 0; k < bytes; k++) v = (v << 8) | p[first + k];
    v >>= bytes * 8 - shift - width;
    *out = (u32)(v & ((1ull << width) - 1));
    return 1;
}

__device__ int load_sample(const u8* s, u32 e, int t, int network) {
    switch (t) {
    case 0: { u8 b = s[e / 2]; u32 nib = (e % 2 == 0) ? (b >> 4) : (b & 15); return (int)(nib ^ 8) - 8; }
    case 1: return (int)(signed char)s[e];
    case 2: { u32 a = s[2 * e], b = s[2 * e + 1]; return (int)(short)(network ? ((a << 8) | b) : ((b << 8) | a)); }
    default: {
        const u8* q = s + 4 * e;
        u32 v = network ? ((u32)q[0] << 24 | (u32)q[1] << 16 | (u32)q[2] << 8 | q[3])
                        : ((u32)q[3] << 24 | (u32)q[2] << 16 | (u32)q[1] << 8 | q[0]);
        return (int)v;
    }
    }
}

__device__ u16 f32_to_f16(float f) {
    u32 x = __float_as_uint(f);
    u32 sign = (x >> 16) & 0x8000;
    int raw_exp = (x >> 23) & 0xff;
    u32 mant = x & 0x7fffff;
    if (raw_exp == 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
    int exp = raw_exp - 127 + 15;
    if (exp >= 31) return sign | 0x7c00;
    if (exp <= 0) {
        if (exp < -10) return sign;
        mant |= 0x800000;
        u32 shift = 14 - exp;
        u32 h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return sign | h;
    }
    u32 h = ((u32)exp << 10) | (mant >> 13), rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return sign | h;
}

__device__ u16 f32_to_bf16(float f) {
    u32 x = __float_as_uint(f);
    return (u16)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

// Per packet: the big-endian 16-bit word sum of bytes [sum_from, len) (an odd last byte
// counts as a high byte), and `head` leading plus `tail` trailing bytes copied out. Lets
// the host check checksums and headers of frames that stay in GPU memory.
extern "C" __global__ void frame_digest(const u64* src, const u32* len, u32 n, u32 sum_from,
        u32 head, u32 tail, u8* digest, u64* sums) {
    __shared__ u64 part[256];
    u32 i = blockIdx.x;
    if (i >= n) return;
    const u8* p = (const u8*)src[i];
    u32 l = len[i];
    u64 s = 0;
    if (l > sum_from) {
        u32 words = (l - sum_from) / 2;
        for (u32 k = threadIdx.x; k < words; k += blockDim.x)
            s += ((u32)p[sum_from + 2 * k] << 8) | p[sum_from + 2 * k + 1];
        if (threadIdx.x == 0 && ((l - sum_from) & 1)) s += (u32)p[l - 1] << 8;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (u32 w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) sums[i] = part[0];
    u8* d = digest + (u64)i * (head + tail);
    for (u32 k = threadIdx.x; k < head; k += blockDim.x) d[k] = k < l ? p[k] : 0;
    for (u32 k = threadIdx.x; k < tail; k += blockDim.x) d[head + k] = l >= tail ? p[l - tail + k] : 0;
}

// Warp-wide copy, 16 bytes per lane and eight loads in flight before any store, and zero
// fill (the reorder's per-packet work; a warp per packet keeps small packets cheap).
__device__ void warp_copy(u8* d, const u8* s, u32 n, u32 lane) {
    u32 start = 0;
    if ((((u64)s | (u64)d) & 15) == 0) {
        u32 v = n / 16;
        const uint4* s4 = (const uint4*)s;
        uint4* d4 = (uint4*)d;
        for (u32 base = lane; base < v; base += 8 * 32) {
            uint4 x[8];
#pragma unroll
            for (u32 j = 0; j < 8; j++)
                if (base + j * 32 < v) x[j] = s4[base + j * 32];
#pragma unroll
            for (u32 j = 0; j < 8; j++)
                if (base + j * 32 < v) d4[base + j * 32] = x[j];
        }
        start = v * 16;
    }
    for (u32 k = start + lane; k < n; k += 32) d[k] = s[k];
}

__device__ void warp_zero(u8* d, u32 n, u32 lane) {
    u32 head = (u32)((16 - ((u64)d & 15)) & 15);
    if (head > n) head = n;
    for (u32 k = lane; k < head; k += 32) d[k] = 0;
    u8* a = d + head;
    u32 rest = n - head, v = rest / 16;
    for (u32 k = lane; k < v; k += 32) ((uint4*)a)[k] = make_uint4(0, 0, 0, 0);
    for (u32 k = v * 16 + lane; k < rest; k += 32) a[k] = 0;
}

// Sample `j` of a chunk held as little-endian words (indices are constants once
// unrolled, so the chunk stays in registers).
template <int IN, bool NET>
__device__ __forceinline__ int chunk_sample(const u32* w, u32 j) {
#define BYTE(k) ((w[(k) >> 2] >> (((k) & 3) * 8)) & 0xff)
    if (IN == 0) { u32 b = BYTE(j / 2); u32 nib = (j % 2 == 0) ? (b >> 4) : (b & 15); return (int)(nib ^ 8) - 8; }
    if (IN == 1) return (int)(signed char)BYTE(j);
    if (IN == 2) { u32 a = BYTE(2 * j), b = BYTE(2 * j + 1); return (int)(short)(NET ? ((a << 8) | b) : ((b << 8) | a)); }
    u32 a = BYTE(4 * j), b = BYTE(4 * j + 1), c = BYTE(4 * j + 2), e = BYTE(4 * j + 3);
    return (int)(NET ? (a << 24 | b << 16 | c << 8 | e) : (e << 24 | c << 16 | b << 8 | a));
#undef BYTE
}

__device__ __forceinline__ u32 out_bits(float v, int out) {
    return out == 0 ? (u32)f32_to_f16(v) : out == 1 ? (u32)f32_to_bf16(v) : __float_as_uint(v);
}

// Converts `avail` input bytes at `s` into `d`, a chunk per lane: one vector load, the
// samples converted in registers, the output stored in 8- or 16-byte words. Chunks are 16
// input bytes, or fewer where the output grows (int4 to fp32 is 8 times the input), so a
// lane writes at most 32 bytes per chunk and a warp's stores stay close together. The
// last partial chunk goes sample by sample. Returns the output bytes written.
template <int IN, int OUT, bool NET>
__device__ u32 warp_convert(const u8* s, u8* d, u32 avail, u32 lane) {
    const u32 BITS = IN == 0 ? 4 : IN == 1 ? 8 : IN == 2 ? 16 : 32;
    const u32 OB = OUT == 2 ? 4 : 2;
    const u32 GROWTH2 = 2 * OB * 8 / BITS;  // output bytes per input byte, times 2
    const u32 CH = GROWTH2 >= 16 ? 4 : GROWTH2 >= 4 ? 8 : 16;
    const u32 NW = CH / 4;
    const u32 PER = CH * 8 / BITS;
    const u32 WORDS = PER * OB / 4;
    u32 elems = avail * 8 / BITS;
    u32 chunks = ((((u64)s & (CH - 1)) | ((u64)d & 15)) == 0) ? avail / CH : 0;
    // Four chunks' loads in flight per lane before any conversion.
    for (u32 base = lane; base < chunks; base += 4 * 32) {
        u32 in[4][4];
#pragma unroll
        for (u32 u = 0; u < 4; u++) {
            u32 c = base + u * 32;
            if (c >= chunks) break;
            if (NW == 4) {
                uint4 v = ((const uint4*)s)[c];
                in[u][0] = v.x; in[u][1] = v.y; in[u][2] = v.z; in[u][3] = v.w;
            } else if (NW == 2) {
                uint2 v = ((const uint2*)s)[c];
                in[u][0] = v.x; in[u][1] = v.y;
            } else {
                in[u][0] = ((const u32*)s)[c];
            }
        }
#pragma unroll
        for (u32 u = 0; u < 4; u++) {
            u32 c = base + u * 32;
            if (c >= chunks) break;
            u32 o[WORDS];
#pragma unroll
            for (u32 k = 0; k < WORDS; k++) o[k] = 0;
#pragma unroll
            for (u32 j = 0; j < PER; j++) {
                u32 bits = out_bits((float)chunk_sample<IN, NET>(in[u], j), OUT);
                if (OB == 4) o[j] = bits;
                else o[j / 2] |= bits << (16 * (j % 2));
            }
            u8* at = d + (u64)c * PER * OB;
            if (WORDS % 4 == 0) {
#pragma unroll
                for (u32 k = 0; k < WORDS; k += 4) ((uint4*)at)[k / 4] = make_uint4(o[k], o[k + 1], o[k + 2], o[k + 3]);
            } else {
#pragma unroll
                for (u32 k = 0; k < WORDS; k += 2) ((uint2*)at)[k / 2] = make_uint2(o[k], o[k + 1]);
            }
        }
    }
    for (u32 e = chunks * PER + lane; e < elems; e += 32) {
        u32 bits = out_bits((float)load_sample(s, e, IN, NET), OUT);
        if (OB == 4) ((u32*)d)[e] = bits; else ((u16*)d)[e] = (u16)bits;
    }
    return elems * OB;
}

template <int IN, bool NET>
__device__ u32 convert_out(const u8* s, u8* d, u32 avail, int out, u32 lane) {
    if (out == 0) return warp_convert<IN, 0, NET>(s, d, avail, lane);
    if (out == 1) return warp_convert<IN, 1, NET>(s, d, avail, lane);
    return warp_convert<IN, 2, NET>(s, d, avail, lane);
}

template <bool NET>
__device__ u32 convert_in(const u8* s, u8* d, u32 avail, int in, int out, u32 lane) {
    if (in == 0) return convert_out<0, NET>(s, d, avail, out, lane);
    if (in == 1) return convert_out<1, NET>(s, d, avail, out, lane);
    if (in == 2) return convert_out<2, NET>(s, d, avail, out, lane);
    return convert_out<3, NET>(s, d, avail, out, lane);
}

// One warp writes a packet's payload (copied or converted) into its slot and zeroes the
// slot's tail.
__device__ void place(const u8* p, u32 l, u32 slot, u32 payload_off, u32 in_slot,
        u32 out_slot, int in_type, int out_type, int network, u8* out, u32 lane) {
    u32 start = payload_off < l ? payload_off : l;
    u32 avail = l - start;
    if (avail > in_slot) avail = in_slot;
    const u8* s = p + start;
    u8* d = out + (u64)slot * out_slot;
    u32 written;
    if (in_type < 0) {
        warp_copy(d, s, avail, lane);
        written = avail;
    } else if (network) {
        written = convert_in<true>(s, d, avail, in_type, out_type, lane);
    } else {
        written = convert_in<false>(s, d, avail, in_type, out_type, lane);
    }
    warp_zero(d + written, out_slot - written, lane);
}

// One warp per packet: tags its slot with generation `gen` and places the payload. With
// `clean` (at least a batch of packets), the last block to finish zeroes the slots nobody
// tagged (duplicates left them empty); otherwise `zero_missing` runs after it.
extern "C" __global__ void reorder(const u64* src, const u32* lens, u32 n,
        u32 seq_off, u32 seq_width, u32 batch_off, u32 batch_width, u32 ppb,
        u32 payload_off, u32 in_slot, u32 out_slot, int in_type, int out_type, int network,
        u8* out, u32* meta, u32* filled, u32 gen, u32 clean, u32* done) {
    u32 lane = threadIdx.x % 32;
    u32 i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    __shared__ u32 fresh;
    if (threadIdx.x == 0) fresh = 0;
    __syncthreads();
    if (i < n) {
        const u8* p = (const u8*)src[i];
        u32 l = lens[i], seq;
        if (read_field(p, l, seq_off, seq_width, &seq)) {
            if (i == 0 && lane == 0) {
                u32 batch = seq / ppb;
                if (!batch_width || read_field(p, l, batch_off, batch_width, &batch)) {
                    meta[0] = batch;
                    meta[1] = 1;
                }
            }
            u32 slot = seq % ppb;
            if (lane == 0 && atomicExch(&filled[slot], gen) != gen) atomicAdd(&fresh, 1);
            place(p, l, slot, payload_off, in_slot, out_slot, in_type, out_type, network, out, lane);
        }
    }
    if (!clean) return;
    // done[0]: blocks finished, done[1]: slots tagged for the first time in this launch.
    __shared__ u32 last;
    __syncthreads();
    if (threadIdx.x == 0) {
        atomicAdd(&done[1], fresh);
        __threadfence();
        last = atomicAdd(&done[0], 1) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    volatile u32* counts = done;
    if (counts[1] < ppb) {
        // Some slots stayed empty (duplicates took their place): each lane checks a slot,
        // then the warp zeroes the empty ones it found.
        volatile u32* tags = filled;
        u32 warps = blockDim.x / 32, warp = threadIdx.x / 32;
        for (u32 base = warp * 32; base < ppb; base += warps * 32) {
            u32 slot = base + lane;
            u32 empty = __ballot_sync(0xffffffffu, slot < ppb && tags[slot] != gen);
            while (empty) {
                u32 b = __ffs(empty) - 1;
                empty &= empty - 1;
                warp_zero(out + (u64)(base + b) * out_slot, out_slot, lane);
            }
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        done[0] = 0;
        done[1] = 0;
        // Every block's writes are visible (each fenced before counting itself): tell the
        // host, through its pinned memory, that this batch is complete.
        __threadfence_system();
        ((volatile u32*)meta)[2] = gen;
    }
}

// Marks batch `gen` complete in pinned memory, after the launches before it on the stream.
extern "C" __global__ void signal_done(u32* meta, u32 gen) {
    __threadfence_system();
    ((volatile u32*)meta)[2] = gen;
}

// Test frames (see `frames.rs`, whose `write_frame` is the CPU version): one warp per
// frame lays out header, fill, counter and trailer in 4-byte words, then lane 0 writes the
// reorder bit fields and the IPv4 checksum, and the warp sums the UDP checksum.
struct FrameFields { unsigned short sport, dport; u32 counter, sequence, batch; u8 trailer[20]; u8 pad[4]; };
struct FrameTemplate { u8 head[64]; u32 frame_len, header_size, counter_at, seq_off, seq_width, batch_off, batch_width; };

__device__ u8 frame_byte(const FrameTemplate& t, const FrameFields& f, u32 k) {
    switch (k) {
    case 34: return f.sport >> 8;
    case 35: return f.sport & 255;
    case 36: return f.dport >> 8;
    case 37: return f.dport & 255;
    case 24: case 25: case 40: case 41: return 0;
    }
    if (k < 42) return t.head[k];
    if (k >= t.frame_len - 20) return f.trailer[k - (t.frame_len - 20)];
    if (t.counter_at != 0xffffffffu && k >= t.counter_at && k < t.counter_at + 4)
        return (f.counter >> (8 * (3 - (k - t.counter_at)))) & 255;
    if (k < t.header_size) return 0;
    return (u8)k;
}

__device__ void write_field(u8* p, u32 off, u32 width, u32 value) {
    for (u32 b = 0; b < width; b++) {
        u32 pos = off + b;
        u8 mask = 0x80 >> (pos % 8);
        if ((value >> (width - 1 - b)) & 1) p[pos / 8] |= mask; else p[pos / 8] &= ~mask;
    }
}

__device__ u32 fold16(u64 s) {
    while (s > 0xffff) s = (s & 0xffff) + (s >> 16);
    return (u32)s;
}

extern "C" __global__ void write_frames(const u64* dst, const FrameFields* fields, u32 n,
        const FrameTemplate t) {
    u32 lane = threadIdx.x % 32;
    u32 i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (i >= n) return;
    u8* d = (u8*)dst[i];
    const FrameFields f = fields[i];
    u32 len = t.frame_len;
    u32 words = ((u64)d & 3) ? 0 : len / 4;
    for (u32 w = lane; w < words; w += 32) {
        u32 k = 4 * w;
        ((u32*)d)[w] = (u32)frame_byte(t, f, k) | (u32)frame_byte(t, f, k + 1) << 8
            | (u32)frame_byte(t, f, k + 2) << 16 | (u32)frame_byte(t, f, k + 3) << 24;
    }
    for (u32 k = 4 * words + lane; k < len; k += 32) d[k] = frame_byte(t, f, k);
    __syncwarp();
    if (lane == 0) {
        if (t.seq_width) write_field(d, t.seq_off, t.seq_width, f.sequence);
        if (t.batch_width) write_field(d, t.batch_off, t.batch_width, f.batch);
        u64 s = 0;
        for (u32 k = 14; k < 34; k += 2) s += ((u32)d[k] << 8) | d[k + 1];
        u32 ip = ~fold16(s) & 0xffff;
        d[24] = ip >> 8;
        d[25] = ip & 255;
    }
    __syncwarp();
    u64 s = 0;
    u32 pairs = (len - 26) / 2;
    for (u32 k = lane; k < pairs; k += 32) s += ((u32)d[26 + 2 * k] << 8) | d[27 + 2 * k];
    if (lane == 0 && ((len - 26) & 1)) s += (u32)d[len - 1] << 8;
    for (u32 o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) {
        u32 udp = ~fold16(s + 17 + (len - 34)) & 0xffff;
        if (udp == 0) udp = 0xffff;
        d[40] = udp >> 8;
        d[41] = udp & 255;
    }
}

// One block per slot: zeroes the slots `reorder` did not tag with `gen`. Tags of older
// calls never equal `gen`, so nothing needs resetting between batches.
extern "C" __global__ void zero_missing(u8* out, u32 out_slot, u32 ppb, const u32* filled,
        u32 gen) {
    u32 slot = blockIdx.x;
    if (slot < ppb && filled[slot] != gen) zero_bytes(out + (u64)slot * out_slot, out_slot);
}
"#;

/// Threads per block: one block per packet, so a 64 B packet wastes little and a 9 KiB one
/// still gets enough parallelism.
const THREADS: u32 = 256;
/// One block of [`THREADS`] per item (packet, copy or slot).
fn per_block(items: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (items, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

pub use crate::MAX_ITEMS;

/// The kernels of [`SOURCE`] that [`Gpu`] loads.
const KERNELS: [&str; 6] = [
    "batched_copy",
    "reorder",
    "zero_missing",
    "signal_done",
    "frame_digest",
    "write_frames",
];

/// Warps (packets) per `reorder` and `write_frames` block.
const REORDER_WARPS: u32 = 4;

// SAFETY: plain old data with the C layout of the kernel's `struct FrameTemplate`.
unsafe impl cudarc::driver::DeviceRepr for FrameTemplate {}

fn modules() -> &'static Mutex<HashMap<usize, Arc<CudaModule>>> {
    static CACHE: OnceLock<Mutex<HashMap<usize, Arc<CudaModule>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// True when NVRTC (libnvrtc) can be loaded.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library; no NVRTC call is made.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// The kernel module of `ctx`'s GPU: compiled on first use, then shared.
fn module(ctx: &Arc<CudaContext>) -> Result<Arc<CudaModule>, GpuError> {
    let mut cache = modules().lock().expect("module cache");
    if let Some(m) = cache.get(&ctx.ordinal()) {
        return Ok(m.clone());
    }
    if !nvrtc_present() {
        return Err(GpuError::NoNvrtc);
    }
    let arch = match ctx
        .compute_capability()
        .map_err(driver("cuDeviceGetAttribute"))?
    {
        (9, 0) => Some("compute_90"),
        (8, 0) => Some("compute_80"),
        (8, 6) => Some("compute_86"),
        (8, 9) => Some("compute_89"),
        (10, 0) => Some("compute_100"),
        (12, 0) => Some("compute_120"),
        (12, 1) => Some("compute_121"),
        _ => None,
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(
        SOURCE,
        cudarc::nvrtc::CompileOptions {
            arch,
            ..Default::default()
        },
    )
    .map_err(|e| GpuError::Compile(e.to_string()))?;
    let m = ctx.load_module(ptx).map_err(driver("cuModuleLoadData"))?;
    cache.insert(ctx.ordinal(), m.clone());
    Ok(m)
}

/// One GPU's kernels and a stream to run them on, with a pinned, GPU-mapped argument table.
/// Each method queues work on the stream; [`Gpu::sync`] waits for it.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    batched_copy: CudaFunction,
    reorder: CudaFunction,
    zero_missing: CudaFunction,
    signal_done: CudaFunction,
    frame_digest: CudaFunction,
    write_frames: CudaFunction,
    /// Pinned, GPU-mapped: destinations then fields of `write_frames` (grown on demand).
    frame_table: Option<PinnedBuffer>,
    /// One event per argument-table slot, recorded after that slot's work.
    slot_events: Vec<cudarc::driver::CudaEvent>,
    /// One stream per table slot for reorders, so batches in different slots overlap.
    slot_streams: Vec<Arc<CudaStream>>,
    /// Device memory for `reorder`, per table slot: the generation that last filled each
    /// output slot.
    filled: crate::DeviceBuffer,
    /// Device memory for `reorder`, per table slot: blocks of the current launch that
    /// finished, and output slots it tagged for the first time.
    done: crate::DeviceBuffer,
    /// Generation of the next `reorder` call (never 0, the initial tag).
    generation: u32,
    /// Per table slot: the generation of its last reorder, which the kernels write into
    /// the slot's pinned metadata when the batch is complete.
    slot_generation: [u32; TABLE_SLOTS],
    /// The device runs stream memory operations: [`Gpu::record_slot`] has the stream write
    /// an increasing mark into the slot's pinned metadata, which the CPU reads without a
    /// driver call, instead of recording an event.
    stream_mem_ops: bool,
    /// Per table slot: the last mark [`Gpu::record_slot`] queued.
    slot_marks: [u32; TABLE_SLOTS],
    /// Per table slot: its last mark went on the slot's own stream, not the main one.
    marked_on_slot_stream: [bool; TABLE_SLOTS],
    /// Each table slot's digest output (sums, then heads and tails; grown on demand) and
    /// the packets and head-and-tail bytes of the digest last queued there.
    digest_out: [Option<PinnedBuffer>; TABLE_SLOTS],
    digest_queued: [(usize, usize); TABLE_SLOTS],
    ordinal: u32,
    /// src, dst (u64 each) and len (u32) per item, then reorder metadata.
    table: PinnedBuffer,
}

// SAFETY: the CUDA handles are used only through `&mut self` or by CUDA itself; the context
// is bound to the calling thread before each use.
unsafe impl Send for Gpu {}

// Argument tables: this many launches can be in flight at once (see `Gpu::batched_copy_in`).
pub use crate::TABLE_SLOTS;
const TABLE_SLOT_BYTES: usize = MAX_ITEMS * (8 + 8 + 4) + 64;
const TABLE_BYTES: usize = TABLE_SLOT_BYTES * TABLE_SLOTS;

impl Gpu {
    /// Kernels of GPU `ordinal` on a new stream.
    pub fn new(ordinal: u32) -> Result<Self, GpuError> {
        let ctx = context(ordinal)?;
        ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        let m = module(&ctx)?;
        let f = |name: &str| {
            debug_assert!(KERNELS.contains(&name));
            m.load_function(name).map_err(driver("cuModuleGetFunction"))
        };
        let stream = ctx.new_stream().map_err(driver("cuStreamCreate"))?;
        Ok(Self {
            batched_copy: f("batched_copy")?,
            reorder: f("reorder")?,
            zero_missing: f("zero_missing")?,
            signal_done: f("signal_done")?,
            frame_digest: f("frame_digest")?,
            write_frames: f("write_frames")?,
            frame_table: None,
            slot_events: (0..TABLE_SLOTS)
                .map(|_| ctx.new_event(None).map_err(driver("cuEventCreate")))
                .collect::<Result<_, _>>()?,
            filled: {
                let b = crate::DeviceBuffer::alloc(ordinal, TABLE_SLOTS * MAX_ITEMS * 4)?;
                b.write(0, &vec![0u8; TABLE_SLOTS * MAX_ITEMS * 4])?;
                b
            },
            done: {
                let b = crate::DeviceBuffer::alloc(ordinal, TABLE_SLOTS * 8)?;
                b.write(0, &[0u8; TABLE_SLOTS * 8])?;
                b
            },
            slot_streams: (0..TABLE_SLOTS)
                .map(|_| ctx.new_stream().map_err(driver("cuStreamCreate")))
                .collect::<Result<_, _>>()?,
            generation: 1,
            slot_generation: [0; TABLE_SLOTS],
            stream_mem_ops: false,
            slot_marks: [0; TABLE_SLOTS],
            marked_on_slot_stream: [false; TABLE_SLOTS],
            digest_out: Default::default(),
            digest_queued: [(0, 0); TABLE_SLOTS],
            ordinal,
            table: PinnedBuffer::alloc(ordinal, TABLE_BYTES)?,
            stream,
            ctx,
        }
        .with_stream_mem_ops_probed())
    }

    /// Turns on stream-written slot marks when the driver runs stream memory operations
    /// (one write to a slot's flag, waited for; CUDA 12 and later have them by default).
    fn with_stream_mem_ops_probed(mut self) -> Self {
        // SAFETY: slot 0's flag is pinned, GPU-mapped memory owned by `self`; the sync
        // below ends the write before anything else uses the slot.
        let r = unsafe {
            cudarc::driver::sys::cuStreamWriteValue32_v2(
                self.stream.cu_stream(),
                self.slot_flag(0) as u64,
                0,
                0,
            )
        };
        self.stream_mem_ops =
            r == cudarc::driver::sys::CUresult::CUDA_SUCCESS && self.stream.synchronize().is_ok();
        self
    }

    /// The stream the work runs on (GPU consumers order their work after it).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The stream reorders in table `slot` run on.
    pub fn slot_stream(&self, slot: usize) -> &Arc<CudaStream> {
        &self.slot_streams[slot]
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Binds the context to the calling thread (workers call it once after starting).
    pub fn bind(&self) -> Result<(), GpuError> {
        self.ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))
    }

    fn table_parts_in(&mut self, slot: usize) -> (&mut [u64], &mut [u64], &mut [u32], &mut [u32]) {
        assert!(slot < TABLE_SLOTS);
        // SAFETY: each slot is TABLE_SLOT_BYTES of pinned memory owned by `self`, 8-byte
        // aligned (page-aligned allocation, slot size a multiple of 8); the four views do
        // not overlap. The GPU reads a slot only between a launch and the completion the
        // caller waits for before refilling that slot.
        unsafe {
            let base = self.table.as_ptr().add(slot * TABLE_SLOT_BYTES);
            (
                std::slice::from_raw_parts_mut(base.cast::<u64>(), MAX_ITEMS),
                std::slice::from_raw_parts_mut(base.add(MAX_ITEMS * 8).cast::<u64>(), MAX_ITEMS),
                std::slice::from_raw_parts_mut(base.add(MAX_ITEMS * 16).cast::<u32>(), MAX_ITEMS),
                std::slice::from_raw_parts_mut(base.add(MAX_ITEMS * 20).cast::<u32>(), 16),
            )
        }
    }

    fn table_addrs_in(&self, slot: usize) -> (u64, u64, u64, u64) {
        let b = self.table.as_ptr() as u64 + (slot * TABLE_SLOT_BYTES) as u64;
        (
            b,
            b + MAX_ITEMS as u64 * 8,
            b + MAX_ITEMS as u64 * 16,
            b + MAX_ITEMS as u64 * 20,
        )
    }

    /// Queues copies of `(src, dst, len)` items, one block each (at most [`MAX_ITEMS`]).
    ///
    /// # Safety
    /// Every `src` range must be readable and every `dst` range writable by the GPU (device
    /// memory, or pinned host memory mapped for it) until the next [`Gpu::sync`].
    pub unsafe fn batched_copy(&mut self, items: &[(u64, u64, u32)]) -> Result<(), GpuError> {
        // SAFETY: the caller's promise, and table slot 0 is free once synced.
        unsafe { self.batched_copy_in(0, items) }
    }

    /// As [`Gpu::batched_copy`], with its arguments in table `slot` (below
    /// [`TABLE_SLOTS`]): launches in different slots may be in flight together.
    ///
    /// # Safety
    /// As [`Gpu::batched_copy`]; also, the previous launch that used `slot` must have
    /// completed ([`Gpu::slot_done`] or [`Gpu::wait_slot`], or a sync since).
    pub unsafe fn batched_copy_in(
        &mut self,
        slot: usize,
        items: &[(u64, u64, u32)],
    ) -> Result<(), GpuError> {
        assert!(items.len() <= MAX_ITEMS, "more than MAX_ITEMS items");
        if items.is_empty() {
            return Ok(());
        }
        let (src, dst, len, _) = self.table_parts_in(slot);
        for (k, &(s, d, l)) in items.iter().enumerate() {
            src[k] = s;
            dst[k] = d;
            len[k] = l;
        }
        let (s, d, l, _) = self.table_addrs_in(slot);
        let n = items.len() as u32;
        let cfg = per_block(n);
        let mut b = self.stream.launch_builder(&self.batched_copy);
        b.arg(&s).arg(&d).arg(&l).arg(&n);
        // SAFETY: the kernel's signature matches the arguments; the table stays valid and
        // unchanged until sync; the ranges are the caller's promise.
        unsafe { b.launch(cfg) }
            .map(|_| ())
            .map_err(driver("cuLaunchKernel(batched_copy)"))
    }

    /// Reorders `packets` (`(address, len)` in arrival order, GPU-readable) into `out`
    /// (device address, `spec.batch_bytes()` long); every byte of `out` that no packet
    /// wrote is zeroed (slot tails and missing slots, without a separate memset pass).
    /// Waits for the result and returns the batch id of the first packet (`None` when it
    /// was too short).
    ///
    /// # Safety
    /// The packets must be readable and `out` writable by the GPU until this returns.
    pub unsafe fn reorder(
        &mut self,
        spec: &ReorderSpec,
        packets: &[(u64, u32)],
        out: u64,
    ) -> Result<Option<u32>, GpuError> {
        // SAFETY: the caller's promise; the wait below ends the use of table slot 0.
        unsafe { self.reorder_in(0, spec, packets, out) }?;
        self.wait_reorder(0)?;
        Ok(self.reorder_batch_id(0))
    }

    /// Queues a reorder (as [`Gpu::reorder`]) with its arguments in table `slot`, without
    /// waiting. It runs on the slot's own stream ([`Gpu::slot_stream`]), so batches in
    /// different slots overlap on the GPU, and marks itself complete in the slot's pinned
    /// metadata, so no event is needed: [`Gpu::reorder_done`] and [`Gpu::wait_reorder`]
    /// read it. Once complete, [`Gpu::reorder_batch_id`] gives the batch id.
    ///
    /// # Safety
    /// The packets must stay readable and `out` writable by the GPU until it completed;
    /// the previous work that used `slot` must have completed.
    pub unsafe fn reorder_in(
        &mut self,
        slot: usize,
        spec: &ReorderSpec,
        packets: &[(u64, u32)],
        out: u64,
    ) -> Result<(), GpuError> {
        assert!(packets.len() <= MAX_ITEMS, "more than MAX_ITEMS packets");
        assert!(
            spec.packets_per_batch() as usize <= MAX_ITEMS,
            "more than MAX_ITEMS slots"
        );
        let (src, _, len, meta) = self.table_parts_in(slot);
        for (k, &(a, l)) in packets.iter().enumerate() {
            src[k] = a;
            len[k] = l;
        }
        meta[0] = 0;
        meta[1] = 0;
        // SAFETY: the word is in pinned memory the GPU also writes; volatile keeps the
        // store from being merged with the kernel's later one.
        unsafe { std::ptr::write_volatile(&mut meta[2], 0) };
        let (s, _, l, m) = self.table_addrs_in(slot);
        let seq = spec.sequence();
        let (batch_off, batch_width) = match spec.method {
            Method::SeqBatchNumber { batch, .. } => (batch.bit_offset, batch.bit_width),
            Method::SeqPacketsPerBatch { .. } => (0, 0),
        };
        let ppb = spec.packets_per_batch();
        let (in_type, out_type, network) = match spec.conversion {
            None => (-1i32, 0i32, 0i32),
            Some(c) => (c.input.code(), c.output.code(), c.network_order as i32),
        };
        let (in_slot, out_slot) = (spec.in_slot_bytes, spec.out_slot_bytes());
        self.bind()?;
        // Slot tags and counters of this table slot: launches in other slots may run at the
        // same time.
        let filled = self.filled.device_ptr() + (slot * MAX_ITEMS * 4) as u64;
        let done = self.done.device_ptr() + (slot * 8) as u64;
        let stream = self.slot_streams[slot].clone();
        let generation = self.generation;
        self.generation = self.generation.wrapping_add(1).max(1);
        self.slot_generation[slot] = generation;
        // A batch of at least `ppb` packets cleans up after itself in its one launch;
        // with fewer, a second pass zeroes the empty slots.
        let whole = packets.len() >= ppb as usize;
        let n = packets.len() as u32;
        if n > 0 {
            let clean = whole as u32;
            let cfg = LaunchConfig {
                grid_dim: (n.div_ceil(REORDER_WARPS), 1, 1),
                block_dim: (REORDER_WARPS * 32, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = stream.launch_builder(&self.reorder);
            b.arg(&s)
                .arg(&l)
                .arg(&n)
                .arg(&seq.bit_offset)
                .arg(&seq.bit_width)
                .arg(&batch_off)
                .arg(&batch_width)
                .arg(&ppb)
                .arg(&spec.payload_byte_offset)
                .arg(&in_slot)
                .arg(&out_slot)
                .arg(&in_type)
                .arg(&out_type)
                .arg(&network)
                .arg(&out)
                .arg(&m)
                .arg(&filled)
                .arg(&generation)
                .arg(&clean)
                .arg(&done);
            // SAFETY: the signature matches; the table, `out`, the slot tags and the
            // completion counter stay valid until the work completes (the caller's promise
            // and `self`).
            unsafe { b.launch(cfg) }.map_err(driver("cuLaunchKernel(reorder)"))?;
        }
        if !whole {
            let cfg = per_block(ppb);
            let mut b = stream.launch_builder(&self.zero_missing);
            b.arg(&out)
                .arg(&out_slot)
                .arg(&ppb)
                .arg(&filled)
                .arg(&generation);
            // SAFETY: the signature matches; `out` holds ppb slots of out_slot bytes.
            unsafe { b.launch(cfg) }.map_err(driver("cuLaunchKernel(zero_missing)"))?;
            let one = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = stream.launch_builder(&self.signal_done);
            b.arg(&m).arg(&generation);
            // SAFETY: the signature matches; `m` is this slot's pinned metadata.
            unsafe { b.launch(one) }.map_err(driver("cuLaunchKernel(signal_done)"))?;
        }
        Ok(())
    }

    /// True once the reorder queued in table `slot` completed.
    pub fn reorder_done(&mut self, slot: usize) -> bool {
        let want = self.slot_generation[slot];
        let (_, _, _, meta) = self.table_parts_in(slot);
        // SAFETY: a word of this slot's pinned metadata, written by the GPU.
        unsafe { std::ptr::read_volatile(&meta[2]) == want }
    }

    /// Waits until the reorder queued in table `slot` completed: spins on the flag its
    /// kernel writes, yielding now and then, and asks the driver whether the slot's
    /// stream failed (a failed kernel never writes the flag).
    pub fn wait_reorder(&mut self, slot: usize) -> Result<(), GpuError> {
        let mut spins = 0u32;
        while !self.reorder_done(slot) {
            spins += 1;
            if spins.is_multiple_of(256) {
                // SAFETY: a stream of this context.
                let r = unsafe {
                    cudarc::driver::sys::cuStreamQuery(self.slot_streams[slot].cu_stream())
                };
                match r {
                    cudarc::driver::sys::CUresult::CUDA_SUCCESS => {
                        // Idle: the flag is there now unless the batch never signalled.
                        if !self.reorder_done(slot) {
                            return Err(GpuError::Unsupported(format!(
                                "reorder in slot {slot} finished without marking itself complete"
                            )));
                        }
                    }
                    cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_READY => std::thread::yield_now(),
                    e => {
                        return Err(GpuError::Driver {
                            call: "cuStreamQuery",
                            source: cudarc::driver::result::DriverError(e),
                        });
                    }
                }
            } else {
                std::hint::spin_loop();
            }
        }
        Ok(())
    }

    /// The batch id the completed reorder in table `slot` read from its first packet.
    pub fn reorder_batch_id(&mut self, slot: usize) -> Option<u32> {
        let (_, _, _, meta) = self.table_parts_in(slot);
        (meta[1] == 1).then_some(meta[0])
    }

    /// For each packet (`(address, len)`, GPU-readable): the sum of its big-endian 16-bit
    /// words from byte `sum_from` on into `sums[i]`, and its first `head` and last `tail`
    /// bytes into `digests[i * (head + tail)..]`. Waits for the result.
    ///
    /// # Safety
    /// The packets must be readable by the GPU until this returns.
    pub unsafe fn frame_digest(
        &mut self,
        packets: &[(u64, u32)],
        sum_from: u32,
        (head, tail): (u32, u32),
        sums: &mut [u64],
        digests: &mut [u8],
    ) -> Result<(), GpuError> {
        let n = packets.len();
        let per = digest_bytes(head, tail)?;
        if sums.len() < n || digests.len() < n * per {
            return Err(out_of_range(format_args!(
                "{n} packets need {n} sums and {} digest bytes; {} and {} given",
                n * per,
                sums.len(),
                digests.len()
            )));
        }
        // The last slot, so that digests queued in the first ones stay undisturbed.
        let slot = TABLE_SLOTS - 1;
        // SAFETY: the caller keeps the packets readable until this returns, after the wait.
        unsafe {
            self.queue_frame_digest(slot, n, packets.iter().copied(), sum_from, (head, tail))
        }?;
        let (s, d) = self.frame_digest_output(slot, n, per)?;
        sums[..n].copy_from_slice(s);
        digests[..n * per].copy_from_slice(d);
        Ok(())
    }

    /// The first half of [`Gpu::frame_digest`]: queues the digest of the `n` `packets` (at
    /// most [`MAX_ITEMS`]) in table `slot`, with an output of its own, and returns without
    /// waiting, so the caller can work while the GPU digests. [`Gpu::frame_digest_output`]
    /// waits for it. Two slots in turn keep one digest running while the previous one's
    /// output is read. [`Gpu::frame_digest`] uses the last slot.
    ///
    /// # Safety
    /// The packets must stay readable by the GPU until [`Gpu::frame_digest_output`] for
    /// this slot returned; the slot's previous digest must have been waited for.
    pub unsafe fn queue_frame_digest(
        &mut self,
        slot: usize,
        n: usize,
        packets: impl Iterator<Item = (u64, u32)>,
        sum_from: u32,
        (head, tail): (u32, u32),
    ) -> Result<(), GpuError> {
        if n > MAX_ITEMS || slot >= TABLE_SLOTS {
            return Err(out_of_range(format_args!(
                "a digest of {n} packets (at most {MAX_ITEMS}) in table slot {slot} (of {TABLE_SLOTS})"
            )));
        }
        let per = digest_bytes(head, tail)?;
        self.digest_queued[slot] = (0, 0);
        if n == 0 {
            return Ok(());
        }
        let need = n * (8 + per);
        if self.digest_out[slot]
            .as_ref()
            .is_none_or(|b| b.len() < need)
        {
            self.digest_out[slot] =
                Some(PinnedBuffer::alloc(self.ordinal, need.max(MAX_ITEMS * 72))?);
        }
        let (src, _, len, _) = self.table_parts_in(slot);
        let mut written = 0;
        for (k, (a, l)) in packets.enumerate().take(n) {
            src[k] = a;
            len[k] = l;
            written += 1;
        }
        // Checked in release builds: a short iterator would leave stale table entries.
        if written != n {
            return Err(out_of_range(format_args!(
                "{written} packets given for a digest of {n}"
            )));
        }
        let out = self.digest_out[slot]
            .as_ref()
            .expect("just allocated")
            .as_ptr();
        let (s, _, l, _) = self.table_addrs_in(slot);
        let (sums_at, digest_at) = (out as u64, out as u64 + 8 * n as u64);
        let n32 = n as u32;
        self.bind()?;
        let cfg = per_block(n32);
        let mut b = self.stream.launch_builder(&self.frame_digest);
        b.arg(&s)
            .arg(&l)
            .arg(&n32)
            .arg(&sum_from)
            .arg(&head)
            .arg(&tail)
            .arg(&digest_at)
            .arg(&sums_at);
        // SAFETY: the signature matches; table and output stay valid until the wait.
        unsafe { b.launch(cfg) }.map_err(driver("cuLaunchKernel(frame_digest)"))?;
        // A mark in pinned memory rather than a stream sync: no driver call while waiting.
        self.record_slot(slot)?;
        self.digest_queued[slot] = (n, per);
        Ok(())
    }

    /// Waits for the digest [`Gpu::queue_frame_digest`] queued in `slot` for `n` packets
    /// of `per` head and tail bytes each, and gives its sums and digests, read in place.
    pub fn frame_digest_output(
        &self,
        slot: usize,
        n: usize,
        per: usize,
    ) -> Result<(&[u64], &[u8]), GpuError> {
        if n == 0 {
            return Ok((&[], &[]));
        }
        let out = match self.digest_out.get(slot).and_then(|o| o.as_ref()) {
            Some(out) if self.digest_queued[slot] == (n, per) => out,
            _ => {
                return Err(GpuError::Unsupported(format!(
                    "no digest of {n} packets of {per} bytes queued in slot {slot}"
                )));
            }
        };
        self.wait_slot(slot)?;
        let out = out.as_ptr();
        // SAFETY: the digest last queued in this slot (checked above) wrote n sums, then n
        // digests of `per` bytes, into this pinned output owned by `self` (sized for them
        // when queued), and it has finished; `&self` keeps the slot from being queued
        // again while the views live.
        Ok(unsafe {
            (
                std::slice::from_raw_parts(out.cast::<u64>(), n),
                std::slice::from_raw_parts(out.add(8 * n), n * per),
            )
        })
    }

    /// Queues the writing of test frames: frame `fields` of template `t` at each address
    /// (device memory, or pinned host memory mapped for the GPU), one warp per frame, as
    /// [`crate::frames::write_frame`] does on the CPU. [`Gpu::sync`] waits for it.
    ///
    /// # Safety
    /// Every address must be writable by the GPU for `t.frame_len` bytes until the next
    /// sync, and the previous call's work must have completed (a sync since).
    pub unsafe fn write_frames(
        &mut self,
        t: &FrameTemplate,
        frames: &[(u64, FrameFields)],
    ) -> Result<(), GpuError> {
        assert!(
            t.frame_len as usize >= crate::frames::HEADER + crate::frames::TRAILER,
            "frames shorter than header and trailer"
        );
        let n = frames.len();
        if n == 0 {
            return Ok(());
        }
        let field_bytes = std::mem::size_of::<FrameFields>();
        let need = n * (8 + field_bytes);
        if self.frame_table.as_ref().is_none_or(|b| b.len() < need) {
            self.frame_table = Some(PinnedBuffer::alloc(self.ordinal, need.max(1 << 16))?);
        }
        let table = self.frame_table.as_ref().expect("just allocated").as_ptr();
        // SAFETY: the table holds `need` bytes of pinned memory owned by `self`, 8-byte
        // aligned (page-aligned, and 8 * n before the fields); the previous launch that read
        // it completed (the caller synced before reusing the frames' buffers, and every
        // launch of `self` is on its one stream, so this launch runs after the earlier).
        let (dst, fields) = unsafe {
            (
                std::slice::from_raw_parts_mut(table.cast::<u64>(), n),
                std::slice::from_raw_parts_mut(table.add(8 * n).cast::<FrameFields>(), n),
            )
        };
        for (k, &(a, f)) in frames.iter().enumerate() {
            dst[k] = a;
            fields[k] = f;
        }
        let (d, f) = (table as u64, table as u64 + 8 * n as u64);
        let n32 = n as u32;
        self.bind()?;
        let cfg = LaunchConfig {
            grid_dim: (n32.div_ceil(REORDER_WARPS), 1, 1),
            block_dim: (REORDER_WARPS * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.write_frames);
        b.arg(&d).arg(&f).arg(&n32).arg(t);
        // SAFETY: the signature matches (the template by value); the table stays valid until
        // the next call, which the caller makes after syncing; the destinations are the
        // caller's promise.
        unsafe { b.launch(cfg) }.map_err(driver("cuLaunchKernel(write_frames)"))?;
        Ok(())
    }

    /// Queues a host-to-device copy.
    ///
    /// # Safety
    /// `src` must stay valid (and, for the copy to be asynchronous, pinned) and `dst`
    /// writable until the next sync.
    pub unsafe fn copy_to_device(
        &self,
        dst: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), GpuError> {
        // SAFETY: the caller's promise (above).
        unsafe { self.copy_to_device_on(None, dst, src, len) }
    }

    /// The stream of table `slot` (`Some`) or the main stream (`None`).
    fn stream_of(&self, slot: Option<usize>) -> &Arc<CudaStream> {
        slot.map_or(&self.stream, |k| &self.slot_streams[k])
    }

    /// As [`Gpu::copy_to_device`], on table `slot`'s own stream when `Some` (marked with
    /// [`Gpu::record_slot_on`]). `bench gpu` compares the two; on the H200 several streams
    /// did not overlap host-to-device copies.
    ///
    /// # Safety
    /// As [`Gpu::copy_to_device`].
    pub unsafe fn copy_to_device_on(
        &self,
        slot: Option<usize>,
        dst: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), GpuError> {
        let stream = self.stream_of(slot).cu_stream();
        // SAFETY: the caller's promise (above).
        let r = unsafe { cudarc::driver::sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, stream) };
        if r != cudarc::driver::sys::CUresult::CUDA_SUCCESS {
            return Err(GpuError::Driver {
                call: "cuMemcpyHtoDAsync",
                source: cudarc::driver::result::DriverError(r),
            });
        }
        Ok(())
    }

    /// Queues a strided copy into device memory: `rows` rows of `width` bytes, row `k`
    /// from `src + k * src_pitch` (pinned host memory, or device memory when
    /// `src_on_device`) to `dst + k * dst_pitch` (one `cuMemcpy2DAsync`).
    ///
    /// # Safety
    /// Every source row must stay valid (pinned, for host memory) and every destination row
    /// writable until the next sync; `width` must not exceed either pitch.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn copy_rows_to_device(
        &self,
        dst: u64,
        dst_pitch: usize,
        src: u64,
        src_pitch: usize,
        src_on_device: bool,
        width: usize,
        rows: usize,
    ) -> Result<(), GpuError> {
        use cudarc::driver::sys::{CUDA_MEMCPY2D_st, CUmemorytype};
        assert!(
            width <= src_pitch && width <= dst_pitch,
            "rows wider than their pitch"
        );
        let copy = CUDA_MEMCPY2D_st {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: if src_on_device {
                CUmemorytype::CU_MEMORYTYPE_DEVICE
            } else {
                CUmemorytype::CU_MEMORYTYPE_HOST
            },
            srcHost: if src_on_device {
                std::ptr::null()
            } else {
                src as *const _
            },
            srcDevice: if src_on_device { src } else { 0 },
            srcArray: std::ptr::null_mut(),
            srcPitch: src_pitch,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: dst,
            dstArray: std::ptr::null_mut(),
            dstPitch: dst_pitch,
            WidthInBytes: width,
            Height: rows,
        };
        // SAFETY: the descriptor is complete and lives across the call; the ranges are the
        // caller's promise.
        let r = unsafe { cudarc::driver::sys::cuMemcpy2DAsync_v2(&copy, self.stream.cu_stream()) };
        if r != cudarc::driver::sys::CUresult::CUDA_SUCCESS {
            return Err(GpuError::Driver {
                call: "cuMemcpy2DAsync",
                source: cudarc::driver::result::DriverError(r),
            });
        }
        Ok(())
    }

    /// Queues a device-to-device copy.
    ///
    /// # Safety
    /// Both ranges must be valid device memory until the next sync.
    pub unsafe fn copy_device(&self, dst: u64, src: u64, len: usize) -> Result<(), GpuError> {
        // SAFETY: the caller's promise (above).
        unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, len, self.stream.cu_stream()) }
            .map_err(driver("cuMemcpyDtoDAsync"))
    }

    /// Marks table `slot`: it completes when everything queued on the stream so far has.
    /// With stream memory operations the stream itself writes the mark into pinned memory
    /// (the CPU then checks it without a driver call), otherwise an event is recorded.
    pub fn record_slot(&mut self, slot: usize) -> Result<(), GpuError> {
        self.record_slot_on(slot, false)
    }

    /// As [`Gpu::record_slot`], after the work on the slot's own stream when
    /// `on_slot_stream` (what the `*_on(Some(slot), ..)` copies queued).
    pub fn record_slot_on(&mut self, slot: usize, on_slot_stream: bool) -> Result<(), GpuError> {
        self.marked_on_slot_stream[slot] = on_slot_stream;
        let stream = self.stream_of(on_slot_stream.then_some(slot));
        if !self.stream_mem_ops {
            return self.slot_events[slot]
                .record(stream)
                .map_err(driver("cuEventRecord"));
        }
        let stream = stream.cu_stream();
        let mark = self.slot_marks[slot].wrapping_add(1);
        self.slot_marks[slot] = mark;
        // SAFETY: the flag is a word of this slot's pinned, GPU-mapped metadata, owned by
        // `self`; the write happens after the stream's earlier work (default flags keep
        // the memory barrier).
        let r = unsafe {
            cudarc::driver::sys::cuStreamWriteValue32_v2(
                stream,
                self.slot_flag(slot) as u64,
                mark,
                0,
            )
        };
        if r != cudarc::driver::sys::CUresult::CUDA_SUCCESS {
            return Err(GpuError::Driver {
                call: "cuStreamWriteValue32",
                source: cudarc::driver::result::DriverError(r),
            });
        }
        Ok(())
    }

    /// The stream that carries table `slot`'s last mark (consumers that order GPU work
    /// after a marked slot wait on it).
    pub fn slot_mark_stream(&self, slot: usize) -> &Arc<CudaStream> {
        self.stream_of(self.marked_on_slot_stream[slot].then_some(slot))
    }

    /// The word of table `slot`'s metadata the stream writes its marks into.
    fn slot_flag(&self, slot: usize) -> *const u32 {
        let (_, _, _, meta) = self.table_addrs_in(slot);
        (meta + 12) as *const u32
    }

    /// True once the work before table `slot`'s last mark finished.
    pub fn slot_done(&self, slot: usize) -> Result<bool, GpuError> {
        if !self.stream_mem_ops {
            return self.slot_events[slot]
                .try_is_complete()
                .map_err(driver("cuEventQuery"));
        }
        // SAFETY: a word of this slot's pinned metadata, which the GPU writes.
        Ok(unsafe { std::ptr::read_volatile(self.slot_flag(slot)) } == self.slot_marks[slot])
    }

    /// Waits until the work before table `slot`'s last mark finished (spinning on the
    /// mark, and asking the driver now and then whether the stream failed).
    pub fn wait_slot(&self, slot: usize) -> Result<(), GpuError> {
        if !self.stream_mem_ops {
            return self.slot_events[slot]
                .synchronize()
                .map_err(driver("cuEventSynchronize"));
        }
        let mut spins = 0u32;
        while !self.slot_done(slot)? {
            spins += 1;
            if !spins.is_multiple_of(256) {
                std::hint::spin_loop();
                continue;
            }
            // SAFETY: this context's stream, the one that carries the slot's mark.
            match unsafe {
                cudarc::driver::sys::cuStreamQuery(self.slot_mark_stream(slot).cu_stream())
            } {
                cudarc::driver::sys::CUresult::CUDA_SUCCESS => {
                    if !self.slot_done(slot)? {
                        return Err(GpuError::Unsupported(format!(
                            "the stream is idle but table slot {slot} was never marked done"
                        )));
                    }
                }
                cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_READY => std::thread::yield_now(),
                e => {
                    return Err(GpuError::Driver {
                        call: "cuStreamQuery",
                        source: cudarc::driver::result::DriverError(e),
                    });
                }
            }
        }
        Ok(())
    }

    /// Waits until everything queued on the stream and the slot streams is done.
    pub fn sync(&self) -> Result<(), GpuError> {
        for s in std::iter::once(&self.stream).chain(&self.slot_streams) {
            s.synchronize().map_err(driver("cuStreamSynchronize"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// The kernel source compiles for every architecture `module` names, with every kernel
    /// `Gpu::new` loads (NVRTC is enough; no GPU needed). Skipped, visibly, where libnvrtc cannot be loaded.
    #[test]
    fn kernel_source_compiles_for_every_known_architecture() {
        if !super::nvrtc_present() {
            // `make test` fetches NVRTC and sets this, so the check cannot silently skip.
            assert!(
                std::env::var_os("DATAPLANE_REQUIRE_NVRTC").is_none(),
                "DATAPLANE_REQUIRE_NVRTC is set but libnvrtc cannot be loaded"
            );
            eprintln!("SKIP: libnvrtc not found (no CUDA toolkit); scripts/nvrtc.sh fetches it");
            return;
        }
        for arch in ["compute_80", "compute_90", "compute_100", "compute_121"] {
            let ptx = cudarc::nvrtc::compile_ptx_with_opts(
                super::SOURCE,
                cudarc::nvrtc::CompileOptions {
                    arch: Some(arch),
                    ..Default::default()
                },
            );
            let ptx = ptx.unwrap_or_else(|e| panic!("{arch}: {e}"));
            let src = ptx.to_src();
            for name in super::KERNELS {
                assert!(
                    src.contains(&format!(".entry {name}(")),
                    "{arch}: no kernel `{name}` in the module"
                );
            }
        }
    }
}
