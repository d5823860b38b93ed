"""The Python package against a real data plane (software loopback): every byte through
NumPy, flow steering, TX bursts filled from NumPy arrays, errors as exceptions."""

import ctypes
import gc
import io
import pathlib

import numpy as np
import pytest

import dataplane

# The shipped configuration file, shared with the Rust examples.
CONFIG = (pathlib.Path(__file__).resolve().parents[2] / "configs" / "loopback_steering.yaml").read_text()


def udp_frame(dport: int, payload: np.ndarray) -> np.ndarray:
    """Ethernet/IPv4/UDP header (checksums left zero; software steering reads ports)."""
    h = np.zeros(42, dtype=np.uint8)
    h[12:14] = (0x08, 0x00)
    h[14] = 0x45
    total = 28 + len(payload)
    h[16:18] = (total >> 8, total & 0xFF)
    h[22] = 64
    h[23] = 17
    h[26:30] = (10, 0, 0, 1)
    h[30:34] = (10, 0, 0, 2)
    h[34:36] = (0x10, 0x00)
    h[36:38] = (dport >> 8, dport & 0xFF)
    ulen = 8 + len(payload)
    h[38:40] = (ulen >> 8, ulen & 0xFF)
    return np.concatenate([h, payload])


def send(tx, frames):
    burst = tx.alloc(len(frames))
    for i, f in enumerate(frames):
        buf = np.frombuffer(burst.buffer(i), dtype=np.uint8)  # writable, zero-copy
        buf[: len(f)] = f
        del buf
        burst.set_len(i, len(f))
    tx.send(burst, timeout=5.0)
    assert len(burst) == 0, "a sent burst is empty"


def receive(rx, count):
    got = []
    while len(got) < count:
        burst = rx.recv(timeout=5.0)
        assert burst is not None, f"{len(got)} of {count} arrived"
        for i in range(len(burst)):
            p = burst.packet(i)
            got.append((np.frombuffer(p, dtype=np.uint8).copy(), burst.flow_id(i)))
    return got


def test_round_trip_every_byte_and_steering():
    rng = np.random.default_rng(7)
    with dataplane.DataPlane(CONFIG, "test.yaml") as plane:
        assert plane.interfaces() == [("loop0", [0, 1], [0])]
        tx = plane.tx_queue("loop0", 0)
        q0, q1 = plane.rx_queue("loop0", 0), plane.rx_queue("loop0", 1)
        frames_a = [udp_frame(5000, rng.integers(0, 256, 100 + i, dtype=np.uint8)) for i in range(64)]
        frames_b = [udp_frame(6000, rng.integers(0, 256, 1000, dtype=np.uint8)) for _ in range(16)]
        for k in range(0, 64, 32):
            send(tx, frames_a[k : k + 32])
        send(tx, frames_b)
        got_a, got_b = receive(q0, 64), receive(q1, 16)
        for (data, flow), want in zip(got_a, frames_a):
            assert flow == 10 and np.array_equal(data, want)
        for (data, flow), want in zip(got_b, frames_b):
            assert flow == 20 and np.array_equal(data, want)
        # A rule added at run time, then removed.
        handle = plane.add_flow("loop0", queue=1, flow_id=30, udp_dst=7000)
        send(tx, [udp_frame(7000, np.arange(50, dtype=np.uint8))])
        (data, flow), = receive(q1, 1)
        assert flow == 30 and np.array_equal(data[42:], np.arange(50, dtype=np.uint8))
        plane.remove_flow(handle)
        stats = plane.stats()
        assert stats["tx_packets"] == 81 and stats["rx_packets"] == 81
        assert stats["drops"]["no_flow"] == 0


def test_a_running_plane_changes_its_queues_and_rules():
    # q1 goes and port 6000 moves to q0; then q1 comes back with it.
    one_queue = "\n".join(
        line.replace("queue, id: 1}", "queue, id: 0}") for line in CONFIG.splitlines() if "name: q1" not in line
    )
    with dataplane.DataPlane(CONFIG, "test.yaml") as plane:
        tx, q0 = plane.tx_queue("loop0", 0), plane.rx_queue("loop0", 0)
        report = plane.change(one_queue)
        assert report["added"] == 0 and report["rules"] == ["loop0"]
        assert [r[:3] for r in report["removed"]] == [("loop0", "rx", 1)] and report["removed"][0][5]
        send(tx, [udp_frame(6000, np.arange(20, dtype=np.uint8))])
        (data, flow), = receive(q0, 1)
        assert flow == 20 and np.array_equal(data[42:], np.arange(20, dtype=np.uint8))
        assert plane.change(CONFIG)["added"] == 1
        send(tx, [udp_frame(6000, np.arange(30, dtype=np.uint8))])
        (data, flow), = receive(plane.rx_queue("loop0", 1), 1)
        assert flow == 20 and len(data) == 72
        with pytest.raises(dataplane.Error, match=r"queue 0: changed \(memory_regions\)"):
            plane.change(CONFIG.replace("num_bufs: 4096", "num_bufs: 2048"))


def test_a_running_plane_takes_a_new_region_and_a_queue_in_it():
    # Region `side` and TX queue 1 in it, added live; a frame from it reaches q0.
    region = "    - {name: bufs, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}\n"
    queue = "queues: [{name: tq, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [bufs]}]"
    assert region in CONFIG and queue in CONFIG
    grown = CONFIG.replace(
        region, region + "    - {name: side, kind: host, affinity: 0, num_bufs: 700, buf_size: 2048}\n"
    ).replace(
        queue,
        queue[:-1] + ", {name: t1, id: 1, cpu_core: 0, batch_size: 32, memory_regions: [side]}]",
    )
    with dataplane.DataPlane(CONFIG, "test.yaml") as plane:
        q0 = plane.rx_queue("loop0", 0)
        report = plane.change(grown)
        assert report["added"] == 1 and report["regions"] == [("side", "added")]
        t1 = plane.tx_queue("loop0", 1)
        held = t1.alloc(700)  # the whole new region
        del held
        send(t1, [udp_frame(5000, np.arange(16, dtype=np.uint8))])
        (data, flow), = receive(q0, 1)
        assert flow == 10 and np.array_equal(data[42:], np.arange(16, dtype=np.uint8))


def test_views_are_zero_copy_and_block_sending():
    with dataplane.DataPlane(CONFIG) as plane:
        tx = plane.tx_queue("loop0", 0)
        burst = tx.alloc(1)
        view = memoryview(burst.buffer(0))
        assert not view.readonly and len(view) == 2048
        with pytest.raises(BufferError):
            tx.send(burst)
        view.release()
        burst.set_len(0, 60)
        with pytest.raises(ValueError):
            burst.set_len(0, 5000)
        with pytest.raises(IndexError):
            burst.packet(1)
        tx.send(burst)


def test_dlpack_views_without_copying():
    with dataplane.DataPlane(CONFIG) as plane:
        tx, rx = plane.tx_queue("loop0", 0), plane.rx_queue("loop0", 0)
        frame = udp_frame(5000, np.arange(200, dtype=np.uint8))
        send(tx, [frame])
        burst = rx.recv(timeout=5.0)
        assert burst is not None and len(burst) == 1
        p = burst.packet(0)
        assert p.__dlpack_device__() == (1, 0)
        arr = np.from_dlpack(p)
        assert arr.dtype == np.uint8 and np.array_equal(arr, frame)
        # The array is the packet's memory, not a copy.
        assert arr.__array_interface__["data"][0] == np.frombuffer(p, np.uint8).__array_interface__["data"][0]
        # The buffer protocol on every CPython from 3.9: a received frame is read-only.
        assert isinstance(p, dataplane.Packet)
        view = memoryview(p)
        assert view.readonly and view.tobytes() == frame.tobytes()
        with pytest.raises((BufferError, TypeError), match="read-write|read-only"):
            io.BytesIO(b"x").readinto(p)  # asks for a writable buffer: refused
        view.release()
        # A TX burst cannot go while a DLPack array of it lives.
        out = tx.alloc(1)
        held = np.from_dlpack(out.buffer(0))
        out.set_len(0, 60)
        with pytest.raises(BufferError):
            tx.send(out)
        del held
        gc.collect()
        tx.send(out)


def capsule_name(capsule) -> bytes:
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype, get.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get(capsule)


def test_dlpack_1_0_says_what_is_read_only():
    with dataplane.DataPlane(CONFIG) as plane:
        tx, rx = plane.tx_queue("loop0", 0), plane.rx_queue("loop0", 0)
        frame = udp_frame(5000, np.arange(64, dtype=np.uint8))
        send(tx, [frame])
        burst = rx.recv(timeout=5.0)
        p = burst.packet(0)
        # Consumers that ask for DLPack 1.0 get the versioned capsule; others the old one.
        assert capsule_name(p.__dlpack__(max_version=(1, 0))) == b"dltensor_versioned"
        assert capsule_name(p.__dlpack__()) == b"dltensor"
        assert capsule_name(p.__dlpack__(max_version=(0, 8))) == b"dltensor"
        with pytest.raises(BufferError, match="not \\(2, 0\\)"):
            p.__dlpack__(dl_device=(2, 0))
        with pytest.raises(BufferError, match="in place"):
            p.__dlpack__(copy=True)
        asked = AskedFor(p)
        arr = np.from_dlpack(asked)
        assert np.array_equal(arr, frame)
        if tuple(asked.kwargs.get("max_version") or (0, 0)) < (1, 0):
            pytest.skip(f"NumPy {np.__version__} asks for unversioned DLPack: no read-only flag to honour")
        # NumPy honours the flag: a received frame is read-only, a TX buffer writable
        # (over the unversioned capsule NumPy 2.3 and later mark both read-only).
        assert not arr.flags.writeable
        out = tx.alloc(1)
        buf = np.from_dlpack(out.buffer(0))
        assert buf.flags.writeable
        buf[:4] = (1, 2, 3, 4)
        assert bytes(memoryview(out.buffer(0))[:4]) == b"\x01\x02\x03\x04"
        del arr, buf, p, asked
        gc.collect()


class AskedFor:
    """Passes DLPack through and notes what the consumer asked `__dlpack__` for."""

    def __init__(self, view):
        self.view, self.kwargs = view, None

    def __dlpack_device__(self):
        return self.view.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.kwargs = kwargs
        return self.view.__dlpack__(**kwargs)


def test_frames_of_equal_packets_are_one_two_dimensional_view():
    with dataplane.DataPlane(CONFIG) as plane:
        tx, rx = plane.tx_queue("loop0", 0), plane.rx_queue("loop0", 0)
        frames = [udp_frame(5000, np.full(100, k, dtype=np.uint8)) for k in range(8)]
        send(tx, frames)
        got = []
        while sum(len(b) for b in got) < len(frames):
            b = rx.recv(timeout=5.0)
            assert b is not None
            got.append(b)
        for burst in got:
            view = burst.frames()
            assert view.shape == (len(burst), len(frames[0]))
            assert abs(view.stride) >= len(frames[0])
            arr = np.from_dlpack(view)
            assert arr.shape == view.shape
            for i in range(len(burst)):
                # Each row is packet i's memory, in place.
                assert np.array_equal(arr[i], np.frombuffer(burst.packet(i), np.uint8))
                row = arr[i].__array_interface__["data"][0]
                assert row == np.from_dlpack(burst.packet(i)).__array_interface__["data"][0]
            assert burst.reorder() is None  # no reorder made this burst
        # Packets of different lengths have no two-dimensional view.
        send(tx, [udp_frame(5000, np.zeros(10, np.uint8)), udp_frame(5000, np.zeros(20, np.uint8))])
        mixed = rx.recv(timeout=5.0)
        if len(mixed) == 2:
            with pytest.raises(ValueError, match="packet 1 breaks the even layout"):
                mixed.frames()
        held = got[0].frames()
        with pytest.raises(BufferError):
            tx.send(got[0])  # a view keeps a burst from being sent
        del held, arr
        gc.collect()


REORDER = """
dataplane:
  cfg:
    version: 1
    stream_type: raw
    master_core: 0
    loopback: sw
    memory_regions:
    - {name: tx, kind: host, affinity: 0, num_bufs: 256, buf_size: 256}
    - {name: rx, kind: host, affinity: 0, num_bufs: 256, buf_size: 256}
    - {name: batches, kind: host, affinity: 0, num_bufs: 4, buf_size: 4096}
    interfaces:
    - name: loop0
      address: loopback
      tx:
        queues: [{name: tq, id: 0, cpu_core: 0, batch_size: 16, memory_regions: [tx]}]
      rx:
        flow_isolation: true
        queues: [{name: rq, id: 0, cpu_core: 0, batch_size: 16, timeout_us: 200000, memory_regions: [rx]}]
        flows:
        - {name: samples, id: 7, action: {type: queue, id: 0}, match: {udp_dst: 5000}}
        reorder_configs:
        - name: by_seq
          reorder_type: cpu
          memory_region: batches
          payload_byte_offset: 42
          flow_ids: [7]
          method:
            seq_packets_per_batch:
              sequence_number: {bit_offset: 336, bit_width: 16}
              packets_per_batch: 8
"""


def test_reorder_information_comes_with_the_aggregate_burst():
    with dataplane.DataPlane(REORDER) as plane:
        tx, rx = plane.tx_queue("loop0", 0), plane.rx_queue("loop0", 0)
        # Sequence numbers 7, 6, ..., 0: one batch of 8, shuffled.
        frames = [udp_frame(5000, np.array([0, seq] + [seq] * 30, np.uint8)) for seq in range(7, -1, -1)]
        send(tx, frames)
        burst = rx.recv(timeout=5.0)
        assert burst is not None
        info = burst.reorder()
        assert info == {
            "name": "by_seq",
            "batch_id": 0,
            "source_packets": 8,
            "payload_bytes": info["payload_bytes"],
            "packets_per_batch": 8,
            "slot_bytes": info["slot_bytes"],
            "aggregate_len": 8 * info["slot_bytes"],
            "timed_out": False,
        }
        assert info["payload_bytes"] == 8 * 32


def test_errors_are_exceptions_with_the_loaders_messages():
    with pytest.raises(dataplane.Error, match=r"(?s)bad\.yaml.*line 1, column 12"):
        dataplane.DataPlane("dataplane: [", "bad.yaml")
    plane = dataplane.DataPlane(CONFIG)
    rx = plane.rx_queue("loop0", 0)
    tx = plane.tx_queue("loop0", 0)
    with pytest.raises(ValueError, match="taken"):
        plane.rx_queue("loop0", 0)
    plane.shutdown()
    plane.shutdown()  # twice is fine
    with pytest.raises(dataplane.Stopped):
        rx.recv(timeout=60.0)  # ends at once: the plane is gone
    burst = tx.alloc(1)  # the pool outlives the plane; sending does not
    with pytest.raises(dataplane.Stopped):
        tx.send(burst, timeout=60.0)
    with pytest.raises(dataplane.Stopped):
        plane.stats()


def test_configuration_files_have_the_same_limits_as_the_cli(tmp_path):
    import os
    import time

    good = tmp_path / "good.yaml"
    good.write_text(CONFIG)
    dataplane.DataPlane.from_file(str(good)).shutdown()
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (20 * 1000 * 1000))
    for path, why in [
        ("/dev/zero", "not a regular file"),
        (str(fifo), "a FIFO"),
        (str(big), "limited to"),
    ]:
        started = time.monotonic()
        with pytest.raises(dataplane.Error, match=why):
            dataplane.DataPlane.from_file(path)
        # A bound on hanging, not a speed measurement.
        assert time.monotonic() - started < 30, path
    with pytest.raises(dataplane.Error, match="limited to"):
        dataplane.DataPlane("#" * (20 * 1000 * 1000))


def test_bad_counts_and_timeouts_are_errors_and_keep_the_burst():
    import math

    plane = dataplane.DataPlane(CONFIG)
    rx = plane.rx_queue("loop0", 0)
    tx = plane.tx_queue("loop0", 0)
    with pytest.raises(dataplane.Error, match="regions hold 4096"):
        tx.alloc(2**40)
    burst = tx.alloc(1)
    buf = np.frombuffer(burst.buffer(0), dtype=np.uint8)
    frame = udp_frame(5000, np.arange(16, dtype=np.uint8))
    buf[: len(frame)] = frame
    del buf
    burst.set_len(0, len(frame))
    with pytest.raises(ValueError, match="NaN"):
        tx.send(burst, timeout=math.nan)
    assert len(burst) == 1, "a refused send keeps the burst"
    tx.send(burst, timeout=math.inf)  # waits as long as it takes: sent at once here
    got = rx.recv(timeout=30.0)
    assert got is not None and len(got) == 1
    plane.shutdown()


SPLIT = """
dataplane:
  cfg:
    version: 1
    stream_type: raw
    master_core: 0
    loopback: "sw"
    memory_regions:
    - {name: txb, kind: host, affinity: 0, num_bufs: 256, buf_size: 1024}
    - {name: hdr, kind: host, affinity: 0, num_bufs: 256, buf_size: 64}
    - {name: pay, kind: host, affinity: 0, num_bufs: 256, buf_size: 1024}
    interfaces:
    - name: loop0
      address: loopback
      tx: {queues: [{name: tq, id: 0, cpu_core: 0, batch_size: 16, memory_regions: [txb]}]}
      rx:
        hardware_timestamps: true
        queues:
        - {name: rq, id: 0, cpu_core: 0, batch_size: 16, timeout_us: 100, memory_regions: [hdr, pay]}
        flows:
        - {name: a, id: 7, action: {type: queue, id: 0}, match: {udp_dst: 5000}}
        - {name: b, id: 8, action: {type: queue, id: 0}, match: {udp_dst: 6000}}
"""


def test_every_segment_and_the_burst_arrays():
    """A header-data split queue: each packet's headers (segment 0, 64 bytes) and payload
    (segment 1) as views; flow ids, timestamps and lengths of the whole burst as arrays."""
    frames = [udp_frame(5000 if i % 2 == 0 else 6000, np.full(100 + i, i, dtype=np.uint8)) for i in range(8)]
    with dataplane.DataPlane(SPLIT, "split.yaml") as plane:
        tx, rx = plane.tx_queue("loop0", 0), plane.rx_queue("loop0", 0)
        send(tx, frames)
        seen = 0
        while seen < len(frames):
            burst = rx.recv(timeout=5.0)
            assert burst is not None, f"{seen} of {len(frames)} arrived"
            ids = np.frombuffer(burst.flow_ids(), dtype=np.uint32)
            stamps = np.frombuffer(burst.timestamps_ns(), dtype=np.uint64)
            lengths = np.frombuffer(burst.lengths(), dtype=np.uint64)
            assert len(ids) == len(stamps) == len(lengths) == len(burst)
            for i in range(len(burst)):
                want = frames[seen]
                assert burst.segments(i) == 2
                head = np.frombuffer(burst.segment(i, 0), dtype=np.uint8)
                body = np.frombuffer(burst.segment(i, 1), dtype=np.uint8)
                assert np.array_equal(np.concatenate([head, body]), want)
                assert len(head) == 64 and lengths[i] == len(want)
                assert ids[i] == burst.flow_id(i) == (7 if seen % 2 == 0 else 8)
                assert stamps[i] == burst.timestamp_ns(i) > 0
                with pytest.raises(IndexError):
                    burst.segment(i, 2)
                del head, body
                seen += 1
            assert all(np.diff(stamps.astype(np.int64)) >= 0), "stamps in receive order"
