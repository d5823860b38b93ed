//! The reorder case of `bench gpu`: the reorder kernel on one batch in device memory
//! against a device-to-device copy of the same payload bytes.

use super::*;

/// The reorder kernel on one batch in device memory against a device-to-device copy of
/// the same payload bytes.
pub(super) fn reorder_case(
    gpu: &mut gpudirect::Gpu,
    case: &str,
    spec: &ReorderSpec,
    payload: u32,
    rounds: usize,
) -> Result<ReorderResult, GpuBenchError> {
    let ppb = spec.packets_per_batch();
    let stride = (payload as usize + 64).next_multiple_of(256);
    let input = gpudirect::DeviceBuffer::alloc(0, stride * ppb as usize)?;
    let output = gpudirect::DeviceBuffer::alloc(0, spec.batch_bytes())?;
    let copy_dst = gpudirect::DeviceBuffer::alloc(0, payload as usize * ppb as usize)?;
    // The copy that moves what the kernel moves: it reads `bytes` and writes the output.
    let equal_bytes = (payload as usize * ppb as usize + spec.batch_bytes()) / 2;
    let equal_src = gpudirect::DeviceBuffer::alloc(0, equal_bytes)?;
    let equal_dst = gpudirect::DeviceBuffer::alloc(0, equal_bytes)?;
    // Packets in reverse order: sequence number first, then payload bytes.
    let mut host = vec![0u8; stride * ppb as usize];
    for k in 0..ppb as usize {
        let seq = (ppb as usize - 1 - k) as u32;
        host[k * stride..k * stride + 4].copy_from_slice(&seq.to_be_bytes());
        for (j, b) in host[k * stride + 64..k * stride + 64 + payload as usize]
            .iter_mut()
            .enumerate()
        {
            *b = (j ^ k) as u8;
        }
    }
    input.write(0, &host)?;
    let packets: Vec<(u64, u32)> = (0..ppb as u64)
        .map(|k| (input.device_ptr() + k * stride as u64, payload + 64))
        .collect();
    let bytes = payload as f64 * ppb as f64;
    let (mut r, mut c, mut equal) = (Vec::new(), Vec::new(), Vec::new());
    let (mut submit_us, mut wait_us) = (Vec::new(), Vec::new());
    const REPS: usize = 64;
    let slots = gpudirect::kernels::TABLE_SLOTS;
    for _ in 0..rounds {
        // Batches back to back, as a stream of them arrives; one wait at the end.
        let t = Instant::now();
        let (mut submitting, mut waiting) = (Duration::ZERO, Duration::ZERO);
        for k in 0..REPS {
            let slot = k % slots;
            if k >= slots {
                let w = Instant::now();
                gpu.wait_reorder(slot)?;
                waiting += w.elapsed();
            }
            let s = Instant::now();
            // SAFETY: packets and output are device buffers alive until the sync below;
            // the slot's previous batch completed (waited for above).
            unsafe { gpu.reorder_in(slot, spec, &packets, output.device_ptr()) }?;
            submitting += s.elapsed();
        }
        gpu.sync()?;
        let reorder_s = t.elapsed().as_secs_f64();
        r.push(bytes * REPS as f64 / reorder_s / 1e9);
        submit_us.push(submitting.as_secs_f64() * 1e6 / REPS as f64);
        wait_us.push(waiting.as_secs_f64() * 1e6 / REPS as f64);
        let t = Instant::now();
        for _ in 0..REPS {
            // SAFETY: both ranges lie in device buffers of at least `bytes` bytes.
            unsafe { gpu.copy_device(copy_dst.device_ptr(), input.device_ptr(), bytes as usize) }?;
        }
        gpu.sync()?;
        c.push(bytes * REPS as f64 / t.elapsed().as_secs_f64() / 1e9);
        let t = Instant::now();
        for _ in 0..REPS {
            // SAFETY: both ranges are whole device buffers of `equal_bytes` bytes.
            unsafe {
                gpu.copy_device(equal_dst.device_ptr(), equal_src.device_ptr(), equal_bytes)
            }?;
        }
        gpu.sync()?;
        equal.push(t.elapsed().as_secs_f64() / reorder_s);
    }
    // The output of the last batch is checked against the CPU, so a fast wrong kernel
    // cannot pass.
    let mut got = vec![0u8; spec.batch_bytes()];
    output.read(0, &mut got)?;
    let refs: Vec<&[u8]> = (0..ppb as usize)
        .map(|k| &host[k * stride..k * stride + payload as usize + 64])
        .collect();
    let mut want = vec![0u8; spec.batch_bytes()];
    gpudirect::reorder::reorder_cpu(spec, &refs, &mut want);
    if got != want {
        return Err(GpuBenchError::Mismatch {
            case: case.to_string(),
        });
    }
    let (reorder_gbyte_s, d2d_gbyte_s) = (median(r), median(c));
    Ok(ReorderResult {
        case: case.into(),
        packets: ppb,
        payload,
        reorder_gbyte_s,
        d2d_gbyte_s,
        ratio: reorder_gbyte_s / d2d_gbyte_s,
        ratio_to_equal_traffic_copy: median(equal),
        traffic_bound: {
            let (input, output) = (
                f64::from(spec.in_slot_bytes),
                f64::from(spec.out_slot_bytes()),
            );
            (2.0 * input / (input + output)).min(1.0)
        },
        submit_us_per_batch: median(submit_us),
        wait_us_per_batch: median(wait_us),
    })
}
