"""Fill the compile cache for a suite's models, for targets named here, so that a machine
without the MLIR compiler (the GPU machine) runs the suite from the cache.

Usage: XDG_CACHE_HOME=DIR python scripts/precompile.py SUITE API=TARGET [API=TARGET ...]
                                                       [iree:KIND=IREE_TARGET,FALLBACK ...]
                                                       [precision=P1,P2 ...]
   e.g. XDG_CACHE_HOME=$PWD/.hbcache python scripts/precompile.py models vulkan=h100 cuda=h100 \
            iree:cuda=sm_90,sm_80 iree:vulkan=hopper,ampere iree:cpu=host
Then carry DIR/halbench/bundles and DIR/halbench/iree and set XDG_CACHE_HOME to DIR there.
``iree:KIND=T1,T2`` compiles the IREE peer's module the way the peer would on a device whose own
target is T1 (falling back to T2 when IREE lacks T1), keyed like the peer's cache.
``precision=fp32,f16`` compiles every model at each of these precisions (``run-suite --precision``
then finds them; default: each model entry's own ``precision:``, fp32 when it names none).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from halbench.bench.models import compile_cached
from halbench.bench.suite import load_suite


def main() -> None:
    suite = load_suite(sys.argv[1])
    pairs = [a.split("=", 1) for a in sys.argv[2:]]
    precisions = [p for k, v in pairs if k == "precision" for p in v.split(",")] or [None]
    pairs = [(k, v) for k, v in pairs if k != "precision"]
    for spec0, precision in ((s, p) for s in suite.benchmarks for p in precisions):
        if spec0.kind != "model":
            continue
        spec = spec0 if precision is None else replace(spec0, params={**spec0.params, "precision": precision})
        for api, target in pairs:
            t0 = time.perf_counter()
            if api.startswith("iree:"):
                from halbench.bench.reference import model_context
                from halbench.peers import model_key
                from halbench.peers.iree import compile_for
                from halbench.tools import cache_dir

                ctx = model_context(dict(spec.params))
                kind = api.split(":", 1)[1]
                try:
                    rec = compile_for(ctx.path, model_key(ctx.path), kind, target.split(","), cache_dir() / "iree")
                    msg = f"{rec['target']} {rec.get('note') or ''}"
                except Exception as e:  # noqa: BLE001 - recorded in the cache too
                    msg = f"failed: {e}"
                print(f"{spec.name:20} {api}={target:14} {time.perf_counter() - t0:6.1f} s {msg[:150]}", flush=True)
                continue
            path, stats = compile_cached(dict(spec.params), (api, "local"), spec.params.get("weights", "file"),
                                         spec.params.get("input_shapes"), {api: target})
            print(f"{spec.name:20} {api}={target:8} {spec.params.get('precision') or 'fp32':5} "
                  f"{time.perf_counter() - t0:6.1f} s "
                  f"{path.stat().st_size / 1e6:6.2f} MB {'cached' if stats['cached'] else ''}", flush=True)


if __name__ == "__main__":
    main()
