"""Per-dispatch device times of the fused attention (attention:flash) in A/B bundles, on the GPU.

Usage: python scripts/attention_profile.py DIR OUT DEVICE [DEVICE ...]
DIR holds MODEL-bBATCH-TAG.hbx bundles (as scripts/ab_models.py reads them); each is profiled
on each device (inputs: the zoo's, seq 128 for MiniLM), and this prints one row per bundle and
device: the attention dispatches' median microseconds (each, and their sum) and the whole
model's sum of dispatch times. The full per-dispatch breakdowns go to OUT as JSON.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

import halbench
from halbench.bench import zoo
from halbench.runtime import Module


def main() -> None:
    root, out, *devices = sys.argv[1:]
    Path(out).mkdir(parents=True, exist_ok=True)
    rows = []
    for p in sorted(Path(root).glob("*.hbx")):
        m = re.fullmatch(r"(.+)-b(\d+)-([A-Za-z0-9]+)\.hbx", p.name)
        if not m:
            continue
        model, batch, tag = m.group(1), int(m.group(2)), m.group(3)
        feeds = zoo.make_inputs(model, batch=batch, **({"seq": 128} if model.startswith("minilm") else {}))
        for uri in devices:
            try:
                with halbench.create_device(uri) as dev:
                    mod = Module.load(p, dev)
                    try:
                        inputs = [feeds[s.name] for s in mod.function(None).inputs]
                        for _ in range(20):  # clocks up
                            mod.profile(None, inputs, runs=10, warmup=0, dispatch_times=False)
                        pb = mod.profile(None, inputs, runs=30, warmup=3)
                    finally:
                        mod.close()
                per = np.median(np.array(pb.dispatch_ns), axis=0) / 1e3
                names = [d.name for d in pb.dispatches]
                att = [float(t) for t, n in zip(per, names) if n == "attention:flash"]
                rows.append((model, batch, tag, uri, att, float(per.sum())))
                (Path(out) / f"{model}-b{batch}-{tag}-{uri.partition(':')[0]}.json").write_text(json.dumps(
                    {"total_us": float(per.sum()), "dispatches": [{"name": n, "us": float(t)} for n, t in zip(names, per)]},
                    indent=0))
            except Exception as e:  # noqa: BLE001 -- one failing bundle must not lose the others
                print(f"{p.name} {uri}: {type(e).__name__}: {str(e)[:300]}", flush=True)
    print("\n| model | batch | bundle | device | attention us (each) | attention us (sum) | dispatches us (sum) |")
    print("|---|---|---|---|---|---|---|")
    for model, batch, tag, uri, att, total in rows:
        each = " ".join(f"{x:.1f}" for x in att)
        print(f"| {model} | {batch} | {tag} | {uri} | {each} | {sum(att):.1f} | {total:.1f} |")


if __name__ == "__main__":
    main()
