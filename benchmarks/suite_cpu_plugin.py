"""The pytest plugin of ``benchmarks/suite_cpu.py``: one JSON line per test in the file
``SUITE_CPU_RECORDS`` names, with its seconds and the share of the machine's cores busy meanwhile."""

import json
import os
import time

import pytest
from suite_cpu import cpu_ticks


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start, (total, idle) = time.perf_counter(), cpu_ticks()
    yield
    seconds, (total_after, idle_after) = time.perf_counter() - start, cpu_ticks()
    busy = 1 - (idle_after - idle) / max(total_after - total, 1)
    with open(os.environ["SUITE_CPU_RECORDS"], "a") as out:
        out.write(json.dumps({"test": item.nodeid, "seconds": round(seconds, 3), "busy": round(busy, 4)}) + "\n")
