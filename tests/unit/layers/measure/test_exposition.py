"""`/metrics` is written off the event loop (issue 20, item 10): at the series cap the text is
~1.4 MB and writing it on the loop held every request up to 0.35 s per scrape."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from levergate.config import MetricsSettings
from levergate.layers.measure.prometheus import Telemetry


class Witness(Collector):
    """Notes the thread it is collected on, and how many collections overlap."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        self.threads.append(threading.get_ident())
        threading.Event().wait(0.01)  # a slow collection: do others overlap it?
        with self.lock:
            self.running -= 1
        yield GaugeMetricFamily("witness", "Where the scrape ran.", value=1.0)


async def test_the_exposition_is_written_in_a_worker_thread_one_scrape_at_a_time() -> None:
    telemetry = Telemetry(MetricsSettings())
    witness = Witness()
    telemetry.registry.register(witness)
    witness.threads.clear()  # registering collected once, on this thread
    loop_thread = threading.get_ident()
    texts = await asyncio.gather(*(telemetry.exposition() for _ in range(4)))
    assert all(b"witness 1.0" in text for text in texts)
    assert b"levergate_in_flight" in texts[0]
    assert len(witness.threads) == 4
    assert loop_thread not in witness.threads
    assert witness.most == 1
