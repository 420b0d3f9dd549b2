"""Fill the compile cache for a suite's models, for targets named here, so that a machine
without the MLIR compiler (the GPU machine) runs the suite from the cache.

Usage: XDG_CACHE_HOME=DIR python scripts/precompile.py SUITE API=TARGET [API=TARGET ...]
   e.g. XDG_CACHE_HOME=$PWD/.hbcache python scripts/precompile.py models vulkan=h100 cuda=h100
Then carry DIR and set XDG_CACHE_HOME to it there.
"""

from __future__ import annotations

import sys
import time

from halbench.bench.models import compile_cached
from halbench.bench.suite import load_suite


def main() -> None:
    suite = load_suite(sys.argv[1])
    pairs = [a.split("=", 1) for a in sys.argv[2:]]
    for spec in suite.benchmarks:
        if spec.kind != "model":
            continue
        for api, target in pairs:
            t0 = time.perf_counter()
            path, stats = compile_cached(dict(spec.params), (api, "local"), spec.params.get("weights", "file"),
                                         spec.params.get("input_shapes"), {api: target})
            print(f"{spec.name:20} {api}={target:8} {time.perf_counter() - t0:6.1f} s "
                  f"{path.stat().st_size / 1e6:6.2f} MB {'cached' if stats['cached'] else ''}", flush=True)


if __name__ == "__main__":
    main()
