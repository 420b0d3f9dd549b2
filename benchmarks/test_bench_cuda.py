"""Host cost of submitting work on cuda:// (pytest-benchmark; GPU machine only).

Three shapes, each submit + wait of one command buffer:
  graph-100       100 independent noop dispatches replayed as one CUDA graph
  graph-100-chain the same with a barrier after each dispatch (a dependent chain)
  stream-100      the same 100 dispatches as individual cuLaunchKernel calls (no graph)
  empty           an empty command buffer: the bare submit/wait round trip
Per-dispatch figures are host wall time / 100. ``python3 benchmarks/test_bench_cuda.py`` prints a
table of medians without pytest.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import pytest

DISPATCHES = 100


def _device():
    import halbench
    from halbench.errors import DriverUnavailable

    try:
        return halbench.create_device("cuda://")
    except DriverUnavailable as e:
        pytest.skip(f"cuda unavailable: {e.reason}")


def _cases(dev) -> dict[str, Callable[[], None]]:
    """name -> a submit-and-wait callable."""
    from tests.hal import kernels_cuda

    exe = dev.load_executable(kernels_cuda.build("noop", "cuda-cubin-v1"))
    buf = dev.allocate(256)

    def record(graphs: bool, chain: bool, n: int):
        dev.use_graphs = graphs
        cb = dev.command_buffer()
        for _ in range(n):
            cb.dispatch(exe, "main", (1, 1, 1), [buf])
            if chain:
                cb.barrier()
        cb.end()
        dev.use_graphs = True
        return cb

    cbs = {"graph-100": record(True, False, DISPATCHES), "graph-100-chain": record(True, True, DISPATCHES),
           "stream-100": record(False, False, DISPATCHES), "empty": record(True, False, 0)}

    def runner(cb):
        def run() -> None:
            dev.submit(cb).wait(10.0)
        run.cb = cb  # type: ignore[attr-defined]
        return run

    return {name: runner(cb) for name, cb in cbs.items()}


@pytest.fixture(scope="module")
def cases():
    dev = _device()
    yield _cases(dev)
    dev.close()


@pytest.mark.parametrize("case", ["graph-100", "graph-100-chain", "stream-100", "empty"])
def test_submit_wait(benchmark, cases, case):
    fn = cases[case]
    for _ in range(20):
        fn()  # warm up: first launches upload the graph and load the module
    benchmark.extra_info["dispatches"] = 0 if case == "empty" else DISPATCHES
    benchmark.pedantic(fn, rounds=300, iterations=1, warmup_rounds=10)


def main() -> None:
    import halbench

    dev = halbench.create_device("cuda://")
    print(f"device: {dev.info.name} ({dev.arch}), stream memops: {dev.stream_memops}")
    rows = []
    for name, fn in _cases(dev).items():
        for _ in range(50):
            fn()
        samples, submit_only = [], []
        for _ in range(500):
            t0 = time.perf_counter_ns()
            sub = dev.submit(fn.cb)
            t1 = time.perf_counter_ns()
            sub.wait(10.0)
            samples.append(time.perf_counter_ns() - t0)
            submit_only.append(t1 - t0)
        med = statistics.median(samples) / 1000
        per = med / DISPATCHES if name != "empty" else float("nan")
        rows.append((name, med, min(samples) / 1000, per, statistics.median(submit_only) / 1000))
    print(f"{'case':<18}{'median us':>12}{'min us':>10}{'us/dispatch':>14}{'submit() us':>13}")
    for name, med, mn, per, so in rows:
        print(f"{name:<18}{med:>12.1f}{mn:>10.1f}{per:>14.2f}{so:>13.1f}")
    dev.close()


if __name__ == "__main__":
    main()
