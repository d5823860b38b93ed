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

// O-RAN block floating point PRBs back to back in `prbs` (each: a byte whose low 4 bits
// are the exponent, then 24 signed mantissas of `w` bits packed MSB first): one thread
// per mantissa writes mantissa * 2^exponent to out[24 * prb + k] as float, or as IEEE
// half (round to nearest even) when `half` is set. The CPU twin is
// dataplane::protocol::iq (decode_ecpri_uplane), which must give the same bits.
extern "C" __global__ void bfp_decode(const u8* prbs, u32 n_prbs, u32 w, u32 half, void* out) {
    u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (u64)n_prbs * 24) return;
    u32 prb = (u32)(t / 24), k = (u32)(t % 24);
    u32 prb_bytes = 1 + (24 * w + 7) / 8;
    const u8* p = prbs + (u64)prb * prb_bytes;
    u32 v = 0;
    for (u32 b = k * w; b < (k + 1) * w; b++) v = (v << 1) | ((p[1 + b / 8] >> (7 - b % 8)) & 1);
    int m = ((int)(v << (32 - w))) >> (32 - w);
    float x = (float)m * (float)(1u << (p[0] & 15));
    if (half) ((u16*)out)[t] = f32_to_f16(x);
    else ((float*)out)[t] = x;
}

// Fixed-point complex samples back to back in `src` (VITA-49 signal data payloads,
// uncompressed O-RAN PRBs): one thread per value (I or Q) writes it to out[t] as float,
// or as IEEE half (round to nearest even) when `half` is set. `format`: 0 int8, 1 int16
// big-endian, 2 int16 little-endian. The CPU twin is dataplane::protocol::iq.
extern "C" __global__ void fixed_iq_decode(const u8* src, u64 n_values, u32 format, u32 half,
        void* out) {
    u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_values) return;
    int v;
    if (format == 0) {
        v = (signed char)src[t];
    } else {
        const u8* b = src + 2 * t;
        v = (short)(format == 1 ? (b[0] << 8) | b[1] : (b[1] << 8) | b[0]);
    }
    float x = (float)v;
    if (half) ((u16*)out)[t] = f32_to_f16(x);
    else ((float*)out)[t] = x;
}
