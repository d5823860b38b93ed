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
//! - `bfp_decode`: O-RAN block floating point PRBs to `f32` or `f16`, one thread per
//!   mantissa (`dataplane::protocol::iq` is the CPU version).
//! - `fixed_iq_decode`: 8- or 16-bit fixed-point samples (VITA-49 payloads, uncompressed
//!   O-RAN PRBs) to `f32` or `f16`, one thread per value (same CPU version).
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

mod frames;
pub use frames::SampleStorage;
mod reorder;

/// The error of a failed range check, built out of line: the checks sit in functions whose
/// loops run per packet, and the message's formatting code must not change how those
/// loops are compiled.
#[cold]
#[inline(never)]
fn out_of_range(what: std::fmt::Arguments<'_>) -> GpuError {
    GpuError::OutOfRange(what.to_string())
}

/// The CUDA C source of every kernel (`kernels.cu`), compiled with NVRTC once per GPU.
const SOURCE: &str = include_str!("kernels.cu");

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
const KERNELS: [&str; 8] = [
    "batched_copy",
    "reorder",
    "zero_missing",
    "signal_done",
    "frame_digest",
    "write_frames",
    "bfp_decode",
    "fixed_iq_decode",
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
    bfp_decode: CudaFunction,
    fixed_iq_decode: CudaFunction,
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
            bfp_decode: f("bfp_decode")?,
            fixed_iq_decode: f("fixed_iq_decode")?,
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
