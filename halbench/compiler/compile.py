"""``compile_model``: a model file -> the manifest and members of a bundle.

Stages: frontend (ONNX/MLIR -> linalg on tensors), parse (-> halbench IR), the pass pipeline,
per-target codegen, and the schedule (buffers, steps with barriers and copies). Each stage is
timed for ``--statistics``. The result goes to ``halbench.bundle.write_bundle`` as is:
``write_bundle(path, compiled.manifest, compiled.members)`` (or ``compiled.write(path)``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from halbench.bundle import (
    BarrierStep,
    BufferDecl,
    BufferRange,
    CopyStep,
    DispatchStep,
    ExecutableDecl,
    Function,
    Manifest,
    TensorSpec,
    Variant,
    WeightDecl,
    write_bundle,
)
from halbench.bundle.weights import RANDOM_INIT, RANDOM_SEED, weight_digest
from halbench.compiler.ir import Graph
from halbench.compiler.passes.convert_weights import CONVERTED, ROUNDED, convert_weights
from halbench.compiler.passes.cost import cost
from halbench.errors import CompileError, UserError

__all__ = ["RANDOM_INIT", "CompileOptions", "CompiledModule", "compile_graph", "compile_model"]


def _pairs(value: Any) -> tuple[tuple[str, Any], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((str(k), v) for k, v in items))


@dataclass(frozen=True)
class CompileOptions:
    """What to compile for. Frozen and hashable; :meth:`cache_key` is stable across runs.

    ``target_devices``: compiler backends by name (``halbench.compiler.backends``), in the order
    their variants go into the bundle. ``targets``: API -> target name (any naming scheme of
    ``list-targets``), ``auto`` (the first probed device of that API) or a ``dump-devices
    --format json`` file; an API left out gets its backend's default target.
    ``backend_options``: the backends' own options by name (``vulkan-dispatch-abi``).
    ``input_values``: inputs frozen to these values (name -> array): they become constants of the
    program and leave its signature; a static-shape compiler needs shape operands (a Reshape's
    shape, a Reduce's axes) known. ``input_shapes``, ``targets`` and ``backend_options`` may be given as dicts; they are kept as
    sorted tuples of pairs. ``weights``: ``file`` (stored in the bundle) or ``random`` (float
    weights declared as seeded random, ``seed`` + their index; small and integer constants
    stay stored).
    """

    target_devices: tuple[str, ...] = ("local",)
    weights: str = "file"
    input_shapes: Any = ()
    seed: int = RANDOM_SEED
    dump_after: str | None = None
    targets: Any = ()
    backend_options: Any = ()
    input_values: Any = ()
    #: With a target ``auto`` or a dump file: the device URI whose target to use (default: the
    #: first GPU of the API; pick_dump_device).
    target_device_uri: str | None = None
    #: What the operands of f32 GEMMs are rounded to (halbench.precision): ``fp32`` exact, or
    #: ``tf32`` / ``f16`` / ``bf16`` on matrix units with f32 accumulation.
    precision: str = "fp32"
    #: Where measured GEMM configurations come from (compiler/tuning_cache.py): None for
    #: $HALBENCH_TUNING_CACHE or the default directory, ``off``, a directory or a cache file.
    tuning_cache: str | None = None
    #: Configurations forced per (API, problem key), ahead of the cache: ``halbench tune``
    #: compiles its candidates this way. Pairs ((api, key), GemmConfig).
    gemm_configs: Any = ()
    #: One flash-attention dispatch per attention block (passes/fuse_attention.py). None: on,
    #: unless $HALBENCH_NO_FUSE_ATTENTION=1 (two bundles from the same code for an A/B).
    fuse_attention: bool | None = None
    #: One GEMM for sibling GEMMs that read the same activation (passes/merge_gemms.py: Q, K, V).
    #: None: on, unless $HALBENCH_NO_MERGE_GEMMS=1.
    merge_gemms: bool | None = None
    #: Under ``--precision f16|bf16``, constant GEMM operands (weights) stored in that type,
    #: rounded at compile time (passes/convert_weights.py; results bit-identical); under tf32,
    #: rounded to tf32 and kept as f32 (the CUDA mma.sync GEMM then reads them unrounded). None: on,
    #: unless $HALBENCH_NO_CONVERT_WEIGHTS=1 (two bundles from the same code for an A/B).
    convert_weights: bool | None = None
    #: Which 3x3 convolutions run as Winograd F(2x2, 3x3) (passes/winograd.py): ``auto`` (those
    #: large enough to gain), ``on`` (every one that qualifies), ``off``. None: $HALBENCH_WINOGRAD,
    #: else ``auto``.
    winograd: str | None = None
    #: A depthwise convolution computed inside the 1x1 convolution that reads it (passes/
    #: fuse_depthwise.py; fp32 only). Measured slower on the H200 (MobileNetV2 1.3-2x), so off
    #: by default. None: off, unless $HALBENCH_FUSE_DEPTHWISE=1.
    fuse_depthwise: bool | None = None

    def __post_init__(self) -> None:
        if self.fuse_attention is None:
            object.__setattr__(self, "fuse_attention", os.environ.get("HALBENCH_NO_FUSE_ATTENTION", "") in ("", "0"))
        if self.merge_gemms is None:
            object.__setattr__(self, "merge_gemms", os.environ.get("HALBENCH_NO_MERGE_GEMMS", "") in ("", "0"))
        if self.convert_weights is None:
            object.__setattr__(self, "convert_weights",
                               os.environ.get("HALBENCH_NO_CONVERT_WEIGHTS", "") in ("", "0"))
        if self.fuse_depthwise is None:
            object.__setattr__(self, "fuse_depthwise", os.environ.get("HALBENCH_FUSE_DEPTHWISE", "") == "1")
        if self.winograd is None:
            object.__setattr__(self, "winograd", os.environ.get("HALBENCH_WINOGRAD", "") or "auto")
        from halbench.compiler.passes.winograd import MODES as _WINOGRAD_MODES

        if self.winograd not in _WINOGRAD_MODES:
            raise UserError(f"winograd must be one of {', '.join(_WINOGRAD_MODES)}, got '{self.winograd}' "
                            f"(--winograd or $HALBENCH_WINOGRAD)")
        from halbench.compiler.backends import backend, backends, canonical, option_values

        object.__setattr__(self, "input_shapes",
                           tuple((k, tuple(int(s) for s in v)) for k, v in _pairs(self.input_shapes)))
        object.__setattr__(self, "input_values", _frozen_values(self.input_values))
        object.__setattr__(self, "target_devices", tuple(canonical(a) for a in self.target_devices))
        object.__setattr__(self, "targets", tuple((canonical(k), v) for k, v in _pairs(self.targets)
                                                  if v is not None))
        object.__setattr__(self, "backend_options", _pairs(self.backend_options))
        from halbench.precision import check_precision

        check_precision(self.precision)
        object.__setattr__(self, "gemm_configs", tuple(sorted(
            (self.gemm_configs.items() if isinstance(self.gemm_configs, Mapping) else self.gemm_configs),
            key=lambda kv: kv[0])))
        if self.tuning_cache is not None:
            object.__setattr__(self, "tuning_cache", str(self.tuning_cache))
        if self.weights not in ("file", "random"):
            raise UserError(f"weights must be 'file' or 'random', got '{self.weights}'")
        if not self.target_devices:
            raise UserError(f"give at least one --target-device ({', '.join(backends())})")
        for api in self.target_devices:
            backend(api)  # an unknown name is a UserError listing the known ones
        for api, _ in self.targets:
            if backend(api).target_option is None:
                raise UserError(f"the {api} backend takes no target")
        known = {o.name: b.name for b in backends().values() for o in b.options}
        given = dict(self.backend_options)
        for name in given:
            if name not in known:
                raise UserError(f"unknown backend option --{name}; known: "
                                f"{', '.join('--' + n for n in known) or 'none'}")
            option_values(known[name], given)  # checks the choice

    def target_name(self, api: str) -> str | None:
        return dict(self.targets).get(api)

    def options_for(self, api: str) -> dict[str, str]:
        """The backend's options, defaults filled in."""
        from halbench.compiler.backends import option_values

        return option_values(api, dict(self.backend_options))

    def to_dict(self) -> dict[str, Any]:
        return {"target_devices": list(self.target_devices), "weights": self.weights,
                "input_shapes": {k: list(v) for k, v in self.input_shapes}, "seed": self.seed,
                "targets": dict(self.targets), "backend_options": dict(self.backend_options),
                **({"target_device_uri": self.target_device_uri} if self.target_device_uri else {}),
                # fp32 is left out, so the cache keys of exact compiles stay what they were
                **({"precision": self.precision} if self.precision != "fp32" else {}),
                **({"fuse_attention": False} if not self.fuse_attention else {}),
                **({"merge_gemms": False} if not self.merge_gemms else {}),
                **({"convert_weights": False} if not self.convert_weights else {}),
                **({"winograd": self.winograd} if self.winograd != "auto" else {}),
                **({"fuse_depthwise": True} if self.fuse_depthwise else {}),
                **({"input_values": {k: {"dtype": dt, "shape": list(sh), "values": list(vals)}
                                     for k, dt, sh, vals in self.input_values}} if self.input_values else {})}

    def frozen_inputs(self) -> dict[str, np.ndarray]:
        """``input_values`` as arrays: inputs that become constants of the compiled program."""
        return {k: np.array(vals, dtype=dt).reshape(sh) for k, dt, sh, vals in self.input_values}

    def resolved_targets(self) -> dict[str, Any]:
        """API -> ``targets.Target`` for every target device that takes a target."""
        from halbench.compiler.backends import backend

        return {api: _resolve_target(api, self.target_name(api), self.target_device_uri)
                for api in self.target_devices if backend(api).target_option}

    def tuned_configs(self, api: str, target: Any) -> tuple[tuple[str, Any], ...]:
        """(problem key, GemmConfig) pairs codegen uses for ``api`` on ``target``: the forced ones,
        then the tuning cache's for the target's name."""
        from halbench.compiler.tuning_cache import configs_for

        found = configs_for(api, target.name, self.tuning_cache) if target is not None else {}
        found.update({key: cfg for (a, key), cfg in self.gemm_configs if a == api})
        return tuple(sorted(found.items()))

    def cache_key(self) -> str:
        """A content hash of the options that change the output (not ``dump_after``), and of the
        tuned configurations the targets would use."""
        doc = self.to_dict()
        tuned = {api: [[k, c.to_dict()] for k, c in self.tuned_configs(api, t)]
                 for api, t in self.resolved_targets().items()}
        if any(tuned.values()):
            doc["tuned"] = tuned
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


#: Frozen inputs are shapes, axes and quantization parameters: small. More is a mistake.
MAX_FROZEN_ELEMENTS = 1 << 16


def _frozen_values(value: Any) -> tuple[tuple[str, str, tuple[int, ...], tuple[Any, ...]], ...]:
    out = []
    total = 0
    for k, v in _pairs(value):
        if isinstance(v, tuple) and len(v) == 3 and isinstance(v[0], str):
            dt, shape, vals = v  # already in the stored form
            a = np.array(vals, dtype=dt).reshape(shape)
        else:
            a = np.asarray(v)
        if a.dtype.kind not in "biuf":
            raise UserError(f"--freeze-input {k}: a {a.dtype} array cannot be frozen; give numbers")
        total += a.size
        if total > MAX_FROZEN_ELEMENTS:
            raise UserError(f"--freeze-input: more than {MAX_FROZEN_ELEMENTS} elements frozen; freeze shape "
                            f"operands (shapes, axes, pads, scales), and store weights in the model")
        out.append((str(k), a.dtype.str, tuple(int(s) for s in a.shape), tuple(a.ravel().tolist())))
    return tuple(out)


@dataclass
class CompiledModule:
    manifest: Manifest
    members: dict[str, bytes]
    graph: Graph
    statistics: dict[str, Any] = field(default_factory=dict)
    #: what the importer changed on the way (shown by ``halbench compile`` as notes)
    notes: list[str] = field(default_factory=list)

    def write(self, path: str | Path) -> Manifest:
        return write_bundle(path, self.manifest, self.members)


def compile_model(path: str | Path, options: CompileOptions | None = None) -> CompiledModule:
    """Compile the ONNX or MLIR file at ``path``."""
    from halbench.compiler.frontend import load
    from halbench.compiler.parse import parse_module

    options = options or CompileOptions()
    t0 = time.perf_counter()
    # weights="random" on an ONNX model randomizes its float initializers before the import
    # (bundle.weights.randomize_onnx): peers and the reference can then run the same model.
    imported = load(path, dict(options.input_shapes), options.frozen_inputs(),
                    random_seed=options.seed if options.weights == "random" else None)
    timings = dict(imported.timings)
    t1 = time.perf_counter()
    try:
        graph = parse_module(imported.module, input_names=imported.input_names,
                             output_names=imported.output_names, blobs=imported.blobs,
                             weight_names=imported.weight_names)
    except CompileError as e:
        if not imported.hint:
            raise
        raise CompileError(f"{e}{imported.hint}") from None
    timings["parse"] = time.perf_counter() - t1
    _keep_io_dtypes(graph, imported.io_dtypes)
    p = Path(path)
    source = {"path": p.name, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
    cm = compile_graph(graph, options, source, timings, imported.random_weights)
    cm.statistics["total_s"] = time.perf_counter() - t0
    cm.notes = list(imported.notes) + cm.notes
    return cm


def compile_to_file(path: str | Path, options: CompileOptions, output: str | Path) -> dict[str, Any]:
    """``compile_model(path, options)`` written to ``output`` (atomically), returning what a caller
    reports: its notes, dispatch count and statistics (JSON-able). The unit of work
    :func:`halbench.compiler.isolate.run_isolated` runs in a child process."""
    cm = compile_model(path, options)
    cm.write(output)
    functions = cm.manifest.functions
    return {"notes": list(cm.notes), "dispatches": len(functions[0].dispatches) if functions else 0,
            "statistics": json.loads(json.dumps(cm.statistics, default=str))}


def _keep_io_dtypes(graph: Graph, declared: Mapping[str, str]) -> None:
    """Record the model's own element type of each input and output where linalg's signless
    integers lost it (ONNX ``uint8`` became ``i8``): the bundle's signature says ``u8``."""
    for user, v in list(graph.inputs) + list(graph.outputs):
        want, have = declared.get(user), graph.types[v].dtype
        if want and want != have and want.startswith("u") and have == "i" + want[1:]:
            graph.io_dtypes[v] = want


def compile_graph(graph: Graph, options: CompileOptions, source: Mapping[str, Any] | None = None,
                  timings: dict[str, float] | None = None,
                  random_weights: Mapping[str, tuple[str, int]] | None = None) -> CompiledModule:
    """Passes, codegen and schedule for a parsed graph. ``random_weights``: the digests of an
    ONNX model's randomized initializers (``randomize_onnx``); None randomizes every float
    weight by its index (an MLIR source)."""
    from halbench.compiler.pipeline import run_pipeline

    timings = timings if timings is not None else {}
    pass_times: dict[str, float] = {}
    t0 = time.perf_counter()
    # A GEMM rounded to --precision stays a GEMM dispatch: the fused kernel computes in f32.
    g = run_pipeline(graph, options.dump_after, timings=pass_times,
                     fuse_attention_blocks=bool(options.fuse_attention) and options.precision == "fp32",
                     merge_sibling_gemms=bool(options.merge_gemms), winograd_mode=str(options.winograd),
                     precision=options.precision, fuse_depthwise_convs=bool(options.fuse_depthwise))
    timings["passes"] = time.perf_counter() - t0
    notes = _mark_precision(g, options)
    if options.convert_weights and options.precision in CONVERTED + ROUNDED:
        # weights the f16 / bf16 / tf32 GEMMs read, rounded once here as the GEMMs would at run time
        t_cw = time.perf_counter()
        g = cost(convert_weights(g))  # (cost again: the converted weights' bytes)
        pass_times["convert_weights"] = time.perf_counter() - t_cw
    t1 = time.perf_counter()
    from halbench.compiler.backends import backend

    members: dict[str, bytes] = {}
    executables = []
    targets = options.resolved_targets()
    for api, target in targets.items():
        # Measured GEMM configurations (halbench tune) travel to codegen with the target.
        if tuned := options.tuned_configs(api, target):
            targets[api] = dataclasses.replace(target, gemm_configs=tuned)
    generators = [(backend(api).generate, targets.get(api), options.options_for(api))
                  for api in options.target_devices]
    for i, d in enumerate(g.ops):
        variants = []
        for generate, target, opts in generators:  # variants in the order the target devices were given
            for v in generate(d, g, target, opts):
                member = f"executables/{i}.{len(variants)}.{v.ext}"
                members[member] = v.payload
                variants.append(Variant(v.format, v.target, member, v.entry, v.workgroups, v.constants,
                                        v.requires, v.gemm, v.matrix))
        executables.append(ExecutableDecl(i, f"dispatch_{i}_{_safe(d.attrs['name'])}", tuple(variants)))
    timings["codegen"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    manifest = _schedule(g, options, executables, members, source or {}, random_weights)
    timings["schedule"] = time.perf_counter() - t2
    stats = {"stages_s": timings, "passes_s": pass_times, "dispatches": len(g.ops),
             "executable_bytes": sum(len(v) for k, v in members.items() if k.startswith("executables/")),
             "weight_bytes": sum(len(v) for k, v in members.items() if k.startswith("weights/")),
             "transient_bytes": g.transient_nbytes,
             "flops": sum(c[0] for c in g.costs.values())}
    return CompiledModule(manifest, members, g, stats, notes)


#: The roots whose two operands ``--precision`` rounds: the GEMMs (convolutions as implicit GEMMs).
_GEMMS = ("matmul", "batch_matmul", "conv2d")


def _mark_precision(g: Graph, options: CompileOptions) -> list[str]:
    """Record ``options.precision`` on every f32 GEMM root (attr ``precision``: codegen and the
    local kernels read it there); the notes say which targets have no matrix units for it."""
    p = options.precision
    count = 0
    for d in g.ops:
        root = d.attrs["root"]
        root.attrs.pop("precision", None)  # a graph compiled before keeps no mark of that compile
        if p != "fp32" and root.kind in _GEMMS and \
                all(g.types[v].dtype == "f32" for v in (*root.inputs[:2], root.outputs[0])):
            root.attrs["precision"] = p
            count += 1
    if p == "fp32":
        return []
    if not count:
        return [f"--precision {p}: the model has no f32 GEMM or convolution; nothing is rounded"]
    from halbench.compiler.codegen.tuning import mma_fragment, tuning_for

    notes = []
    for api, target in options.resolved_targets().items():
        if api in ("vulkan", "cuda", "hip", "webgpu") and mma_fragment(tuning_for(target, api), p) is None:
            name = getattr(target, "name", None) or "default"
            notes.append(f"--precision {p}: the {api} target {name} has no {p} matrix units here; its "
                         f"{count} GEMMs round their operands to {p} and multiply on the f32 units")
    return notes


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "w"


def _random_seed(w: Any, i: int, options: CompileOptions,
                 random_weights: Mapping[str, tuple[str, int]] | None) -> int | None:
    """The seed a weight is declared random with, or None to store it. A weight converted at
    compile time (``w.source``) has the seed of the f32 weight it came from."""
    w = w.source or w
    if w.derived is not None:  # a transform of a weight: the seed of that weight
        w = w.derived[1]
    if options.weights != "random" or w.type.dtype not in ("f16", "bf16", "f32", "f64") or w.type.size <= 1:
        return None
    if random_weights is None:  # an MLIR source: every float weight, by its index
        return options.seed + i
    # An ONNX source: a weight that is one of the randomized initializers is regenerated from
    # its seed; one the compiler made of them by moving and joining elements is declared by its
    # derivation tree (_derivation), and one it computed from them otherwise is stored.
    hit = random_weights.get(weight_digest(np.asarray(w.data)))
    return hit[1] if hit and hit[0] == w.type.dtype else None


def _derivation(w: Any, random_weights: Mapping[str, tuple[str, int]] | None,
                depth: int = 0) -> dict[str, Any] | None:
    """The derivation tree (bundle.weights.derive_values) of a weight the compiler made from
    randomized ONNX initializers by moving and joining elements (``Weight.recipe``), or None
    where any part of it is not one of them (then it is stored as computed)."""
    from halbench.bundle.weights import DERIVE_LIMITS

    if random_weights is None or depth > DERIVE_LIMITS["depth"] or w.data is None:
        return None
    if w.recipe is not None:
        op, args, params = w.recipe
        parts = [_derivation(a, random_weights, depth + 1) for a in args]
        if any(p is None for p in parts):
            return None
        return {"op": op, **{k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in params.items()},
                "of": parts}
    if depth == 0:  # a weight that is an initializer itself: _random_seed's (no tree)
        return None
    hit = random_weights.get(weight_digest(np.asarray(w.data)))
    if not hit or hit[0] != w.type.dtype:
        return None
    return {"op": "random", "seed": hit[1], "dtype": w.type.dtype, "shape": [int(x) for x in w.type.shape]}


def _first_seed(tree: Mapping[str, Any]) -> int:
    return int(tree["seed"]) if tree["op"] == "random" else _first_seed(tree["of"][0])


def scratch_layout(dispatches: list[tuple[bool, tuple[int, int] | None]],
                   align: int) -> tuple[dict[int, int], int]:
    """Where each split-K dispatch's scratch range starts, and the scratch buffer's size.

    ``dispatches``: per dispatch in order, (a barrier before it, its (partial-sum bytes, counter
    bytes) or None where it does not split; both multiples of ``align``). Its range is its partial
    sums, then its tile counters (kernels.GemmSplit), which start at zero and which the kernel
    leaves at zero. The k-th split dispatch after a barrier takes slot k: dispatches between two
    barriers may run at once, so they take different slots, and after a barrier the slots are
    used again. A slot is its largest partial-sum region, then its largest counter region; every
    dispatch of the slot binds the range that ends its partial sums where the slot's counters
    begin, so a counter word only ever holds a counter (zero between runs) and never a partial sum
    an earlier dispatch left (ResNet-50 b8: 16 MB, where disjoint ranges would take 396 MB)."""
    slot_of: dict[int, int] = {}
    slot_p: list[int] = []  # per slot: the largest partial-sum bytes
    slot_c: list[int] = []  # ... and the largest counter bytes
    k = 0
    for i, (barrier, split) in enumerate(dispatches):
        if barrier:
            k = 0
        if split is None:
            continue
        if k == len(slot_p):
            slot_p.append(0)
            slot_c.append(0)
        slot_of[i] = k
        slot_p[k] = max(slot_p[k], split[0])
        slot_c[k] = max(slot_c[k], split[1])
        k += 1
    base, total = [], 0
    for p_bytes, c_bytes in zip(slot_p, slot_c):
        base.append(total)
        total += -(-(p_bytes + c_bytes) // align) * align
    starts = {i: base[k] + slot_p[k] - dispatches[i][1][0] for i, k in slot_of.items()}  # type: ignore[index]
    return starts, total


def _schedule(g: Graph, options: CompileOptions, executables: list[ExecutableDecl],
              members: dict[str, bytes], source: Mapping[str, Any],
              random_weights: Mapping[str, tuple[str, int]] | None = None) -> Manifest:
    buffers: list[BufferDecl] = []
    ids: dict[str, int] = {}

    def buffer(key: str, nbytes: int, kind: str, name: str) -> int:
        ids[key] = len(buffers)
        # Whole 4-byte words: copies and fills move words (a 3-byte int8 output is copied as 4);
        # an empty tensor still gets a word, so that every binding has memory behind it.
        buffers.append(BufferDecl(len(buffers), max(4, -(-nbytes // 4) * 4), kind, name))
        return ids[key]

    inputs = []
    for user, v in g.inputs:
        t = g.types[v]
        inputs.append(TensorSpec(user, t.shape, g.io_dtypes.get(v, t.dtype),
                                 buffer(f"input:{user}", t.nbytes, "input", user)))
    outputs = []
    for user, v in g.outputs:
        t = g.types[v]
        outputs.append(TensorSpec(user, t.shape, g.io_dtypes.get(v, t.dtype),
                                  buffer(f"output:{user}", t.nbytes, "output", user)))
    weights = []
    used_members = set()
    index = {name: i for i, name in enumerate(g.weights)}  # a converted copy: its source's index
    for name, w in g.weights.items():
        bid = buffer(f"weight:{name}", w.type.nbytes, "weight", name)
        seed = _random_seed(w, index[w.source.name if w.source is not None else name], options, random_weights)
        tree = _derivation(w.source or w, random_weights) if seed is None and options.weights == "random" else None
        # converted to f16 / bf16: drawn as its f32 source, then rounded to its type; rounded to
        # tf32 (still f32): made as its source is, then rounded (``round``)
        drawn = w.source.type.dtype if w.source is not None and w.source.type.dtype != w.type.dtype else None
        if tree is not None:  # made of random weights (a transpose, merged Q / K / V): its recipe
            weights.append(WeightDecl(name, bid, w.type.dtype, w.type.shape, "random", seed=_first_seed(tree),
                                      init=dict(RANDOM_INIT), random_dtype=drawn, derive=tree,
                                      round=w.rounded))
            continue
        if seed is not None:
            # a converted weight: drawn as its f32 source is, then rounded to its type; a
            # transformed one (Winograd): drawn as the weight it came from, then transformed
            base = w.source or w
            derived = base.derived
            weights.append(WeightDecl(name, bid, w.type.dtype, w.type.shape, "random",
                                      seed=seed, init=dict(RANDOM_INIT), random_dtype=drawn,
                                      transform=derived[0] if derived else None,
                                      random_shape=derived[1].type.shape if derived else None,
                                      round=w.rounded))
            continue
        member = f"weights/{_safe(name)}.bin"
        while member in used_members:
            member = member[:-4] + "_.bin"
        used_members.add(member)
        data = np.ascontiguousarray(w.data, dtype=w.data.dtype.newbyteorder("<"))
        members[member] = data.tobytes()
        weights.append(WeightDecl(name, bid, w.type.dtype, w.type.shape, "file", member=member, round=w.rounded))
    if g.transient_nbytes:
        buffer("transient", g.transient_nbytes, "transient", "transient")
    # Gathers record an out-of-bounds index in a status slot of their own (16 bytes used, one
    # binding alignment apart; the runtime reads them after each run and names the dispatch):
    # kernels.Plan.status.
    from halbench.bundle.manifest import BINDING_ALIGNMENT
    from halbench.compiler.codegen.kernels import gemm_split, uses_extract

    gathering = [i for i, d in enumerate(g.ops) if uses_extract(d)]
    if gathering:
        buffer("status", BINDING_ALIGNMENT * len(gathering), "status", "status")
    splits = {i: sp for i, d in enumerate(g.ops) if (sp := gemm_split(d, g)) is not None}

    def where(v: str) -> tuple[int, int]:
        key, off = g.storage[g.root(v)]
        return ids[key], off

    def overlaps(a: tuple[int, int, int], rs: list[tuple[int, int, int]]) -> bool:
        return any(a[0] == b[0] and a[1] < b[2] and b[1] < a[2] for b in rs)

    # Where barriers go: before a dispatch that depends on one since the last barrier.
    tensor_binds: list[list[BufferRange]] = []
    barrier_before: list[bool] = []
    pending_w: list[tuple[int, int, int]] = []
    pending_r: list[tuple[int, int, int]] = []
    for d in g.ops:
        binds, reads, writes = [], [], []
        for k, v in enumerate(d.inputs + d.outputs):
            bid, off = where(v)
            n = max(g.types[v].nbytes, 4)  # an empty tensor is still bound (to a word nobody reads)
            binds.append(BufferRange(bid, off, n))
            (reads if k < len(d.inputs) else writes).append((bid, off, off + n))
        cut = any(overlaps(r, pending_w) for r in reads) or any(overlaps(w, pending_w + pending_r) for w in writes)
        if cut:
            pending_w, pending_r = [], []
        pending_r += reads
        pending_w += writes
        tensor_binds.append(binds)
        barrier_before.append(cut)

    # Split-K scratch, after the status slot: scratch_layout says where each split dispatch's range starts.
    scratch_at, total = scratch_layout([(barrier_before[i], (splits[i].partial_bytes, splits[i].counter_bytes)
                                         if i in splits else None) for i in range(len(g.ops))],
                                       BINDING_ALIGNMENT)
    if splits:
        buffer("scratch", total, "scratch", "scratch")

    steps: list[Any] = []
    for i, d in enumerate(g.ops):
        binds = list(tensor_binds[i])
        if barrier_before[i]:
            steps.append(BarrierStep())
        if i in gathering:
            binds.append(BufferRange(ids["status"], BINDING_ALIGNMENT * gathering.index(i), 16))
        if i in splits:
            binds.append(BufferRange(ids["scratch"], scratch_at[i], splits[i].nbytes))
        flops, nbytes = g.costs.get(i, (0, 0))
        # What each kernel touches: its tensors whole, the status slot's two words, the split-K
        # scratch whole; the runtime refuses a bundle whose ranges are shorter (bundle/check.py).
        n_values = len(d.inputs) + len(d.outputs)
        touched = tuple(r.length if k < n_values or r.buffer == ids.get("scratch") else 8
                        for k, r in enumerate(binds))
        steps.append(DispatchStep(i, tuple(binds), d.attrs["name"], flops, nbytes, touched,
                                  tuple(d.attrs.get("nodes") or ())))
    copies = []
    for spec, (user, v) in zip(outputs, g.outputs):
        bid, off = where(v)
        if bid != spec.buffer:
            copies.append(CopyStep(BufferRange(bid, off), BufferRange(spec.buffer, 0), -(-spec.nbytes // 4) * 4))
    if copies:
        if steps:
            steps.append(BarrierStep())
        steps += copies
    fn = Function(g.name if g.name else "main", tuple(inputs), tuple(outputs), tuple(steps))
    from halbench import __version__ as version

    return Manifest(tuple(buffers), tuple(executables), (fn,), tuple(weights),
                    created_by=f"halbench {version}", source=dict(source),
                    options={"target_devices": list(options.target_devices), "weights": options.weights,
                             "precision": options.precision},
                    targets=tuple({"device": dev, "target": _target_name(dev, options)}
                                  for dev in options.target_devices))


def _target_name(api: str, options: CompileOptions) -> str:
    return options.resolved_targets().get(api).name if api in options.resolved_targets() else "host"


#: A dump of every driver's devices is tens of KiB; a file far larger is something else.
_MAX_DUMP_BYTES = 16 << 20


def _resolve_target(api: str, name: str | None, device: str | None = None) -> Any:
    """A target from a name, ``auto`` (probe this machine), or a dump-devices JSON file;
    ``device`` (a URI) picks the device of the machine or the dump."""
    from halbench.compiler import targets as T
    from halbench.compiler.backends import backend

    if name is None:
        return T.default_target(api)
    if name in ("auto", "host"):
        from halbench.drivers import get_driver, select_device

        if device:
            return T.target_from_device(select_device(device), api)
        devices = [d for drv in backend(api).drivers for d in get_driver(drv).query_available_devices()]
        if not devices:
            raise UserError(f"--{backend(api).target_option}=auto: no {api} device here; "
                            f"name a target (halbench list-targets --api {api})")
        return T.target_from_device(devices[0], api)
    if name.endswith(".json"):
        try:
            if Path(name).stat().st_size > _MAX_DUMP_BYTES:
                raise UserError(f"{name} is over {_MAX_DUMP_BYTES >> 20} MiB: not a device dump")
            doc = json.loads(Path(name).read_text())
        except (OSError, ValueError) as e:
            raise UserError(f"cannot read the device dump {name}: {e}") from None
        if not isinstance(doc, dict):
            raise UserError(f"{name} is not a dump-devices JSON document (write one with "
                            f"`halbench dump-devices --format json > {name}`)")
        return T.target_from_device(doc, api, select=device)
    return T.resolve_target(api, name)
