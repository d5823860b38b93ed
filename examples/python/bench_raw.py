#!/usr/bin/env python3
"""What an application reaches when it touches every burst from Python: one thread sends
frames on TX queue 0 of the first interface with one (each buffer's bytes set from a NumPy
template once, then only the length per frame), another receives on every RX queue and
reads each packet through a zero-copy NumPy view (its length and first header byte).

    python3 examples/python/bench_raw.py configs/sw_loopback.yaml --seconds 5 [--batch 256]

Prints one JSON line: packets and Mpps sent and received, and whether every frame sent
arrived.
"""

import argparse
import json
import threading
import time

import numpy as np

import dataplane


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--frame", type=int, default=64, help="frame bytes")
    args = ap.parse_args()

    plane = dataplane.DataPlane.from_file(args.config)
    ifaces = plane.interfaces()
    tx_iface = next(name for name, _, tx in ifaces if tx)
    tx = plane.tx_queue(tx_iface, 0)
    rxs = [plane.rx_queue(name, q) for name, rx, _ in ifaces for q in rx]

    template = np.zeros(args.frame, dtype=np.uint8)
    template[12:14] = (0x08, 0x00)  # IPv4 EtherType; the rest is a plain pattern
    template[14:] = np.arange(args.frame - 14, dtype=np.uint8)
    stop = threading.Event()
    # Set by the sender after its last count: only then may the receiver compare counts
    # and leave (a send that returned but is not counted yet would look like a loss).
    sender_done = threading.Event()
    counts = {"sent": 0, "received": 0, "bad": 0}

    def sender() -> None:
        while not stop.is_set():
            try:
                burst = tx.alloc(args.batch)
            except dataplane.Error:
                time.sleep(0)  # buffers still in flight
                continue
            for i in range(len(burst)):
                np.frombuffer(burst.buffer(i), dtype=np.uint8)[: args.frame] = template
                burst.set_len(i, args.frame)
            n = len(burst)
            try:
                tx.send(burst, timeout=1.0)
                counts["sent"] += n
            except dataplane.Error:
                pass
        sender_done.set()

    def receiver() -> None:
        while True:
            got = False
            for rx in rxs:
                try:
                    burst = rx.recv(timeout=0.0)
                except dataplane.Stopped:
                    return
                if burst is None:
                    continue
                got = True
                for i in range(len(burst)):
                    view = np.frombuffer(burst.packet(i), dtype=np.uint8)
                    if len(view) != args.frame or view[12] != 0x08:
                        counts["bad"] += 1
                    counts["received"] += 1
            if not got and sender_done.is_set() and counts["received"] >= counts["sent"]:
                return

    threads = [threading.Thread(target=sender), threading.Thread(target=receiver)]
    start = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(args.seconds)
    stop.set()
    threads[0].join()
    deadline = time.monotonic() + 5
    while counts["received"] < counts["sent"] and time.monotonic() < deadline:
        time.sleep(0.01)
    elapsed = time.monotonic() - start
    plane.shutdown()
    threads[1].join()
    print(
        json.dumps(
            {
                "seconds": round(elapsed, 3),
                "frame": args.frame,
                "sent": counts["sent"],
                "received": counts["received"],
                "bad": counts["bad"],
                "tx_mpps": counts["sent"] / elapsed / 1e6,
                "rx_mpps": counts["received"] / elapsed / 1e6,
                "lossless": counts["received"] == counts["sent"] and counts["bad"] == 0,
            }
        )
    )
    if counts["received"] != counts["sent"] or counts["bad"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
