"""Type stubs of the `dataplane` extension module (maturin ships them with `py.typed`)."""

import array
from types import TracebackType
from typing import Any, Dict, List, Optional, Tuple, Type, final

from typing_extensions import disjoint_base

__all__ = ["FEATURES", "DataPlane", "RxQueue", "TxQueue", "Burst", "_Packet", "Packet", "Frames", "FlowHandle", "Error", "Stopped"]

FEATURES: Tuple[str, ...]
"""What this build runs beyond the software loopback and kernel sockets: `cuda` always
(loaded at run time), `dpdk` and `rdma` in a build made with those features."""

class Error(Exception):
    """A data plane error (configuration, start, queue)."""

class Stopped(Error):
    """The plane was shut down; nothing more comes or goes on this queue."""

@final
class FlowHandle:
    """A flow rule added at run time, for `DataPlane.remove_flow`."""

@disjoint_base
class _Packet:
    """A zero-copy view of one segment of one packet: `__cuda_array_interface__` for GPU
    memory, DLPack for both. Keeps its burst alive and unsendable while it exists."""

    def __len__(self) -> int: ...
    def tobytes(self) -> bytes: ...
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def __dlpack__(
        self,
        stream: Optional[Any] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...


@final
class Packet(_Packet):
    """`_Packet` with the buffer protocol for host memory (`memoryview(p)`,
    `numpy.frombuffer(p, dtype)`)."""

@final
class Frames:
    """One segment of every packet of a burst as a two-dimensional uint8 array (packets x
    bytes), in place: DLPack for host and GPU memory, `__cuda_array_interface__` for GPU
    memory. Keeps its burst alive and unsendable while it exists."""

    @property
    def shape(self) -> Tuple[int, int]: ...
    @property
    def stride(self) -> int:
        """Bytes from one packet to the next (negative when buffers come in falling order)."""
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def __dlpack__(
        self,
        stream: Optional[Any] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...

@final
class Burst:
    """Packets received together, or buffers to send together."""

    def __len__(self) -> int: ...
    def packet(self, i: int) -> Packet:
        """Packet `i`'s frame (its first segment), read-only."""
    def segment(self, i: int, segment: int) -> Packet:
        """Segment `segment` of packet `i`, read-only (header-data split: 0 headers, 1 payload)."""
    def segments(self, i: int) -> int:
        """How many segments packet `i` has."""
    def buffer(self, i: int) -> Packet:
        """Packet `i`'s whole buffer, writable; set the frame's length with `set_len`."""
    def set_len(self, i: int, length: int) -> None: ...
    def flow_id(self, i: int) -> int: ...
    def timestamp_ns(self, i: int) -> int: ...
    def flow_ids(self) -> array.array:
        """Every packet's flow id (`array('I')`)."""
    def timestamps_ns(self) -> array.array:
        """Every packet's receive time in ns, 0 when not stamped (`array('Q')`)."""
    def lengths(self) -> array.array:
        """Every packet's length over all its segments (`array('Q')`)."""
    def frames(self, segment: int = 0) -> Frames:
        """Segment `segment` of every packet as one 2-D view, where the layout allows it
        (one region, one length, evenly spaced buffers); else `ValueError`."""
    def reorder(self) -> Optional[Dict[str, Any]]:
        """What a reorder put into this aggregate burst (name, batch_id, source_packets,
        payload_bytes, packets_per_batch, slot_bytes, aggregate_len, timed_out), or None."""

@final
class RxQueue:
    def poll(self) -> Optional[Burst]:
        """The next burst if one is ready, else None."""
    def recv(self, timeout: float = 1.0) -> Optional[Burst]:
        """The next burst, waiting up to `timeout` seconds (None when none came)."""

@final
class TxQueue:
    def alloc(self, count: int) -> Burst:
        """A burst of `count` empty buffers to fill."""
    def send(self, burst: Burst, timeout: float = 1.0) -> None:
        """Sends `burst` (it is empty afterwards), waiting up to `timeout` for room."""

@final
class DataPlane:
    """A running data plane, started from a YAML configuration."""

    def __new__(cls, yaml: str, name: str = "<string>") -> "DataPlane": ...
    @staticmethod
    def from_file(path: str) -> "DataPlane": ...
    def interfaces(self) -> List[Tuple[str, List[int], List[int]]]:
        """Per interface: its name, RX queue ids and TX queue ids."""
    def rx_queue(self, interface: str, queue: int) -> RxQueue: ...
    def tx_queue(self, interface: str, queue: int) -> TxQueue: ...
    def add_flow(
        self,
        interface: str,
        queue: int,
        flow_id: int = 0,
        udp_src: Optional[int] = None,
        udp_dst: Optional[int] = None,
    ) -> FlowHandle: ...
    def remove_flow(self, handle: FlowHandle) -> None: ...
    def change(self, yaml: str, name: str = "change.yaml") -> Dict[str, Any]:
        """Changes the running plane to `yaml` while traffic flows, or raises `Error`
        naming what needs a restart: `{"added", "removed", "rules", "regions", "seconds"}`."""
    def stats(self) -> Dict[str, Any]: ...
    def shutdown(self) -> None: ...
    def __enter__(self) -> "DataPlane": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
