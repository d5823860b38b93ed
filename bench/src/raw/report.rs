//! Reporting: the verdict, the human summary and the JSON line of a run.

use super::*;

impl ReorderReport {
    pub(super) fn add(&mut self, o: &ReorderReport) {
        self.batches += o.batches;
        self.timeout_batches += o.timeout_batches;
        self.aggregated_packets += o.aggregated_packets;
        self.passthrough_packets += o.passthrough_packets;
        self.verified_batches += o.verified_batches;
        self.bad_batches += o.bad_batches;
        self.unchecked_batches += o.unchecked_batches;
        self.verified_chunks += o.verified_chunks;
        if self.first_problem.is_none() {
            self.first_problem.clone_from(&o.first_problem);
        }
    }
}

impl RawReport {
    /// Human-readable report.
    pub fn human(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "engine {} (steering: {}), {:.2} s\n",
            self.engine, self.steering, self.seconds
        ));
        if self.interrupted {
            s.push_str(&format!(
                "  INTERRUPTED after {:.2} of {} requested seconds (SIGINT or SIGTERM)\n",
                self.seconds, self.requested_seconds
            ));
        }
        if !self.zero_copy_regions.is_empty() {
            s.push_str(&format!(
                "  zero-copy receive into: {}\n",
                self.zero_copy_regions.join(", ")
            ));
        }
        s.push_str(&format!(
            "  TX  {:>14} packets {:>16} bytes\n",
            self.tx_packets, self.tx_bytes
        ));
        s.push_str(&format!(
            "  RX  {:>14} packets {:>16} bytes   {:.2} Mpps  {:.2} Gb/s\n",
            self.rx_packets, self.rx_bytes, self.rx_mpps, self.rx_gbps
        ));
        let d = &self.drops;
        s.push_str(&format!(
            "  drops: ring_full {} pool_empty {} no_flow {} malformed {} engine_missed {} gpu_copy {} injected {}\n",
            d.ring_full, d.pool_empty, d.no_flow, d.malformed, d.engine_missed, d.gpu_copy, d.injected
        ));
        s.push_str(&format!(
            "  lost {} (attributed to drop counters {}, unattributed {}), in flight {}\n",
            self.lost,
            self.lost - self.unattributed,
            self.unattributed,
            self.in_flight
        ));
        if let Some(c) = &self.in_flight_cause {
            s.push_str(&format!("  in flight: {c}\n"));
        }
        match self.rx_work {
            RxWork::Count => {
                s.push_str("  checker: frames counted, not read (--rx-work count)\n")
            }
            work => s.push_str(&format!(
                "  checker ({}): {} valid, {} corrupt, {} missing from sequences, {} out of order, {} duplicated\n",
                if work == RxWork::Trailer { "trailers only" } else { "headers and trailers" },
                self.checker.valid, self.checker.corrupt, self.checker.gaps, self.checker.reordered, self.checker.duplicates
            )),
        }
        self.push_details(&mut s);
        self.push_verdict(&mut s);
        s
    }

    /// Latency, pacing, captures, stage costs, the reorder, per-queue and per-flow counts.
    fn push_details(&self, s: &mut String) {
        if let Some(l) = &self.latency {
            s.push_str(&format!(
                "  one-way latency ({} frames, receive time from {}): min {} p50 {} p99 {} p99.9 {} max {}{}\n",
                l.frames,
                self.latency_clock,
                duration_text(l.min_ns),
                duration_text(l.p50_ns),
                duration_text(l.p99_ns),
                duration_text(l.p999_ns),
                duration_text(l.max_ns),
                if l.receive_before_send > 0 {
                    format!(" ({} frames received before their send time: clocks of two processes)", l.receive_before_send)
                } else {
                    String::new()
                }
            ));
        }
        if let Some(p) = &self.pacing {
            s.push_str(&format!(
                "  paced: target {:.3} Gb/s, sent at {:.3} Gb/s while generating ({:+.2} %)\n",
                p.target_gbps,
                p.sent_gbps,
                (p.sent_gbps / p.target_gbps - 1.0) * 100.0
            ));
        }
        for c in &self.captures {
            s.push_str(&format!(
                "  capture {}: {} of {} packets written ({:.1} MB/s), writer_full {}, not in host memory {}{}\n",
                c.queue,
                c.stats.written_packets,
                c.stats.submitted,
                c.mbytes_per_s,
                c.stats.writer_full,
                c.stats.not_host,
                c.error.as_deref().map(|e| format!(", failed: {e}")).unwrap_or_default()
            ));
        }
        for st in &self.stages {
            s.push_str(&format!(
                "  stage {}: {:.1} ns per packet ({} packets, {:.3} s busy)\n",
                st.stage,
                st.ns_per_packet,
                st.packets,
                st.busy_ns as f64 / 1e9
            ));
        }
        if let Some(r) = &self.reorder {
            s.push_str(&format!(
                "  reorder: {} batches, {} flushed by timeout, {} packets aggregated, {} passed through; {} batches verified, {} bad, {} unchecked (RX bytes count their payload bytes)\n",
                r.batches, r.timeout_batches, r.aggregated_packets, r.passthrough_packets, r.verified_batches, r.bad_batches, r.unchecked_batches
            ));
            if r.verified_chunks > 0 {
                s.push_str(&format!(
                    "  converted samples: {} chunks verified against the frames sent\n",
                    r.verified_chunks
                ));
            }
        }
        for q in &self.queues {
            s.push_str(&format!(
                "  {} {} queue {}: {} packets, {} bytes\n",
                q.interface, q.direction, q.queue, q.packets, q.bytes
            ));
        }
        if !self.flow_ids.is_empty() {
            let ids: Vec<String> = self
                .flow_ids
                .iter()
                .map(|(id, n)| format!("{id}: {n}"))
                .collect();
            s.push_str(&format!("  packets by flow id: {}\n", ids.join(", ")));
        }
    }

    /// The verdict, with the problems of a run that was not lossless.
    fn push_verdict(&self, s: &mut String) {
        match self.verdict {
            Verdict::Lossless if self.rx_work == RxWork::Count => s.push_str(
                "LOSSLESS: every packet sent arrived (counted; contents and order not checked)\n",
            ),
            Verdict::Lossless => {
                s.push_str("LOSSLESS: every packet sent arrived intact and in order\n")
            }
            Verdict::Inconclusive => s.push_str(&format!(
                "INCONCLUSIVE: nothing lost or damaged so far, but {} packets were still in flight at the drain deadline\n",
                self.in_flight
            )),
            Verdict::NotLossless => {
                s.push_str(&format!("NOT LOSSLESS: {} packets lost\n", self.lost));
                for p in &self.problems {
                    s.push_str(&format!("  - {p}\n"));
                }
            }
        }
    }
}

/// Nanoseconds in the unit that fits them, three significant digits (`850 ns`, `3.16 ms`):
/// latencies span decades, and eight-digit nanosecond counts are hard to read. The exact
/// values are in the JSON report.
pub fn duration_text(ns: u64) -> String {
    let units = [(1e9, "s"), (1e6, "ms"), (1e3, "us")];
    let Some(&(scale, unit)) = units.iter().find(|(scale, _)| ns as f64 >= *scale) else {
        return format!("{ns} ns");
    };
    let v = ns as f64 / scale;
    let decimals = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.decimals$} {unit}")
}

#[cfg(test)]
mod duration_text_tests {
    #[test]
    fn durations_read_in_the_unit_that_fits() {
        let cases = [
            (0, "0 ns"),
            (850, "850 ns"),
            (34_496, "34.5 us"),
            (3_155_967, "3.16 ms"),
            (851_455, "851 us"),
            (15_351_807, "15.4 ms"),
            (2_500_000_000, "2.50 s"),
        ];
        for (ns, text) in cases {
            assert_eq!(super::duration_text(ns), text, "{ns} ns");
        }
    }
}
