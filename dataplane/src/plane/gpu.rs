//! The GPU work of protocol streams (SPEAD chunks, radio samples in GPU memory), with
//! the same calls whether or not the build has CUDA: without it no GPU can be opened, so
//! the rest is never reached.

use crate::memory::HeldBuffers;

/// A GPU's context and stream.
#[cfg(feature = "cuda")]
pub(super) type PlaneGpu = gpudirect::Gpu;
/// Without CUDA there is no GPU memory to fill.
#[cfg(not(feature = "cuda"))]
pub(super) enum PlaneGpu {}

#[cfg(feature = "cuda")]
pub(super) fn open_gpu(ordinal: u32) -> Result<PlaneGpu, String> {
    gpudirect::Gpu::new(ordinal).map_err(|e| e.to_string())
}

#[cfg(not(feature = "cuda"))]
pub(super) fn open_gpu(_ordinal: u32) -> Result<PlaneGpu, String> {
    Err("GPU memory for a protocol stream needs the cuda feature".into())
}

/// Copies each `(source in pinned memory, buffer, offset)` into held GPU buffers.
#[cfg(feature = "cuda")]
pub(super) fn copy_on_gpu(
    buffers: &mut HeldBuffers,
    gpu: &mut PlaneGpu,
    copies: &[(&[u8], usize, usize)],
) -> Result<(), String> {
    buffers.gpu_copy(gpu, copies)
}

#[cfg(not(feature = "cuda"))]
pub(super) fn copy_on_gpu(
    _buffers: &mut HeldBuffers,
    gpu: &mut PlaneGpu,
    _copies: &[(&[u8], usize, usize)],
) -> Result<(), String> {
    match *gpu {}
}

/// How the stored samples of a burst are decoded (the GPU kernel and its count).
#[cfg(feature = "cuda")]
pub(super) use crate::memory::GpuIqDecode;

/// Without CUDA nothing is decoded on a GPU (no GPU opens to take this).
#[cfg(not(feature = "cuda"))]
#[derive(Clone, Copy, Debug)]
pub(super) struct GpuIqDecode;

/// The decoding of `stored` bytes of `format`: the kernel and its count.
#[cfg(feature = "cuda")]
pub(super) fn iq_decode_for(format: crate::protocol::iq::IqFormat, stored: usize) -> GpuIqDecode {
    use crate::protocol::iq::{Compression, IqFormat, SampleFormat};
    use gpudirect::SampleStorage;
    let fixed = |storage, bytes: usize| GpuIqDecode::Fixed {
        storage,
        samples: (stored / bytes) as u64,
    };
    match format {
        IqFormat::Vrt { samples } => match samples {
            SampleFormat::I8 => fixed(SampleStorage::I8, 2),
            SampleFormat::I16Be => fixed(SampleStorage::I16Be, 4),
            SampleFormat::I16Le => fixed(SampleStorage::I16Le, 4),
        },
        IqFormat::EcpriUplane { compression, .. } => match compression {
            Compression::None => fixed(SampleStorage::I16Be, 4),
            Compression::BlockFloatingPoint { iq_width } => GpuIqDecode::BlockFloatingPoint {
                prbs: (stored / compression.prb_bytes()) as u32,
                iq_width,
            },
        },
    }
}

#[cfg(not(feature = "cuda"))]
pub(super) fn iq_decode_for(_format: crate::protocol::iq::IqFormat, _stored: usize) -> GpuIqDecode {
    GpuIqDecode
}

/// Decodes held buffer `from`'s stored samples into buffer `to`, and waits.
#[cfg(feature = "cuda")]
pub(super) fn decode_on_gpu(
    buffers: &mut HeldBuffers,
    gpu: &mut PlaneGpu,
    from_to: (usize, usize),
    decode: GpuIqDecode,
    half: bool,
) -> Result<(), String> {
    buffers.gpu_decode_iq(gpu, from_to, decode, half)
}

#[cfg(not(feature = "cuda"))]
pub(super) fn decode_on_gpu(
    _buffers: &mut HeldBuffers,
    gpu: &mut PlaneGpu,
    _from_to: (usize, usize),
    _decode: GpuIqDecode,
    _half: bool,
) -> Result<(), String> {
    match *gpu {}
}
