"""3x3 convolutions as Winograd F(2x2, 3x3): a transform, 16 GEMMs in one batch, a transform.

A ``conv2d`` (NCHW, one group) with a constant 3x3 filter, stride 1, dilation 1 and padding 1
computes each 2x2 output tile from a 4x4 input tile (Lavin and Gray, 2015):

    V[t, c, p]  = (B^T d B)[t]    the input tile of pixel tile p, channel c   (winograd_input)
    M[t, k, p]  = sum_c U[t, k, c] V[t, c, p]                                  (batch_matmul)
    Y[n, k, y, x] = (A^T M A)[y % 2, x % 2] of tile p = (n, y / 2, x / 2)      (winograd_output)

with U = G g G^T the filter transformed at compile time (bundle.weights.winograd_filter, THE
definition the runtime also uses for seeded-random weights). The GEMMs do 16 multiply-adds per
4 outputs and channel where the direct convolution does 36: 2.25x fewer. The transforms are ops
of their own (``winograd_input`` [N, C, H, W] -> [16, C, P], ``winograd_output`` [16, Co, P] ->
[N, Co, H, W], attrs ``tiles`` [TH, TW]; P = N TH TW): one GPU thread per tile and channel
loads its 16 values once (codegen/kernels.py); the bias, ReLU and residual add that follow the
convolution are the output transform's epilogue (form_dispatches). Tiles that overhang an odd
H or W read zeros and write nothing past the edge.

Which convolutions: ``mode`` ``on`` takes every one that qualifies, ``off`` none, ``auto`` those
the H100 measured faster (scripts/winograd_layers.py, ResNet-50 b1 / b8, per convolution, direct
against the three dispatches): at fp32 those with at least AUTO_MIN_CHANNELS["fp32"] input and
output channels and AUTO_MIN_TILES tiles (ResNet-50 b8 per stage, CUDA: 0.94 / 0.69 / 0.71 / 0.85
of the direct time; b1's 7x7 stage, 16 tiles: 0.94-1.04, Vulkan 1.12-1.14); on the matrix units
(tf32 / f16 / bf16), whose direct convolutions are 2-3x faster while the transforms cost the
same, only those with at least 256 channels (b8 tf32: 1.6 / 1.06 / 0.59 / 0.55; f16: 2.07 / 1.31
/ 0.75 / 0.62; b1 f16: 1.5 / 0.90 / 0.50 / 0.22).
"""

from __future__ import annotations

from halbench.compiler.ir import Graph, Op, TensorType, Weight

__all__ = ["AUTO_MIN_CHANNELS", "AUTO_MIN_TILES", "MODES", "auto_takes", "eligible", "winograd"]

MODES = ("auto", "on", "off")

#: ``auto``: the fewest input and output channels per precision, and the fewest 2x2 output
#: tiles (N x ceil(H / 2) x ceil(W / 2)) at fp32 (see the module docstring)
AUTO_MIN_CHANNELS = {"fp32": 64, "tf32": 256, "f16": 256, "bf16": 256}
AUTO_MIN_TILES = 32


def eligible(op: Op, g: Graph) -> bool:
    """Whether ``op`` is a convolution Winograd F(2x2, 3x3) computes as it is."""
    a = op.attrs
    if op.kind != "conv2d" or len(op.inputs) != 2 or len(op.outputs) != 1 or a.get("layout") != "nchw":
        return False
    if list(a.get("strides", ())) != [1, 1] or list(a.get("dilations", ())) != [1, 1]:
        return False
    if list(a.get("pads", ())) != [1, 1, 1, 1] or float(a.get("pad_value", 0.0)) != 0.0:
        return False
    x, w = op.inputs
    wt = g.weights.get(w)
    if wt is None or wt.type.dtype != "f32" or len(wt.type.shape) != 4 or tuple(wt.type.shape[2:]) != (3, 3):
        return False
    xt, yt = g.types[x], g.types[op.outputs[0]]
    return (xt.dtype == "f32" and len(xt.shape) == 4 and xt.shape[1] == wt.type.shape[1]
            and yt.shape == (xt.shape[0], wt.type.shape[0], xt.shape[2], xt.shape[3]))


def auto_takes(op: Op, g: Graph, precision: str = "fp32") -> bool:
    """Whether ``auto`` rewrites the eligible convolution ``op`` compiled at ``precision``."""
    n, c, h, w = g.types[op.inputs[0]].shape
    co = g.weights[op.inputs[1]].type.shape[0]
    if min(c, co) < AUTO_MIN_CHANNELS.get(precision, AUTO_MIN_CHANNELS["fp32"]):
        return False
    return precision != "fp32" or n * -(-h // 2) * -(-w // 2) >= AUTO_MIN_TILES


def winograd(graph: Graph, mode: str = "auto", precision: str = "fp32") -> Graph:
    """Rewrite the convolutions ``mode`` picks (see the module docstring) as Winograd F(2x2, 3x3);
    ``precision``: the compile's --precision (what ``auto`` decides by)."""
    if mode not in MODES:
        raise ValueError(f"winograd mode {mode!r}; known: {', '.join(MODES)}")
    if mode == "off":
        return graph
    g = graph.copy()
    ops: list[Op] = []
    sources: set[str] = set()
    changed = False
    for op in g.ops:
        if not eligible(op, g) or (mode == "auto" and not auto_takes(op, g, precision)):
            ops.append(op)
            continue
        changed = True
        x, w = op.inputs
        y = op.outputs[0]
        nb, c, h, wd = g.types[x].shape
        co = g.weights[w].type.shape[0]
        tiles = (-(-h // 2), -(-wd // 2))
        p = nb * tiles[0] * tiles[1]
        src = g.weights[w]
        sources.add(w)
        u = f"{w}.winograd"
        if u not in g.weights:
            from halbench.bundle.weights import winograd_filter

            data = winograd_filter(src.data) if src.data is not None else None
            g.weights[u] = Weight(u, TensorType((16, co, c), "f32"), data, derived=("winograd-f2x3", src))
            g.types[u] = g.weights[u].type
        v, mm = f"{y}.wg_in", f"{y}.wg_gemm"
        g.types[v] = TensorType((16, c, p), "f32")
        g.types[mm] = TensorType((16, co, p), "f32")
        ops.append(Op("winograd_input", [x], [v], {"tiles": list(tiles)}, op.loc))
        ops.append(Op("batch_matmul", [u, v], [mm], {"transpose_a": False, "transpose_b": False}, op.loc))
        ops.append(Op("winograd_output", [mm], [y], {"tiles": list(tiles)}, op.loc))
    if not changed:
        return graph
    g.ops = ops
    read = {v for op in g.ops for v in op.inputs} | set(g.views.values()) | {v for _, v in g.outputs}
    for name in sorted(sources - read):
        del g.weights[name]  # a filter only its transform reads now (the transform keeps its data)
    return g
