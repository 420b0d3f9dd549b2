"""Measure GEMM configurations of each problem on one device and keep the fastest correct one.

For each problem: the rule's configuration first (what compile uses without tuning), then a
coordinate search: workgroup tiles and thread tiles (stage 1; its fastest wide thread tiles again
with the other inner loop, frag_retries), then, around the best of those,
the split-K slices, the K depth of a step and the thread ownership (stage 2); a low-wave GEMM
with room for deeper splits than the rule takes (tuning.split_k_room) tries those first (stage 0). Every candidate is
compiled as a one-dispatch bundle from a one-op IR graph (no front end), run through the HAL,
checked against the NumPy reference (a wrong result is discarded) and timed with device
timestamps (median of ``samples`` runs after ``warmup``). Compiles run in a thread pool (glslang
and NVRTC work outside the GIL); runs are one at a time.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from halbench.bundle.manifest_schema import GemmProblemDoc
from halbench.compiler.codegen.tuning import GEMM_FRAGMENTS, GLSL_STAGED, GemmConfig, Tuning, tuning_for
from halbench.errors import HalbenchError, UserError
from halbench.tune.problems import build_graph, gemm_dims, reference

__all__ = ["Measured", "ProblemResult", "TuneRun", "candidates", "frag_retries", "measure_bundle", "split_counts",
           "tune"]

#: Relative error (max |out - ref| / max |ref|) above which a candidate's result is wrong: f32
#: sums in another order differ by ~1e-6; a kernel that skips or repeats a tile is off by O(1).
TOLERANCE = 1e-3

#: Workgroup tile x thread tile shapes stage 1 tries (bm, bn, tm, tn), big to small.
TILES = ((128, 128, 8, 8), (128, 64, 8, 8), (64, 128, 8, 8), (128, 64, 8, 4), (64, 128, 4, 8),
         (64, 64, 8, 8), (64, 64, 4, 4), (128, 32, 8, 2), (32, 128, 2, 8), (64, 32, 4, 2),
         (32, 64, 2, 4), (32, 32, 2, 2), (64, 64, 4, 8), (64, 64, 8, 4), (32, 64, 4, 4),
         (64, 32, 4, 4), (32, 32, 4, 4),
         # GEMV-like (M of a few rows: the fully connected layers of a batch-1 CNN): few rows, wide
         (8, 128, 1, 4), (8, 256, 1, 8), (4, 256, 1, 4), (2, 256, 1, 2), (16, 128, 2, 4), (8, 64, 1, 2))


#: Rows at most which a GEMM counts as skinny (candidates' waste along M is not held against them).
SKINNY_M = 8


@dataclass
class Measured:
    config: GemmConfig
    time_ns: float | None = None
    error: str | None = None  # why it was discarded (compile error, wrong result, not applicable)
    path: Path | None = None  # the candidate's bundle, for the confirming re-measurement

    @property
    def ok(self) -> bool:
        return self.error is None and self.time_ns is not None


@dataclass
class ProblemResult:
    key: str
    problem: GemmProblemDoc
    rule: Measured
    tried: list[Measured] = field(default_factory=list)
    #: the winner after the rule and the search's fastest were timed again, back to back
    confirmed: Measured | None = None

    @property
    def best(self) -> Measured | None:
        if self.confirmed is not None:
            return self.confirmed
        good = [m for m in [self.rule, *self.tried] if m.ok]
        return min(good, key=lambda m: m.time_ns) if good else None  # type: ignore[arg-type,return-value]

    @property
    def flops(self) -> int:
        b, m, n, k = gemm_dims(self.problem)
        return 2 * b * m * n * k

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {"key": self.key, "flops": self.flops,
                "rule": {"config": self.rule.config.to_dict(), "time_ns": self.rule.time_ns,
                         "error": self.rule.error},
                "best": None if best is None else {"config": best.config.to_dict(), "time_ns": best.time_ns},
                "speedup": (self.rule.time_ns / best.time_ns if best is not None and self.rule.ok
                            and best.time_ns else None),
                "tried": len(self.tried), "discarded": [
                    {"config": m.config.label(), "why": m.error} for m in self.tried if m.error]}


@dataclass
class TuneRun:
    api: str
    target: str
    device: str
    results: list[ProblemResult]
    cache: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"api": self.api, "target": self.target, "device": self.device, "cache": self.cache,
                "problems": [r.to_dict() for r in self.results]}


def _waste(bm: int, bn: int, m: int, n: int) -> float:
    """Computed outputs per useful one: a 128-row tile over 8 rows computes 16x what it keeps."""
    return (-(-m // bm) * bm * -(-n // bn) * bn) / max(m * n, 1)


def candidates(t: Tuning, base: GemmConfig, max_split: int, stage: int,
               mn: tuple[int, int] | None = None) -> list[GemmConfig]:
    """Stage 0: the base with other split-K slice counts only (up to ``max_split``, what the
    schedule reserved); stage 1: tile shapes at the base's depth, ownership and split (with
    ``mn``, the GEMM's M and N: only tiles that waste little more than the least wasteful one);
    stage 2: around ``base``, other slice counts first, then (Vulkan) the other register staging
    (``double``: two shared stages, ``vec_a``: A in 16-byte loads), then other depths (BK) and the
    other ownership, then the other inner loop (``frag``). Only configurations the target can run
    (``GemmConfig.problem``)."""
    out: list[GemmConfig] = []
    if stage == 0:
        out = [replace(base, split=s) for s in split_counts(max_split)]
    elif stage == 1:
        tiles = list(TILES)
        if mn is not None:
            least = min(_waste(bm, bn, *mn) for bm, bn, _, _ in tiles)
            # (a GEMM of at most SKINNY_M rows streams its B operand: a tile of up to 8 rows
            # wastes arithmetic, not memory traffic, so it stays a candidate)
            limit = max(1.5, 1.25 * least, 8.0 if mn[0] <= SKINNY_M else 0.0)
            tiles = [x for x in tiles if _waste(x[0], x[1], *mn) <= limit]
        for bm, bn, tm, tn in tiles:
            bk = 16 if bm * bn < 128 * 128 else 8
            out.append(replace(base, bm=bm, bn=bn, bk=bk, tm=tm, tn=tn))
    else:
        for s in split_counts(max_split):
            out.append(replace(base, split=s))
        if t.api in GLSL_STAGED:  # gemm.j2 DB / VA: measured to win on some GEMMs, lose on others
            out += [replace(base, double=not base.double), replace(base, vec_a=not base.vec_a)]
        for bk in (8, 16, 32):
            out.append(replace(base, bk=bk))
        if base.tm % 4 == 0 or base.tn % 4 == 0:
            out.append(replace(base, runs=not base.runs))
        if t.api in GEMM_FRAGMENTS:  # the other inner loop (gemm.j2 FRAG): double-buffered fragments
            out.append(replace(base, frag=not base.frag))
    seen: set[GemmConfig] = set()
    return [c for c in out if c != base and not (c in seen or seen.add(c))  # type: ignore[func-returns-value]
            and c.problem(t, max_split) is None]


#: After stage 1, this many of its fastest wide-tiled configurations are tried again with the other
#: inner loop (frag_retries).
FRAG_RETRIES = 3
#: Thread tiles at least this many outputs wide count as wide: their accumulators and fragments
#: fill the registers, so whether the fragments are double-buffered (``frag``) decides their speed.
FRAG_WIDE = 32


def frag_retries(t: Tuning, measured: Sequence[Measured], max_split: int) -> list[GemmConfig]:
    """The fastest correct wide-tiled configurations measured so far (at most FRAG_RETRIES), each
    with the other inner loop (``frag`` flipped): stage 1 judges every tile at one inner loop, and a
    wide one can lose there and win with the other. H200, MiniLM-L6 b8's 384 -> 1536 projection:
    64x64 8x4 49.2 us without frag, 42.2 with it, where stage 1's best (32x64 4x4) took 45.6
    (docs/examples/h200-gemm-variants-2.txt). Only configurations the target can run, on APIs
    with the frag loop (GEMM_FRAGMENTS)."""
    if t.api not in GEMM_FRAGMENTS:
        return []
    ranked = sorted((m for m in measured if m.ok), key=lambda m: m.time_ns)  # type: ignore[arg-type,return-value]
    seen = {m.config for m in measured}
    out: list[GemmConfig] = []
    for m in ranked:
        c = m.config
        if c.tm * c.tn < FRAG_WIDE:
            continue
        flip = replace(c, frag=not c.frag)
        if flip not in seen and flip not in out and flip.problem(t, max_split) is None:
            out.append(flip)
        if len(out) == FRAG_RETRIES:
            break
    return out


def split_counts(max_split: int) -> list[int]:
    """The split-K slice counts stage 2 tries: unsplit, the most reserved, half of it, and for a
    deep reservation (tuning.split_k_room) the counts between: 2, 3, 4, 6, 8, 12."""
    return sorted({1, max_split, max(max_split // 2, 1), *(s for s in (2, 3, 4, 6, 8, 12) if s < max_split)})


def _compile(problem: GemmProblemDoc, key: str, api: str, target: str, uri: str | None,
             cfg: GemmConfig | None, abi: str | None, out: Path) -> tuple[Path | None, dict | None, str | None]:
    """One candidate as a one-dispatch bundle at ``out``: (path, the variant's gemm record, error)."""
    from halbench.compiler.compile import CompileOptions, compile_graph

    opts = CompileOptions(target_devices=(api,), targets={api: target}, target_device_uri=uri,
                          tuning_cache="off", gemm_configs={(api, key): cfg} if cfg else {},
                          backend_options=_one_format(api, abi))
    try:
        cm = compile_graph(build_graph(problem), opts, {"path": "tune", "sha256": ""})
        cm.write(out)
    except HalbenchError as e:
        return None, None, f"compile failed: {str(e).splitlines()[0][:160]}"
    gemm = next((v.gemm for e in cm.manifest.executables for v in e.variants if v.gemm), None)
    if gemm is None:
        return None, None, "the compiler did not use the scalar GEMM for this problem"
    if cfg is not None and gemm["source"] != "tuned":
        return None, None, "the compiler refused this configuration for the target"
    return out, dict(gemm), None


def _one_format(api: str, abi: str | None) -> dict[str, str]:
    """Backend options that build one executable format: a timing needs no second one."""
    if api == "vulkan" and abi:
        return {"vulkan-dispatch-abi": abi}
    if api == "cuda":
        return {"cuda-formats": "cubin"}
    return {}


#: The most times measure_bundle repeats a kernel in one submission (Module.profile allows more).
MAX_BUSY_REPEAT = 256


def measure_bundle(device: Any, path: Path, inputs: Sequence[np.ndarray], ref: np.ndarray,
                   samples: int, warmup: int, warmup_s: float = 0.0,
                   busy_s: float = 1e-3) -> tuple[float | None, str | None]:
    """(median device ns of the bundle's one dispatch, None) or (None, why it is discarded):
    the output is checked against ``ref`` first, so a wrong kernel is never timed. ``warmup_s``
    keeps the device busy with the kernel that long first: a GPU left idle while candidates
    compile drops its clocks (NVIDIA's Vulkan driver measured 1.7x slower for ~0.2 s). Each
    submission repeats the kernel until it takes about ``busy_s`` (Module.profile's ``repeat``):
    a kernel of a few microseconds submitted alone leaves the GPU idle between submissions, and
    NVIDIA's Vulkan driver then keeps the H100 at its idle clock (one-op timings 3-6x slow)."""
    from halbench.runtime import Module

    try:
        with Module.load(path, device) as mod:
            out = mod.invoke(inputs=list(inputs))[0]
            if out.shape != ref.shape:
                return None, f"wrong result shape {list(out.shape)}, expected {list(ref.shape)}"
            scale = float(np.max(np.abs(ref))) if ref.size else 1.0
            err = float(np.max(np.abs(out.astype(np.float64) - ref))) / (scale or 1.0) if out.size else 0.0
            if not math.isfinite(err) or err > TOLERANCE:
                return None, f"wrong result (relative error {err:.2g})"
            repeat = 1
            if busy_s > 0:
                once = mod.profile(inputs=list(inputs), runs=3, warmup=1, dispatch_times=False).median_ns()
                repeat = max(1, min(MAX_BUSY_REPEAT, int(busy_s * 1e9 // max(once, 1.0))))
            t0 = time.monotonic()
            while time.monotonic() - t0 < warmup_s:
                mod.profile(inputs=list(inputs), runs=10, warmup=0, dispatch_times=False, repeat=repeat)
            prof = mod.profile(inputs=list(inputs), runs=samples, warmup=warmup, repeat=repeat)
    except HalbenchError as e:
        return None, f"run failed: {str(e).splitlines()[0][:160]}"
    per = prof.dispatch_median_ns()
    return (float(per[0]) if per else prof.median_ns()), None


@dataclass
class _Problem:
    """One problem being tuned on an open device: its inputs, reference and compile settings."""

    key: str
    problem: GemmProblemDoc
    index: int
    deadline: float
    inputs: list[np.ndarray]
    ref: np.ndarray
    max_split: int
    mn: tuple[int, int]
    compiled: int = 0


@dataclass
class _Session:
    device: Any
    pool: ThreadPoolExecutor
    tmp: Path
    api: str
    spec: str  # the target as CompileOptions names it
    uri: str
    abi: str | None
    samples: int
    warmup: int
    jobs: int
    warmup_s: float = 0.0

    def run(self, pr: _Problem, cfgs: list[GemmConfig | None]) -> list[Measured]:
        """Compile ``cfgs`` (None: the rule) a pool's width at a time and measure them in order,
        stopping at the problem's deadline (the rule is always measured)."""
        out: list[Measured] = []
        for at in range(0, len(cfgs), self.jobs):
            if cfgs[at] is not None and time.perf_counter() >= pr.deadline:
                break
            out += self._chunk(pr, cfgs[at:at + self.jobs])
        return out

    def confirm(self, pr: _Problem, res: ProblemResult) -> None:
        """Time the rule and the fastest candidate again, one after the other, and keep the
        faster of those two: the first kernel timed in a process pays warm-up costs the others
        do not, and the fastest of many noisy candidates is flattered by its noise."""
        best = res.best
        if best is None or best is res.rule or not res.rule.ok:
            return
        again = []
        for m in (res.rule, best):
            ns, err = measure_bundle(self.device, m.path, pr.inputs, pr.ref, self.samples,  # type: ignore[arg-type]
                                     self.warmup, self.warmup_s)
            again.append(Measured(m.config, ns, err, m.path) if err is None else m)
        res.rule = again[0] if again[0].ok else res.rule
        res.confirmed = min((m for m in again if m.ok), key=lambda m: m.time_ns, default=best)  # type: ignore[arg-type,return-value]

    def _chunk(self, pr: _Problem, cfgs: list[GemmConfig | None]) -> list[Measured]:
        futures = [self.pool.submit(_compile, pr.problem, pr.key, self.api, self.spec, self.uri, c, self.abi,
                                    self.tmp / f"{pr.index}-{pr.compiled + j}.hbx") for j, c in enumerate(cfgs)]
        pr.compiled += len(cfgs)
        # Every compile of the chunk ends before the first timing: compiles running beside a
        # timing starve the submitting thread, the GPU idles between runs and lowers its clocks
        # (measured on an H100 through Vulkan: 2-5x the time of the same kernel timed alone).
        built = [job.result() for job in futures]
        out = []
        for c, (path, gemm, err) in zip(cfgs, built):
            if c is None and err is not None:  # the rule itself: nothing to compare with
                raise UserError(f"problem {pr.key} on {self.uri}: {err}")
            cfg = c if c is not None else GemmConfig(**gemm["config"])  # type: ignore[index]
            if err is None and (c is None or time.perf_counter() < pr.deadline):
                # Every candidate is timed after warmup_s of load: the GPU idles while the next
                # module loads and its output is checked, and through Vulkan an H100 then timed
                # some candidates 3-6x slow (a warm-up for the first of a chunk only was not enough).
                ns, err = measure_bundle(self.device, path, pr.inputs, pr.ref, self.samples,  # type: ignore[arg-type]
                                         self.warmup, self.warmup_s)
                out.append(Measured(cfg, ns, err, path))
            elif err is not None:
                out.append(Measured(cfg, None, err))
        return out


def _target(api: str, target: str | None, uri: str) -> tuple[str, Any]:
    """(the name candidates compile for, the Target): the table's entry of that name, what
    ``compile --API-target NAME`` uses, without probing the device again per compile; a device
    the table lacks compiles for ``auto``."""
    from halbench.compiler.compile import _resolve_target
    from halbench.compiler.targets import resolve_target

    spec = target or _resolve_target(api, "auto", uri).name
    try:
        resolve_target(api, spec)
    except HalbenchError:
        if target:
            raise
        spec = "auto"
    return spec, _resolve_target(api, spec, uri)


def tune(problems: dict[str, GemmProblemDoc], device_uri: str, *, target: str | None = None,
         budget_s: float = 60.0, samples: int = 10, warmup: int = 3, max_candidates: int = 24,
         jobs: int = 8, warmup_s: float = 0.2, log: Callable[[str], None] | None = None,
         on_problem: Callable[[TuneRun], None] | None = None, cache: str | None = None,
         seed: bool = False) -> TuneRun:
    """Tune every problem on ``device_uri`` within about ``budget_s`` seconds in all (the rule's
    configuration of each is always measured). ``on_problem`` gets the run so far after each
    problem (the CLI saves it, so a run cut short keeps what it measured). With ``seed``, the
    configuration that the tuning cache ``cache`` (directory or file; None: the default one, as
    save_run) holds for a problem is measured right after the rule and searched around:
    re-tuning starts from what was found before."""
    from halbench.compiler.backends import backend_for_driver
    from halbench.compiler.codegen.kernels import gemm_split
    from halbench.drivers import create_device, select_device

    info = select_device(device_uri)
    api = backend_for_driver(info.driver).name
    if api not in ("vulkan", "cuda", "hip", "webgpu"):
        raise UserError(f"{device_uri}: the {api} backend has no GPU GEMM to tune; give a vulkan://, "
                        f"cuda://, hip:// or webgpu:// device")
    spec, tgt = _target(api, target, info.uri)
    t = tuning_for(tgt, api)
    seeds: dict[str, GemmConfig] = {}
    if seed:  # the cache the run merges into (a file not written yet holds nothing)
        from halbench.compiler.tuning_cache import cache_file, configs_for

        path = cache_file(api, tgt.name, cache)
        if path is not None and path.exists():
            seeds = configs_for(api, tgt.name, path)
    say = log or (lambda s: None)
    start = time.perf_counter()
    results: list[ProblemResult] = []
    with create_device(info) as dev:
        # One Vulkan ABI is enough to time a kernel: the one the device prefers.
        abi = ("bda" if dev.supports("vulkan-spirv-bda-v1") else "descriptors") if api == "vulkan" else None
    with tempfile.TemporaryDirectory(prefix="halbench-tune-") as tmp, ThreadPoolExecutor(max(1, jobs)) as pool:
        session = _Session(None, pool, Path(tmp), api, spec, info.uri, abi, samples, warmup, max(1, jobs),
                           max(0.0, float(warmup_s)))
        for i, (key, p) in enumerate(problems.items()):
            # A device of its own per problem: on an H100 through Vulkan, a batch matmul tuned
            # after a convolution on the same device timed 4x slower than on a fresh one (and
            # than inside its model); the cause is not known, a fresh device avoids it.
            with create_device(info) as dev:
                session.device = dev
                rng = np.random.default_rng(i)
                inputs = [rng.uniform(-1, 1, size=tuple(s)).astype(np.float32) for s in (p.a, p.b)]
                g = build_graph(p)
                sp = gemm_split(g.ops[0], g)
                _, m, n, _ = gemm_dims(p)
                pr = _Problem(key, p, i, start + budget_s * (i + 1) / len(problems), inputs,
                              reference(p, *inputs).astype(np.float64),
                              sp.room if sp is not None and api != "webgpu" else 1, (m, n))
                rule = session.run(pr, [None])[0]
                res = ProblemResult(key, p, rule)
                seed = seeds.get(key)
                if seed is not None and seed != rule.config and seed.problem(t, pr.max_split) is None:
                    res.tried += session.run(pr, [seed])
                # A GEMM the schedule reserved deeper splits for than the rule takes (a low-wave
                # one, tuning.split_k_room) tries those first, at the rule's tiles: they are what
                # fills the machine, and a short budget must not end before them.
                deeper = sp is not None and pr.max_split > sp.slices
                for stage in ((0, 1, 2) if deeper else (1, 2)):
                    left = max_candidates - len(res.tried)
                    if left <= 0 or time.perf_counter() >= pr.deadline:
                        break
                    base = res.best.config if res.best else rule.config
                    cands = [c for c in candidates(t, base, pr.max_split, stage, pr.mn)
                             if c != rule.config and all(c != m.config for m in res.tried)]
                    res.tried += session.run(pr, cands[:left])
                    if stage == 1:  # the fastest wide tiles with the other inner loop
                        left = max_candidates - len(res.tried)
                        if left > 0 and time.perf_counter() < pr.deadline:
                            flips = [c for c in frag_retries(t, [res.rule, *res.tried], pr.max_split)
                                     if c != rule.config]
                            res.tried += session.run(pr, flips[:left])
                session.confirm(pr, res)
                results.append(res)
                if on_problem is not None:
                    on_problem(TuneRun(api, tgt.name, info.uri, list(results)))
                best = res.best
                say(f"{i + 1}/{len(problems)} {key}: rule {_ms(rule.time_ns)}, best {_ms(best and best.time_ns)} "
                    f"({best.config.label() if best else '-'}), {len(res.tried)} tried")
    return TuneRun(api, tgt.name, info.uri, results)


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f} ms"
