#!/usr/bin/env python3
"""How far the DRAFAS client's seconds slide against a fixed clock (prints figures; not a test).

The author's load client (tu-nv/drafas client/client.py:279-293) starts each trace line's
requests and then `await asyncio.sleep(delay)`, one line after the other, never reading a clock:
every sleep's lateness adds up. Prometheus scrapes each pod at a phase fixed against the clock, so
the client's requests slide against the scrapes by that lateness per line (the drift of
`testbed.sim.measure.Measurement.phase_drift`). This runs the same loop: LINES sleeps of PERIOD
seconds, on an idle event loop and beside the imgcls client's work (four 512x512 JPEG encodes in
the loop per request, client.py:207-220, at 10 requests a second), and prints each sleep's mean
lateness, three times each.

    python3 bench/client_drift.py [--lines 40] [--period 0.25]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import time


async def lateness(lines: int, period: float, jpeg_work: bool) -> float:
    """Mean seconds each `asyncio.sleep(period)` of a line-by-line loop overshoots."""
    stop = asyncio.Event()

    async def requests() -> None:
        from PIL import Image

        image = Image.new("RGB", (512, 512), (120, 30, 200))
        while not stop.is_set():
            await asyncio.sleep(0.1)
            for _ in range(4):
                image.save(io.BytesIO(), format="JPEG")

    work = asyncio.create_task(requests()) if jpeg_work else None
    started = time.monotonic()
    for _ in range(lines):
        await asyncio.sleep(period)
    late = (time.monotonic() - started - lines * period) / lines
    stop.set()
    if work is not None:
        await work
    return late


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=40)
    ap.add_argument("--period", type=float, default=0.25)
    args = ap.parse_args()
    for jpeg_work, label in ((False, "idle loop"), (True, "beside 4 JPEG encodes x 10/s")):
        late = [asyncio.run(lateness(args.lines, args.period, jpeg_work)) for _ in range(3)]
        print(f"{label:30s} each sleep late by " + ", ".join(f"{1000 * x:.2f} ms" for x in late))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
