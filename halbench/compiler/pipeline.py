"""The pass pipeline: one flat function, top to bottom; each line says why the pass runs."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from halbench.compiler.ir import Graph
from halbench.compiler.passes.assign_buffers import assign_buffers
from halbench.compiler.passes.canonicalize import canonicalize
from halbench.compiler.passes.cost import cost
from halbench.compiler.passes.fold_constants import fold_constants
from halbench.compiler.passes.fold_reshapes import fold_reshapes
from halbench.compiler.passes.form_dispatches import form_dispatches
from halbench.compiler.passes.fuse_attention import fuse_attention
from halbench.compiler.passes.fuse_depthwise import fuse_depthwise
from halbench.compiler.passes.fuse_elementwise import fuse_elementwise
from halbench.compiler.passes.fuse_pad import fuse_pad
from halbench.compiler.passes.fuse_rows import fuse_rows
from halbench.compiler.passes.hoist_branches import hoist_branches
from halbench.compiler.passes.inline_constants import inline_constants
from halbench.compiler.passes.merge_gemms import merge_gemms
from halbench.compiler.passes.recognize_patterns import recognize_patterns
from halbench.compiler.passes.schedule_levels import schedule_levels
from halbench.compiler.passes.share_batch_operands import share_batch_operands
from halbench.compiler.passes.winograd import winograd
from halbench.errors import UserError

__all__ = ["PASSES", "run_pipeline"]

PASSES = ("parse", "inline_constants", "canonicalize", "fold_constants", "share_batch_operands",
          "fold_reshapes", "fuse_pad", "winograd",
          "fuse_elementwise", "merge_gemms", "hoist_branches", "form_dispatches", "recognize_patterns",
          "fuse_rows",
          "fuse_attention", "fuse_depthwise", "schedule_levels",
          "assign_buffers", "cost")


def run_pipeline(graph: Graph, dump_after: str | None = None, out: TextIO | None = None,
                 timings: dict[str, float] | None = None, fuse_attention_blocks: bool = True,
                 merge_sibling_gemms: bool = True, winograd_mode: str = "auto",
                 precision: str = "fp32", fuse_depthwise_convs: bool = False) -> Graph:
    """Run every pass in order; ``dump_after`` prints the IR after that pass (or ``all``).
    ``fuse_attention_blocks=False`` leaves attention blocks as separate dispatches, and
    ``merge_sibling_gemms=False`` sibling GEMMs (Q, K, V) as one dispatch each (A/B runs);
    ``winograd_mode``: which 3x3 convolutions become Winograd F(2x2, 3x3) (passes/winograd.py;
    ``auto`` decides by the compile's ``precision``); ``fuse_depthwise_convs=True`` computes a
    depthwise convolution inside the 1x1 convolution that reads it (passes/fuse_depthwise.py)."""
    if dump_after and dump_after != "all" and dump_after not in PASSES:
        raise UserError(f"unknown pass '{dump_after}' for --dump-after; passes: {', '.join(PASSES)}, all")
    out = out or sys.stdout
    timings = timings if timings is not None else {}

    def step(name: str, fn: Callable[[Graph], Graph], g: Graph) -> Graph:
        t0 = time.perf_counter()
        g = fn(g)
        timings[name] = time.perf_counter() - t0
        if dump_after in (name, "all"):
            print(f"// ----- IR after {name} -----\n{g}", file=out)
        return g

    if dump_after in ("parse", "all"):
        print(f"// ----- IR after parse -----\n{graph}", file=out)
    g = step("inline_constants", inline_constants, graph)  # 1-element weights become literals
    g = step("canonicalize", canonicalize, g)              # fills used only as inits, dead results
    g = step("fold_constants", fold_constants, g)          # weight transposes/casts at compile time
    g = step("canonicalize", canonicalize, g)              # weights the fold left unused
    g = step("share_batch_operands", share_batch_operands, g)  # a broadcast weight read in place
    g = step("canonicalize", canonicalize, g)              # the broadcast copies nobody reads
    g = step("fold_reshapes", fold_reshapes, g)            # reshapes move no data: views
    g = step("fuse_pad", fuse_pad, g)                      # convs read padding in bounds checks
    g = step("winograd", lambda x: winograd(x, winograd_mode, precision), g)  # 3x3 convs: 2.25x fewer GEMM MACs
    g = step("fuse_elementwise", fuse_elementwise, g)      # chains of element-wise ops: one body
    g = step("merge_gemms", lambda x: merge_gemms(x, merge_sibling_gemms), g)  # Q, K, V: one GEMM over N
    g = step("hoist_branches", hoist_branches, g)          # a residual's shallow branch runs beside the deep one
    g = step("form_dispatches", form_dispatches, g)        # one root + epilogue per dispatch
    g = step("recognize_patterns", recognize_patterns, g)  # softmax / layer norm groups, for GPU kernels
    g = step("fuse_rows", fuse_rows, g)                    # each tagged group: one row dispatch
    g = step("fuse_attention", lambda x: fuse_attention(x, fuse_attention_blocks), g)  # Q·Kᵀ..·V: one dispatch
    g = step("fuse_depthwise", lambda x: fuse_depthwise(x, fuse_depthwise_convs, precision), g)  # dw 3x3 -> 1x1: one GEMM
    g = step("schedule_levels", schedule_levels, g)        # independent dispatches between the same barriers
    g = step("assign_buffers", assign_buffers, g)          # liveness-packed transient arena
    g = step("cost", cost, g)                              # flops / bytes for rooflines
    return g
