//! Configurations built in code rather than read from YAML ([`ConfigBuilder`]), for
//! applications that make their queues themselves. [`ConfigBuilder::build`] runs the same
//! validation as the loader; its errors name the key path (`interfaces[0].rx.queues[1]...`)
//! instead of a line. The raw engines (software loopback, DPDK) are built this way;
//! socket and RDMA interfaces, whose addresses carry their settings, come from YAML.
//!
//! ```
//! use dataplane::config::{ConfigBuilder, InterfaceBuilder, MemoryKind, MemoryRegionConfig, QueueConfig};
//! let loaded = ConfigBuilder::loopback()
//!     .region(MemoryRegionConfig::new("bufs", MemoryKind::Host, 4096, 2048))
//!     .interface(
//!         InterfaceBuilder::new("loop0", "loopback")
//!             .tx_queue(QueueConfig::new("tq", 0, 0, 32, &["bufs"]))
//!             .rx_queue(QueueConfig::new("rq", 0, 0, 32, &["bufs"]).with_timeout_us(100)),
//!     )
//!     .build()
//!     .unwrap();
//! let plane = dataplane::DataPlane::start(&loaded.config).unwrap();
//! plane.shutdown().unwrap();
//! ```

use super::diag::Diagnostics;
use super::model::*;
use super::yaml::Location;
use super::{ConfigError, Loaded, validate};

/// Builds a [`Config`] for a raw engine.
#[derive(Clone, Debug)]
pub struct ConfigBuilder {
    config: Config,
}

impl ConfigBuilder {
    fn new(engine: EngineKind) -> Self {
        Self {
            config: Config {
                version: 1,
                master_core: 0,
                stream_type: StreamType::Raw,
                engine,
                log_level: "warn".into(),
                debug: false,
                gpu_stage: StageMode::Copy,
                metrics: None,
                memory_regions: Vec::new(),
                interfaces: Vec::new(),
                bench: BenchConfig::default(),
            },
        }
    }

    /// The in-process software loopback (`loopback: "sw"`).
    pub fn loopback() -> Self {
        Self::new(EngineKind::Loopback)
    }

    /// DPDK poll-mode drivers (PCI addresses or vdev strings as interface addresses).
    pub fn dpdk() -> Self {
        Self::new(EngineKind::Dpdk)
    }

    /// The core of the stats thread (and DPDK's main lcore); 0 by default.
    pub fn master_core(mut self, core: u32) -> Self {
        self.config.master_core = core;
        self
    }

    /// How host bytes reach GPU memory where the engine cannot write it.
    pub fn gpu_stage(mut self, mode: StageMode) -> Self {
        self.config.gpu_stage = mode;
        self
    }

    /// Adds a memory region.
    pub fn region(mut self, region: MemoryRegionConfig) -> Self {
        self.config.memory_regions.push(region);
        self
    }

    /// Adds an interface.
    pub fn interface(mut self, interface: InterfaceBuilder) -> Self {
        self.config.interfaces.push(interface.interface);
        self
    }

    /// Validates the configuration as the loader does (against this machine's cores and
    /// memory); warnings come back with it.
    pub fn build(self) -> Result<Loaded, ConfigError> {
        let mut d = Diagnostics::default();
        validate::check(
            &mut d,
            &self.config,
            &crate::affinity::core_is_usable,
            super::host_memory_bytes(),
        );
        if d.has_errors() {
            return Err(d.into_error("built configuration"));
        }
        Ok(Loaded {
            config: self.config,
            warnings: d.into_vec(),
        })
    }
}

/// Builds one interface of a [`ConfigBuilder`].
#[derive(Clone, Debug)]
pub struct InterfaceBuilder {
    interface: InterfaceConfig,
}

impl InterfaceBuilder {
    /// An interface named `name` at `address` (`loopback`, a PCI address or a vdev).
    pub fn new(name: &str, address: &str) -> Self {
        Self {
            interface: InterfaceConfig {
                name: name.into(),
                address: address.into(),
                socket: None,
                roce: None,
                rx: None,
                tx: None,
                faults: None,
                multicast: Vec::new(),
                location: Location::default(),
            },
        }
    }

    fn rx(&mut self) -> &mut RxConfig {
        self.interface.rx.get_or_insert_with(RxConfig::empty)
    }

    /// Adds an RX queue.
    pub fn rx_queue(mut self, queue: QueueConfig) -> Self {
        self.rx().queues.push(queue);
        self
    }

    /// Adds a TX queue.
    pub fn tx_queue(mut self, queue: QueueConfig) -> Self {
        self.interface
            .tx
            .get_or_insert_with(|| TxConfig {
                accurate_send: false,
                descriptors: None,
                queues: Vec::new(),
                flows: Vec::new(),
            })
            .queues
            .push(queue);
        self
    }

    /// Adds an RX flow rule.
    pub fn flow(mut self, flow: FlowConfig) -> Self {
        self.rx().flows.push(flow);
        self
    }

    /// Frames no rule matches are dropped (`flow_isolation: true`) rather than delivered
    /// to the first queue.
    pub fn flow_isolation(mut self, on: bool) -> Self {
        self.rx().flow_isolation = on;
        self
    }
}

impl QueueConfig {
    /// A queue built in code: `batch_size` packets per burst, buffers from `regions` (one,
    /// or two for a header-data split), no burst timeout.
    pub fn new(name: &str, id: u16, cpu_core: u32, batch_size: u32, regions: &[&str]) -> Self {
        Self {
            name: name.into(),
            id,
            cpu_core,
            batch_size,
            timeout_us: 0,
            ring_packets: super::model::DEFAULT_RING_PACKETS,
            memory_regions: regions.iter().map(|r| (*r).to_owned()).collect(),
            tx_eth_src: false,
            pacing_mbps: 0,
            capture: None,
            stage_core: None,
            copy_cores: Vec::new(),
            delivery: Delivery::Ring,
            protocol: None,
            location: Location::default(),
        }
    }

    /// With its bursts taken by the worker's handler (`delivery: handler`).
    pub fn with_delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }

    /// With a ring of `packets` packets' worth of full bursts between worker and
    /// application (`ring_packets`).
    pub fn with_ring_packets(mut self, packets: u32) -> Self {
        self.ring_packets = packets;
        self
    }

    /// With a partial burst delivered after `us` microseconds.
    pub fn with_timeout_us(mut self, us: u64) -> Self {
        self.timeout_us = us;
        self
    }

    /// RX: with its stage (if it has one) on a worker of its own on `core`.
    pub fn with_stage_core(mut self, core: u32) -> Self {
        self.stage_core = Some(core);
        self
    }
}

impl FlowConfig {
    /// A rule sending packets that match `matches` to queue `queue`, marked `id`.
    pub fn to_queue(name: &str, id: u32, queue: u16, matches: FlowMatch) -> Self {
        Self {
            name: name.into(),
            id,
            queue_ids: vec![queue],
            matches,
            transforms: Vec::new(),
            location: Location::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_key_path() {
        let e = ConfigBuilder::loopback()
            .region(MemoryRegionConfig::new(
                "bufs",
                MemoryKind::Host,
                1024,
                2048,
            ))
            .interface(
                InterfaceBuilder::new("loop0", "loopback").rx_queue(QueueConfig::new(
                    "rq",
                    0,
                    0,
                    32,
                    &["nosuch"],
                )),
            )
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("interfaces[0].rx.queues[0].memory_regions") && e.contains("nosuch"),
            "{e}"
        );
    }
}
