"""Write a zoo model as ONNX with halbench's seeded-random weights (bundle.weights.RANDOM_SEED), as
the A/B bundle scripts compile it: python scripts/zoo_onnx.py MODEL BATCH OUT.onnx
(MiniLM models at sequence length 128)."""

from __future__ import annotations

import sys

import onnx

from halbench.bench import zoo
from halbench.bundle.weights import RANDOM_SEED, randomize_onnx


def main() -> None:
    model, batch, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    mod = zoo.build(model, batch=batch, **({"seq": 128} if model.startswith("minilm") else {}))
    randomize_onnx(mod, RANDOM_SEED)
    onnx.save(mod, out)


if __name__ == "__main__":
    main()
