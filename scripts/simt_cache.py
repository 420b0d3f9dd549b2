"""Merge scripts/simt_sweep.py's fastest configurations into a tuning cache directory (a copy:
whole-model A/Bs decide whether it replaces docs/examples/h100-tuning).

Usage: python scripts/simt_cache.py FOUND.json CACHE_DIR [--margin 0.05] [--only REGEX]
         [--apis cuda,vulkan]
An entry is replaced where the sweep's best ran at least ``margin`` faster than the cache's own
configuration measured in the same sweep (``cache_us``); ``--only`` limits it to problem keys
matching a regular expression (a shape class chosen by A/B). The cache file is per API and
target (CACHE_DIR/<api>-h100.json), written through tuning_cache.update_cache (atomic, locked).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from halbench.compiler.tuning_cache import cache_file, read_cache, update_cache


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("found")
    ap.add_argument("cache_dir")
    ap.add_argument("--margin", type=float, default=0.05)
    ap.add_argument("--only", default=None)
    ap.add_argument("--apis", default="cuda,vulkan")
    a = ap.parse_args()
    found = json.loads(Path(a.found).read_text())
    for api in a.apis.split(","):
        path = cache_file(api, "h100", a.cache_dir)
        old = read_cache(path).entries if path is not None and path.exists() else {}
        new = {}
        for key, r in found.get(api, {}).items():
            if a.only and not re.search(a.only, key):
                continue
            base = r.get("cache_us")
            if not base or r["us"] > base * (1 - a.margin):
                continue
            e = old[key].model_dump(exclude_none=True) if key in old else {"problem": r["problem"]}
            e.update(config=r["config"], time_ns=r["us"] * 1e3, device=f"{api}://0",
                     measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            new[key] = e
            print(f"{api} {key[:80]}: {base:.1f} -> {r['us']:.1f} us")
        if new:
            update_cache(path or Path(a.cache_dir) / f"{api}-h100.json", api, "h100", new)
        print(f"{api}: {len(new)} entries replaced")
    return 0


if __name__ == "__main__":
    sys.exit(main())
