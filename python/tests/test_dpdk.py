"""DPDK and RDMA from Python, in a wheel built with `--features dpdk,rdma` against this
machine's libraries (`make python-test` builds one; the portable wheel has neither and
skips, visibly). DPDK: frames through a net_ring port (`configs/dpdk_ring.yaml`, EAL with
--no-huge) come back byte for byte."""

import pathlib

import numpy as np
import pytest

import dataplane

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_dpdk_net_ring_from_python():
    if "dpdk" not in dataplane.FEATURES:
        pytest.skip(f"a wheel without DPDK (features {dataplane.FEATURES}): build with --features dpdk,rdma")
    config = (ROOT / "configs" / "dpdk_ring.yaml").read_text()
    with dataplane.DataPlane(config, "dpdk_ring.yaml") as plane:
        tx, rx = plane.tx_queue("ring0", 0), plane.rx_queue("ring0", 0)
        frames = [bytes((k * 7 + i) & 0xFF for i in range(60 + k)) for k in range(32)]
        burst = tx.alloc(len(frames))
        for i, f in enumerate(frames):
            np.frombuffer(burst.buffer(i), np.uint8)[: len(f)] = np.frombuffer(f, np.uint8)
            burst.set_len(i, len(f))
        tx.send(burst, timeout=5.0)
        got = []
        while len(got) < len(frames):
            b = rx.recv(timeout=5.0)
            assert b is not None, f"{len(got)} of {len(frames)} frames came back"
            got += [b.packet(i).tobytes() for i in range(len(b))]
        assert got == frames
        assert plane.stats() is not None


def test_rdma_is_built_in():
    if "rdma" not in dataplane.FEATURES:
        pytest.skip(f"a wheel without RDMA (features {dataplane.FEATURES})")
    # No RDMA device here (Soft-RoCE runs in a VM): the plane says so, not "unsupported".
    config = (ROOT / "configs" / "rdma_loopback.yaml").read_text()
    with pytest.raises(dataplane.Error) as e:
        dataplane.DataPlane(config, "rdma_loopback.yaml")
    assert "feature" not in str(e.value), e.value
