//! What the GPU tests share: the GPU to one test at a time, and reproducible random bytes.
#![allow(dead_code)] // each GPU test binary uses some of it

/// The GPU and the worker cores, to this test alone; `None` (the test skips, visibly)
/// without a driver or a GPU. The tests' planes busy-poll the same pinned cores (1 to 4):
/// run side by side, a paced socket stream shared its worker's core with another test's
/// poller and waited a scheduler slice per message (128 messages in 2 s instead of
/// 60,000). One plane at a time, as a user runs one plane on one set of cores.
pub fn gpu_alone() -> Option<std::sync::MutexGuard<'static, ()>> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    match gpudirect::device_count() {
        Ok(n) if n > 0 => {
            eprintln!("GPU: {}", gpudirect::device_name(0).unwrap_or_default());
            Some(ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner()))
        }
        Ok(_) => {
            eprintln!("SKIP: a CUDA driver but no GPU");
            None
        }
        Err(e) => {
            eprintln!("SKIP: {e}: GPU test not run");
            None
        }
    }
}

/// xorshift64*: reproducible random bytes without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.next() as u8;
        }
    }
}
