"""The codegen issue's table from models-suite results: per model, halbench's median on each
API beside PyTorch's, with the ratios the issue asks for (cuda / best PyTorch, vulkan / cuda).

Usage: python scripts/models_table.py RESULTS.json [RESULTS.json ...]   (Markdown on stdout)
"""

from __future__ import annotations

import sys

import numpy as np

from halbench.bench.results import read_results


def main() -> None:
    cells: dict[str, dict[str, float]] = {}
    for path in sys.argv[1:]:
        doc = read_results(path)
        for b in doc["benchmarks"]:
            s = b["samples"]["device_ms"]
            if b["status"] != "ok" or not s:
                continue
            api = b["device"].partition("://")[0]
            col = f"halbench {api}" if b.get("runtime", "halbench") == "halbench" else b["runtime"]
            cells.setdefault(b["name"], {})[col] = float(np.median(s))
    print("| model | halbench cuda | halbench vulkan | torch-cudagraph | torch-compile | cuda / best torch | vulkan / cuda |")
    print("|---|---|---|---|---|---|---|")
    for name, c in cells.items():
        cu, vk = c.get("halbench cuda"), c.get("halbench vulkan")
        torch = [c[k] for k in ("torch-cudagraph", "torch-compile") if k in c]
        best = min(torch) if torch else None

        def f(x: float | None) -> str:
            return f"{x:.3f}" if x is not None else "–"

        r1 = f"{cu / best:.2f}" if cu and best else "–"
        r2 = f"{vk / cu:.2f}" if cu and vk else "–"
        print(f"| {name} | {f(cu)} | {f(vk)} | {f(c.get('torch-cudagraph'))} | {f(c.get('torch-compile'))} | {r1} | {r2} |")


if __name__ == "__main__":
    main()
