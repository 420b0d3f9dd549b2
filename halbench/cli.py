"""The ``halbench`` command line: parses options, prints, sets exit codes. No logic here."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

import click

from halbench import __version__
from halbench.errors import HalbenchError, UserError

FORMAT = click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
                      show_default=True, help="Output format.")


def _format_in_context(ctx: click.Context, param: click.Parameter, value: str) -> None:
    ctx.meta["halbench.format"] = value


#: --format for commands whose signatures grow often (run-suite, compile): the value goes to
#: click's context and the body reads it with _fmt(), so the option touches no signature.
FORMAT_CTX = click.option("--format", type=click.Choice(["text", "json"]), default="text",
                          show_default=True, expose_value=False, callback=_format_in_context,
                          help="Output format.")


def _fmt() -> str:
    return click.get_current_context().meta.get("halbench.format", "text")


def _api_names(with_aliases: bool = False) -> list[str]:
    """What --target-device takes: every compiler backend (halbench.compiler.backends)."""
    from halbench.compiler.backends import api_names

    return list(api_names(with_aliases))


def _target_apis() -> list[str]:
    from halbench.compiler.targets import apis

    return list(apis())


class _Group(click.Group):
    """Every failure is one line on stderr and a documented exit code: a HalbenchError its own
    (1, or 2 for "nothing to do"), a file-system error 1, a bug 3. ``--debug`` shows tracebacks."""

    def get_command(self, ctx: click.Context, name: str):
        cmd = super().get_command(ctx, name)
        if cmd is not None:
            _document_exit_codes(name, cmd)
        return cmd

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except HalbenchError as e:
            if ctx.meta.get("halbench.debug"):
                raise
            click.echo(f"halbench: error: {e}", err=True)
            sys.exit(e.exit_code)
        except BrokenPipeError:  # `halbench ... | head`: the reader has what it wanted
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            sys.exit(0)
        except OSError as e:  # disk full, read-only folder, permission: the user's to fix
            if ctx.meta.get("halbench.debug"):
                raise
            where = f" ({e.filename})" if getattr(e, "filename", None) else ""
            click.echo(f"halbench: error: {e.strerror or e}{where}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("halbench: interrupted", err=True)
            sys.exit(130)
        except Exception as e:
            if ctx.meta.get("halbench.debug"):
                raise
            kind = "" if type(e).__name__ == "ChildBug" else f"{type(e).__name__}: "  # (its message has it)
            click.echo(f"halbench: internal error: {kind}{e} (a bug in halbench; run with "
                       f"--debug for the traceback)", err=True)
            sys.exit(3)


def _debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    ctx.meta["halbench.debug"] = value


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="halbench")
@click.option("--debug", is_flag=True, expose_value=False, is_eager=True, callback=_debug,
              help="Show tracebacks instead of one-line errors.")
def main() -> None:
    """halbench: what a GPU can do, and how fast real ML models run on it.

    Probe Vulkan, CUDA, HIP, WebGPU and CPU devices, run compiled models through halbench's
    own HAL with device timestamps, and compare results.

    Exit codes (every command): 0 success; 1 an error (one line on stderr), a failed
    benchmark, a regression or a mismatch; 2 unusable input or nothing to do; 3 a bug in
    halbench (rerun with --debug for its traceback); 130 interrupted.
    """


@main.command("list-peers")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def list_peers_cmd(fmt: str) -> None:
    """The peer runtimes run-suite --peer takes: modes, device kinds, installed or why not."""
    from halbench.peers import get_peer, peer_names

    rows = []
    for name in peer_names():
        peer = get_peer(name)
        why = peer.missing()
        rows.append({"peer": name, "installed": why is None, "version": peer.version() if why is None else None,
                     "reason": why, "modes": {m: {"devices": list(k), "what": d} for m, (k, d) in peer.modes.items()}})
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
        return
    for r in rows:
        state = f"{r['version']}" if r["installed"] else f"unavailable: {r['reason']}"
        click.echo(f"{r['peer']:12} {state}")
        for m, d in r["modes"].items():
            spec = r["peer"] if m == "default" else f"{r['peer']}/{m}"
            click.echo(f"  {spec:22} {', '.join(d['devices']):18} {d['what']}")


@main.command("list-drivers")
@FORMAT
def list_drivers(fmt: str) -> None:
    """List the HAL drivers, whether each is available here, and why not."""
    from halbench.drivers import query_available_drivers

    statuses = query_available_drivers()
    if fmt == "json":
        click.echo(json.dumps({"drivers": [s.to_dict() for s in statuses]}, indent=2))
        return
    width = max(len(s.name) for s in statuses)
    for s in statuses:
        state = f"available ({s.device_count} device{'s' if s.device_count != 1 else ''})" if s.available \
            else f"unavailable: {s.reason}"
        click.echo(f"{s.name:<{width}}  {s.description}")
        click.echo(f"{'':<{width}}  {state}")


@main.command("run-suite")
@click.argument("suite")
@FORMAT_CTX
@click.option("-o", "--output", default="results.json", show_default=True,
              help="Results file (JSON), written atomically when the run ends; finished benchmarks go to "
                   "OUTPUT.partial as they finish.")
@click.option("--device", "devices", multiple=True,
              help="Device pattern to run on instead of the suite's (repeatable): vulkan://*, cuda://0, *.")
@click.option("--only", multiple=True, help="Run only benchmarks whose name matches (glob, repeatable).")
@click.option("--report", "report_path", default=None, help="Also write an HTML report here.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--resume", is_flag=True, help="Continue an interrupted run from OUTPUT.partial.")
@click.option("--peer", "peers", multiple=True,
              help="Also run every model with this peer runtime on the same devices (repeatable): "
                   "torch/eager, torch/cudagraph, torch/compile, onnxruntime/cpu, onnxruntime/cuda, "
                   "onnxruntime/tensorrt, iree. `halbench list-peers` says which are installed.")
@click.option("--parallel", is_flag=True,
              help="Run every device of this host at once: one pinned process per physical device.")
@click.option("--cluster", default=None, metavar="ray://HOST:PORT|HOST:PORT|auto",
              help="Run on every device of every node of a Ray cluster (needs halbench[fleet]).")
@click.option("--precision", default=None, metavar="fp32|tf32|f16|bf16",
              help="Compile every model at this precision (as `compile --precision`), overriding the "
                   "suite's; the correctness tolerance follows it.")
def run_suite_cmd(suite: str, output: str, devices: tuple[str, ...], only: tuple[str, ...],
                  report_path: str | None, no_progress: bool, resume: bool, peers: tuple[str, ...],
                  parallel: bool, cluster: str | None, precision: str | None) -> None:
    """Run a benchmark SUITE (a YAML file, or a shipped suite name: smoke, models, device-peaks).

    Exit codes: 0 every benchmark ran and was correct (one skipped because a feature is missing
    here, or a wildcard pattern such as cuda://* that matches nothing, does not count against
    it); 1 a benchmark errored or computed a wrong result, or a device named explicitly (cuda://7,
    not a wildcard) is not on this machine (all others are still measured and written); 2 the
    suite is unusable or selects nothing (nothing is written)."""
    from halbench.bench.runner import run_suite
    from halbench.bench.suite import load_suite
    from halbench.files import check_output

    if report_path:
        check_output(report_path, output, what="report")
    from halbench.peers import parse_peer

    peer_specs = [parse_peer(p) for p in peers]
    try:
        s = load_suite(suite)
    except UserError as e:  # an unusable suite: exit 2 as documented, nothing written
        from halbench.errors import BadOption

        raise BadOption(str(e)) from None
    if precision is not None:
        from halbench.bench.suite import with_precision

        if parallel or cluster:  # their workers read the suite file again
            from halbench.errors import BadOption

            raise BadOption("--precision runs in one process only; with --parallel or --cluster, give the "
                            "suite's model entries precision: instead")

        try:
            s = with_precision(s, precision)
        except UserError as e:  # a bad value: exit 2 like an unusable suite, nothing written
            from halbench.errors import BadOption

            raise BadOption(str(e)) from None
    common = {"devices": list(devices) or None, "only": list(only) or None, "progress": not no_progress,
              "command_line": ["halbench", *sys.argv[1:]], "resume": resume}
    if parallel and cluster:
        from halbench.errors import BadOption

        raise BadOption("--parallel and --cluster exclude each other (a cluster run is parallel already)")
    if cluster:
        from halbench.fleet.ray_fleet import run_cluster

        results = run_cluster(cluster, s, output, peers=list(peers), **common)
    elif parallel:
        from halbench.fleet import run_parallel

        results = run_parallel(s, output, peers=list(peers), **common)
    else:
        results = run_suite(s, output, peers=peer_specs, **common)
    counts: dict[str, int] = {}
    for b in results["benchmarks"]:
        counts[b["status"]] = counts.get(b["status"], 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    if _fmt() == "json":
        if report_path:
            from halbench.reports.report import write_report

            write_report([output], report_path)
        click.echo(json.dumps({"suite": s.name, "output": output, "report": report_path,
                               "benchmarks": len(results["benchmarks"]), "counts": counts,
                               "warnings": list(results["warnings"])}, indent=2))
        if counts.get("error") or counts.get("wrong"):
            sys.exit(1)
        return
    skipped_peers = {(b["runtime"], b["device"], b.get("error")) for b in results["benchmarks"]
                     if b.get("runtime", "halbench") != "halbench" and b["status"] == "skipped"}
    for runtime, device, why in sorted(skipped_peers, key=str):
        click.echo(f"peer {runtime} skipped on {device}: {why}", err=True)
    click.echo(f"{s.name}: {len(results['benchmarks'])} benchmark runs ({summary}) -> {output}")
    warnings = results["warnings"]
    for w in warnings[:5]:
        click.echo(f"warning: {w}", err=True)
    if len(warnings) > 5:
        click.echo(f"warning: ... and {len(warnings) - 5} more (in {output} and the report)", err=True)
    if report_path:
        from halbench.reports.report import write_report

        write_report([output], report_path)
        click.echo(f"report -> {report_path}")
    from halbench.bench.runner import named_devices_missing

    missing = named_devices_missing(results)
    for uri, why in missing:
        click.echo(f"error: device {uri} is named explicitly but is not here: {why}", err=True)
    if counts.get("error") or counts.get("wrong") or missing:
        sys.exit(1)


@main.command("fleet-resources")
@click.option("--format", "fmt", type=click.Choice(["json", "text"]), default="json", show_default=True,
              help="json: what `ray start --resources` takes; text: one resource per line.")
def fleet_resources_cmd(fmt: str) -> None:
    """This host's devices as Ray custom resources (JSON) for `ray start --resources`."""
    from halbench.fleet.ray_fleet import fleet_resources

    res = fleet_resources()
    click.echo(json.dumps(res) if fmt == "json" else "\n".join(f"{k} {v}" for k, v in res.items()))


def _probe_all() -> list:
    """Every registered driver's devices; an unavailable driver carries its reason."""
    from halbench.drivers import get_driver, query_available_drivers
    from halbench.probe.render import DriverDevices

    out = []
    for s in query_available_drivers():
        devices = tuple(get_driver(s.name).query_available_devices()) if s.available else ()
        out.append(DriverDevices(s.name, s.available, s.reason, s.description, devices))
    return out


def _dump(target: str | None) -> dict:
    """The dump document for everything, one driver (``vulkan``) or one device (``vulkan://0``)."""
    from halbench.drivers import get_driver, select_device
    from halbench.errors import DriverUnavailable
    from halbench.probe.render import dump_document
    from halbench.uri import parse_uri

    entries, keep = _probe_all(), None
    if target:
        u = parse_uri(target)
        name = get_driver(u.driver).name  # an unknown driver is a UserError listing the known ones
        entry = next(e for e in entries if e.name == name)
        if not entry.available:
            raise DriverUnavailable(entry.name, entry.reason)
        info = select_device(u) if "://" in target else None  # the driver picks it or lists the others
        keep = [(name, info.ordinal if info else None)]
    doc = dump_document(entries, __version__, keep)
    try:  # each device's recommended --*-target, where the compiler's target table is installed
        from halbench.compiler.targets import annotate_dump
    except ImportError:
        return doc
    return annotate_dump(doc)


@main.command("list-devices")
@click.argument("driver", required=False)
@FORMAT
def list_devices(driver: str | None, fmt: str) -> None:
    """List devices, one per line: URI, name and UUID (all drivers, or only DRIVER)."""
    from halbench.probe.render import device_list, render_device_list

    listing = device_list(_dump(driver))
    if fmt == "json":
        click.echo(json.dumps(listing, indent=2))
    else:
        click.echo(render_device_list(listing), nl=False)


@main.command("dump-devices")
@click.argument("target", required=False, metavar="[DRIVER|URI]")
@FORMAT
def dump_devices(target: str | None, fmt: str) -> None:
    """Dump what each device is and can do (all drivers, one DRIVER, or one device URI)."""
    from halbench.probe.render import render_text

    doc = _dump(target)
    click.echo(json.dumps(doc, indent=2) if fmt == "json" else render_text(doc), nl=fmt == "json")


@main.command("list-targets")
@click.option("--api", type=click.Choice(_target_apis()), default=None,
              help="Only targets usable through this API.")
@FORMAT
def list_targets_cmd(api: str | None, fmt: str) -> None:
    """List the compiler targets: architectures, code names and products, with their limits,
    matrix units and published peaks. Any name listed works as --vulkan-target, --cuda-target
    or --rocm-target."""
    from halbench.compiler.targets import format_table, list_targets

    targets = list_targets(api)
    if fmt == "json":
        click.echo(json.dumps({"targets": [t.to_dict() for t in targets]}, indent=2))
        return
    click.echo(format_table(targets, api))


@main.command("check")
@click.argument("model", metavar="MODEL.onnx", type=click.Path(dir_okay=False))
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=1x3x224x224",
              help="Static shape for an input with dynamic dimensions (repeatable).")
@click.option("--freeze-input", "frozen", multiple=True, metavar="NAME=2xi64=1,2",
              help="Make an input a constant (as compile --freeze-input).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, 1e6), default=None, metavar="SECONDS",
              help="Stop a node's compile after SECONDS and give that node the verdict; 0: no limit "
                   "[default: $HALBENCH_COMPILE_TIMEOUT, else no limit].")
@FORMAT
def check_cmd(model: str, input_shapes: tuple[str, ...], frozen: tuple[str, ...], timeout_s: float | None,
              fmt: str) -> None:
    """Say, before compiling, which nodes of an ONNX model this halbench cannot compile, and why.
    Exits 1 when some cannot."""
    try:
        from halbench.compiler.check import check_model, format_verdicts
    except ImportError as e:
        raise UserError(f"the halbench compiler is not available here ({e}); install halbench[compiler]") from None
    verdicts = check_model(model, _input_shapes(input_shapes), _frozen_inputs(frozen), timeout_s=timeout_s)
    if fmt == "json":
        click.echo(json.dumps({"model": model, "ok": all(v.ok for v in verdicts),
                               "nodes": [v.to_dict() for v in verdicts]}, indent=2))
    else:
        click.echo(format_verdicts(verdicts, model))
    if not all(v.ok for v in verdicts):
        sys.exit(1)


@main.command("list-ops")
@click.option("--backend", default=None, metavar="local|vulkan|cuda",
              help="Only this backend's columns of the ONNX table.")
@FORMAT
def list_ops_cmd(backend: str | None, fmt: str) -> None:
    """List the ops the compiler takes: linalg ops (MLIR input) and ONNX ops, with how many ONNX
    backend node tests each passes per device (measured by scripts/onnx_conformance.py)."""
    from halbench.compiler.ops import format_ops, linalg_ops, onnx_support

    if fmt == "json":
        click.echo(json.dumps({"linalg": linalg_ops(), "onnx": onnx_support()}, indent=2))
        return
    click.echo(format_ops(backend))


def _iree_listing(kind: str):
    """IREE's ``iree-run-module --list_drivers / --list_devices[=D] / --dump_devices[=D]``."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        if value is None or ctx.resilient_parsing:
            return
        driver = None if value in ("", "*") else value
        fmt = "text"
        if kind == "drivers":
            ctx.invoke(list_drivers, fmt=fmt)
        elif kind == "devices":
            ctx.invoke(list_devices, driver=driver, fmt=fmt)
        else:
            ctx.invoke(dump_devices, target=driver, fmt=fmt)
        ctx.exit(0)

    return callback


@main.command("run-module")
@click.option("--device", default=None, metavar="URI",
              help="Device to run on, e.g. local-sync://, vulkan://0, cuda, rocm.  [required]")
@click.option("--module", "module_path", default=None, type=click.Path(dir_okay=False), metavar="FILE.hbx",
              help="Compiled bundle (halbench compile -o FILE.hbx; any extension, .vmfb too).  [required]")
@click.option("--function", default=None, metavar="NAME",
              help="Function to run; may be omitted when the module has one.")
@click.option("--input", "inputs", multiple=True, metavar="VALUE",
              help="One per function input, in order, in IREE's syntax: 1x3x224x224xf32=0, "
                   "2x2xf32=1,2,3,4, f32=1.5, 1x3xf32=@x.npy, @x.npy.")
@click.option("--output", "outputs", multiple=True, metavar="@FILE.npy",
              help="One per result, in order: @FILE.npy writes it (atomically), - prints it.")
@click.option("--expected_output", "--expected-output", "expected", multiple=True, metavar="VALUE",
              help="One per result, in --input's syntax ('-' skips one): compare and exit 1 on a mismatch.")
@click.option("--expected_f32_threshold", "--expected-f32-threshold", "threshold", type=float, default=1e-4,
              show_default=True, help="Largest absolute difference --expected_output accepts for floats.")
@click.option("--print-max-element-count", "--output_max_element_count", "max_elements",
              type=click.IntRange(min=0), default=1024, show_default=True,
              help="Elide printed results after this many elements.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, help="Seconds to wait for the device.")
@click.option("--list_drivers", "--list-drivers", is_flag=False, flag_value="", default=None, is_eager=True,
              expose_value=False, callback=_iree_listing("drivers"), help="List the HAL drivers and exit.")
@click.option("--list_devices", "--list-devices", is_flag=False, flag_value="", default=None, is_eager=True,
              expose_value=False, metavar="[DRIVER]", callback=_iree_listing("devices"),
              help="List the devices (of DRIVER) and exit.")
@click.option("--dump_devices", "--dump-devices", is_flag=False, flag_value="", default=None, is_eager=True,
              expose_value=False, metavar="[DRIVER]", callback=_iree_listing("dump"),
              help="Dump what each device (of DRIVER) is and can do, and exit.")
@FORMAT
def run_module_cmd(device: str | None, module_path: str | None, function: str | None, inputs: tuple[str, ...],
                   outputs: tuple[str, ...], expected: tuple[str, ...], threshold: float, max_elements: int,
                   timeout_s: float, fmt: str) -> None:
    """Run one function of a compiled module and print its results, as iree-run-module does
    (--format json: the same results as one JSON document)."""
    from halbench.runtime.run import run_module

    if not device or not module_path:
        raise UserError(f"run-module needs --{'device' if not device else 'module'} "
                        f"(or --list_drivers / --list_devices / --dump_devices)")
    text, ok = run_module(device, module_path, function, inputs, outputs, max_elements, timeout_s,
                          expected=expected, threshold=threshold, fmt=fmt)
    click.echo(text)
    if not ok:
        sys.exit(1)


def _backend_options(f):
    """The compile command's per-API options, from the compiler backend registry: one
    ``--API-target`` per backend that takes targets, plus each backend's own options."""
    from halbench.compiler.backends import backends

    for b in reversed(list(backends().values())):
        for o in reversed(b.options):
            f = click.option(*(f"--{n}" for n in (o.name, *o.aliases)), f"opt__{o.name.replace('-', '_')}",
                             type=click.Choice(o.choices), default=None,
                             help=f"{o.help} [default: {o.default}]")(f)
        if b.target_option:
            names = [f"--{n}" for n in (b.target_option, *b.target_aliases)]
            f = click.option(*names, f"target__{b.name}", default=None, metavar="NAME",
                             help=f"{b.name} target: an arch, code name or product "
                                  f"(list-targets --api {b.name}), auto, or DUMP.json.")(f)
    return f


def _target_devices(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """``--target-device`` values (IREE's comma lists and backend names too) -> backend names."""
    from halbench.compiler.backends import canonical

    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    try:
        return tuple(dict.fromkeys(canonical(n) for n in names)) or ("local",)
    except UserError as e:
        raise click.BadParameter(str(e)) from None


def _list_target_backends(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``iree-compile --iree-hal-list-target-backends``: the backends, with IREE's names."""
    if not value or ctx.resilient_parsing:
        return
    from halbench.compiler.backends import backends

    click.echo("Registered target backends:")
    for b in backends().values():
        also = f" (also: {', '.join(b.aliases)})" if b.aliases else ""
        click.echo(f"    {b.name}{also}: {b.description}")
    ctx.exit(0)


def _ignored_rocm_flag(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None and not ctx.meta.get("rocm_bc_noted"):
        ctx.meta["rocm_bc_noted"] = True
        click.echo("halbench: note: --iree-rocm-link-bc / --iree-rocm-bc-dir are ignored: halbench builds "
                   "code objects with hipRTC, which links the ROCm device libraries itself", err=True)


@main.command("compile")
@click.argument("input_path", metavar="INPUT", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, metavar="OUT.hbx", help="Bundle to write (atomically).")
@click.option("--target-device", "--iree-hal-target-device", "--iree-hal-target-backends", "target_devices",
              multiple=True, callback=_target_devices, metavar="|".join(_api_names(with_aliases=True)),
              help="Device API to compile for (repeat, or a comma list, for several) [default: local]; "
                   "IREE's backend names work too.")
@click.option("--iree-hal-list-target-backends", is_flag=True, expose_value=False, is_eager=True,
              callback=_list_target_backends, help="List the target backends and exit.")
@click.option("--iree-rocm-link-bc", hidden=True, expose_value=False, callback=_ignored_rocm_flag)
@click.option("--iree-rocm-bc-dir", hidden=True, expose_value=False, callback=_ignored_rocm_flag)
@_backend_options
@click.option("--target", "target_all", default=None, metavar="auto|DUMP.json",
              help="Target of every GPU API not named above: 'auto' probes this machine's devices, "
                   "or a `dump-devices --format json` file from another machine.")
@click.option("--device", "target_device_uri", default=None, metavar="URI",
              help="With a target 'auto' or DUMP.json: the device whose target to use (vulkan://1, "
                   "cuda://GPU-...) [default: the first GPU].")
@click.option("--weights", type=click.Choice(["file", "random"]), default="file", show_default=True,
              help="Store weights in the bundle, or declare them seeded-random (small benchmark bundles).")
@click.option("--precision", default="fp32", show_default=True, metavar="fp32|tf32|f16|bf16",
              help="Operands of f32 matmuls and convolutions: fp32 exact, or rounded to tf32 / f16 / bf16 "
                   "for the matrix units (f32 accumulation; inputs, outputs and other ops stay f32).")
@click.option("--winograd", type=click.Choice(["auto", "on", "off"]), default=None,
              help="3x3 convolutions (stride 1, padding 1) as Winograd F(2x2, 3x3): auto takes those large "
                   "enough to gain, on every one [default: $HALBENCH_WINOGRAD, else auto].")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=1x3x224x224",
              help="Static shape for an input with dynamic dimensions (repeatable).")
@click.option("--freeze-input", "frozen", multiple=True, metavar="NAME=2xi64=1,2",
              help="Make an input a constant of the program (repeatable): for shape operands a model "
                   "takes as inputs (a Reshape's shape, a Reduce's axes). Values as run-module --input.")
@click.option("--dump-after", default=None, metavar="PASS", help="Print the IR after PASS (or all).")
@click.option("--statistics", is_flag=True, help="Print compile statistics.")
@click.option("--tuning-cache", default=None, metavar="PATH|off",
              help="GEMM configurations measured by `halbench tune`: a directory of <api>-<target>.json "
                   "files or one such file, or off [default: $HALBENCH_TUNING_CACHE, else "
                   "~/.cache/halbench/tuning].")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, 1e6), default=None, metavar="SECONDS",
              help="Stop the compile after SECONDS (it runs in a child process); 0: no limit "
                   "[default: $HALBENCH_COMPILE_TIMEOUT, else no limit].")
@FORMAT_CTX
def compile_cmd(input_path: str, output: str, target_devices: tuple[str, ...], target_all: str | None,
                target_device_uri: str | None, weights: str, precision: str, winograd: str | None,
                input_shapes: tuple[str, ...], frozen: tuple[str, ...], dump_after: str | None, statistics: bool,
                tuning_cache: str | None, timeout_s: float | None, **per_backend: str | None) -> None:
    """Compile an ONNX or MLIR model into a bundle (.hbx) for run-module and the runtime."""
    from pathlib import Path

    try:
        from halbench.compiler.compile import CompileOptions, compile_to_file
        from halbench.compiler.frontend import preflight
        from halbench.compiler.isolate import compile_timeout, run_isolated
    except ImportError as e:
        raise UserError(f"the halbench compiler is not available here ({e}); install halbench[compiler], "
                        f"or compile on another machine and copy the .hbx") from None
    from halbench.files import check_output

    check_output(output, input_path, what="bundle")
    targets = {k.removeprefix("target__"): v or target_all
               for k, v in per_backend.items() if k.startswith("target__")}
    backend_options = {k.removeprefix("opt__").replace("_", "-"): v
                       for k, v in per_backend.items() if k.startswith("opt__") and v is not None}
    options = CompileOptions(target_devices=tuple(target_devices), weights=weights,
                             input_shapes=_input_shapes(input_shapes), dump_after=dump_after,
                             targets={k: v for k, v in targets.items() if v}, backend_options=backend_options,
                             input_values=_frozen_inputs(frozen), target_device_uri=target_device_uri,
                             precision=precision, tuning_cache=tuning_cache, winograd=winograd)
    limit = compile_timeout(timeout_s)
    preflight(input_path)
    # In a child process: a crash in the native front end (an LLVM abort, SIGFPE) becomes one line.
    result = run_isolated(compile_to_file, input_path, options, output, what=Path(input_path).name,
                          timeout_s=limit)
    for note in result["notes"]:
        click.echo(f"halbench: note: {note}", err=True)
    if _fmt() == "json":
        click.echo(json.dumps({"output": output, "target_devices": list(target_devices),
                               "dispatches": result["dispatches"], "notes": result["notes"],
                               "statistics": result["statistics"] if statistics else None},
                              indent=2, default=str))
        return
    if statistics:
        click.echo(json.dumps(result["statistics"], indent=2, default=str) if result["statistics"]
                   else "no statistics reported")


@main.command("tune")
@click.argument("sources", metavar="BUNDLE.hbx|PROBLEMS.json|MODEL|ZOO-MODEL[:BATCH]...", nargs=-1,
                required=True)
@click.option("--device", "device_uri", default=None, metavar="URI",
              help="The device to measure on (vulkan://, cuda://0, ...); without it, only --save-problems.")
@click.option("--target", default=None, metavar="NAME",
              help="Target the configurations are filed under and compiled for [default: the device's].")
@click.option("--budget-s", type=click.FloatRange(1, 86400), default=60.0, show_default=True,
              help="Seconds of measuring in all (each problem's rule configuration is always measured).")
@click.option("--samples", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="Timed runs per candidate (the median counts).")
@click.option("--warmup", type=click.IntRange(0, 1000), default=3, show_default=True,
              help="Untimed runs before each candidate's samples.")
@click.option("--warmup-s", type=click.FloatRange(0, 10), default=0.2, show_default=True,
              help="Seconds of load before each candidate's timing (GPUs lower their clocks while "
                   "idle).")
@click.option("--max-candidates", type=click.IntRange(0, 1000), default=24, show_default=True,
              help="Candidates per problem beyond the rule's.")
@click.option("--jobs", type=click.IntRange(1, 256), default=8, show_default=True, help="Parallel compiles.")
@click.option("--output", "-o", default=None, metavar="DIR|FILE.json",
              help="Tuning cache to merge the results into [default: $HALBENCH_TUNING_CACHE, else "
                   "~/.cache/halbench/tuning].")
@click.option("--save-problems", default=None, metavar="FILE.json",
              help="Write the problems found (to tune on a machine without the compiler's front end).")
@click.option("--api", default="vulkan", show_default=True, metavar="API",
              help="With a model file and no --device: the backend to collect its problems for.")
@click.option("--confirm", is_flag=True,
              help="Then time each model whole, compiled with the cache as it was and with the new "
                   "configurations (interleaved, outputs compared), and merge a model's new ones only "
                   "where the model ran faster. Model files and zoo models only.")
@FORMAT
def tune_cmd(sources: tuple[str, ...], device_uri: str | None, target: str | None, budget_s: float, samples: int,
             warmup: int, warmup_s: float, max_candidates: int, jobs: int, output: str | None,
             save_problems: str | None, api: str, confirm: bool, fmt: str) -> None:
    """Measure GEMM tile configurations of a model's problems on a device and cache the fastest
    correct one per problem for the device's target; compile then uses them."""
    import tempfile
    from pathlib import Path

    from halbench.tune import load_problems, save_run, tune, write_problems

    if output == "off":
        raise UserError("--output off: give a directory or a .json file to write the tuning cache to")
    if confirm and not device_uri:
        raise UserError("--confirm times models on a device: give --device URI")
    if device_uri:
        from halbench.compiler.backends import backend_for_driver
        from halbench.drivers import select_device

        api = backend_for_driver(select_device(device_uri).driver).name
    problems: dict[str, Any] = {}
    models: dict[str, tuple[str, list[str]]] = {}  # --confirm: source -> (model file, its problems)
    for source in sources:
        path = _model_path(source)
        if confirm and Path(path).suffix in (".hbx", ".json"):
            raise UserError(f"{source}: --confirm recompiles each model, and a bundle or problems file has "
                            f"no model to recompile; give the model file or zoo model, or leave --confirm out")
        found = load_problems(path, api, target, device_uri)
        models[source] = (path, list(found))
        for key, p in found.items():
            problems.setdefault(key, p)
    if save_problems:
        write_problems(save_problems, problems)
        click.echo(f"{len(problems)} GEMM problems -> {save_problems}", err=True)
    if not device_uri:
        if not save_problems:
            raise UserError("give --device URI to tune on, or --save-problems FILE.json")
        return
    if not problems:
        raise UserError(f"{', '.join(sources)}: no f32 GEMM or convolution on the scalar GEMM path to tune")
    log = None if fmt == "json" else (lambda s: click.echo(s, err=True))
    with tempfile.TemporaryDirectory(prefix="halbench-tune-confirm-") as scratch:
        # With --confirm nothing reaches the cache before the models are timed: the run is saved
        # to a scratch file as it goes (a run cut short merges nothing).
        saved_to = str(Path(scratch) / "run.json") if confirm else output
        run = tune(problems, device_uri, target=target, budget_s=budget_s, samples=samples, warmup=warmup,
                   warmup_s=warmup_s, max_candidates=max_candidates, jobs=jobs, log=log,
                   on_problem=lambda so_far: save_run(so_far, saved_to),  # a run cut short keeps its results
                   cache=output, seed=True)  # re-tuning starts from what the output cache holds
        checks = _confirm_and_merge(run, models, device_uri, output, Path(scratch), log) if confirm else None
        if not confirm:
            save_run(run, output)
    if fmt == "json":
        doc = run.to_dict()
        if checks is not None:
            doc["confirm"] = [c.to_dict() for c in checks]
        click.echo(json.dumps(doc, indent=2))
        return
    from halbench.tune.report import confirm_table, table

    click.echo(table(run))
    if checks is not None:
        click.echo(confirm_table(checks))


def _confirm_and_merge(run: Any, models: dict[str, tuple[str, list[str]]], device_uri: str, output: str | None,
                       scratch: Any, log: Any) -> list[Any]:
    """tune --confirm: the models timed whole before and after (halbench.tune.confirm), and the
    new configurations of the models that ran faster merged into the cache."""
    import shutil

    from halbench.compiler.tuning_cache import cache_file, configs_for, read_cache, update_cache
    from halbench.tune import save_run
    from halbench.tune.confirm import confirm_models, kept_keys

    cache = cache_file(run.api, run.target, output)
    assert cache is not None  # (--output off was refused)
    new = scratch / "new.json"  # the cache as it was, with the run merged in
    if cache.exists():
        shutil.copyfile(cache, new)
    save_run(run, str(new))
    old = str(cache) if cache.exists() else "off"
    old_configs = configs_for(run.api, run.target, cache) if cache.exists() else {}
    checks = confirm_models(models, device_uri, run.api, run.target, old, configs_for(run.api, run.target, new),
                            old_configs, str(new), log=log)
    keep = kept_keys(checks)
    if keep:
        entries = read_cache(new).entries
        update_cache(cache, run.api, run.target,
                     {k: entries[k].model_dump(exclude_none=True) for k in sorted(keep)})
    run.cache = str(cache)
    return checks


def _model_path(source: str) -> str:
    """A file as given, or a zoo model (as suites name them: ``resnet50``, ``minilm-l6:8`` with a
    batch) built into the model cache."""
    from pathlib import Path

    if Path(source).exists() or "/" in source or Path(source).suffix in (".hbx", ".json", ".onnx", ".mlir"):
        return source
    from halbench.bench.model_files import model_source

    name, _, batch = source.partition(":")
    if batch and not batch.isdigit():
        raise UserError(f"'{source}': write a zoo model as NAME or NAME:BATCH (resnet50:8)")
    return str(model_source({"zoo": name, **({"batch": int(batch)} if batch else {})})[2]())


@main.command("inspect")
@click.argument("bundle", metavar="BUNDLE.hbx", type=click.Path(dir_okay=False, exists=True))
@click.option("--device", "device_uri", default=None, metavar="URI",
              help="Load the bundle on this device and show what its compiler made of each kernel: "
                   "registers per thread, shared and spill bytes, workgroups per multiprocessor "
                   "(CUDA/HIP function attributes; Vulkan pipeline statistics where the driver has "
                   "VK_KHR_pipeline_executable_properties).")
@FORMAT
def inspect_cmd(bundle: str, device_uri: str | None, fmt: str) -> None:
    """Show a bundle's dispatches and variants, with each GEMM's configuration and whether tuning
    or the rule chose it."""
    from halbench.bundle import read_bundle

    b = read_bundle(bundle)
    m = b.manifest
    loaded, why = _kernel_resources(b, device_uri) if device_uri else ({}, "")
    # the schedule: dispatches, and the barriers between them (one per level boundary)
    schedule = {f.name: {"dispatches": sum(s.kind == "dispatch" for s in f.steps),
                         "barriers": sum(s.kind == "barrier" for s in f.steps)} for f in m.functions}
    if fmt == "json":
        doc = {"targets": list(m.targets), "schedule": schedule,
               "executables": [e.to_dict() for e in m.executables]}
        if device_uri:
            doc["device"] = device_uri
            for e in doc["executables"]:
                fmt_name, res = loaded.get(e["id"], (None, {}))
                e["loaded"] = {"format": fmt_name, "resources": res}
        click.echo(json.dumps(doc, indent=2))
        return
    targets = ", ".join(f"{t.get('device')}={t.get('target')}" for t in m.targets) or "-"
    click.echo(f"{bundle}: {len(m.executables)} executables, targets {targets}")
    for name, n in schedule.items():
        click.echo(f"  function {name}: {n['dispatches']} dispatches, {n['barriers']} barriers")
    for e in m.executables:
        click.echo(f"  {e.id:4d} {e.name}")
        if e.id in loaded:
            fmt_name, res = loaded[e.id]
            shown = ", ".join(f"{k} {v}" for k, v in res.items()) or why
            click.echo(f"         on {device_uri} ({fmt_name}): {shown}")
        for v in e.variants:
            gemm = ""
            if v.gemm:
                c = v.gemm["config"]
                gemm = (f"  gemm {c['bm']}x{c['bn']}x{c['bk']}/{c['tm']}x{c['tn']}"
                        f"{' split' + str(c['split']) if c.get('split', 1) > 1 else ''}"
                        f"{' runs' if c.get('runs') else ''}{' frag' if c.get('frag') else ''}"
                        f"{' db' if c.get('double') else ''}{' va' if c.get('vec_a') else ''} ({v.gemm['source']})")
            if v.matrix:
                x = v.matrix
                gemm += (f"  {x['kernel']} {x['operands']} {x['bm']}x{x['bn']}x{x['bk']}"
                         f"{' split' + str(x['split']) if x.get('split', 1) > 1 else ''}"
                         f"{' stages' + str(x['stages']) if x.get('stages') else ''}"
                         f"{' rounded ' + x['rounded'].upper() if x.get('rounded') else ''}")
            # a kernel that waits for its predecessors itself (cuda:// may launch it programmatically)
            dep = "  dependent launch" if v.entry.dependent_launch else ""
            click.echo(f"         {v.format:28} {v.target:10} wg {'x'.join(map(str, v.workgroups))}{gemm}{dep}")


def _kernel_resources(bundle: Any, device_uri: str) -> tuple[dict[int, tuple[str, dict[str, Any]]], str]:
    """(executable id -> (the format loaded on the device, its first entry's resources), why the
    driver reports nothing where it does not)."""
    import os

    import halbench
    from halbench.runtime import Module

    os.environ.setdefault("HALBENCH_VULKAN_PIPELINE_STATISTICS", "1")  # capture them at pipeline creation
    out: dict[int, tuple[str, dict[str, Any]]] = {}
    with halbench.create_device(device_uri) as dev, Module.load(bundle, dev) as mod:
        why = ("the driver reports nothing: this Vulkan device has no VK_KHR_pipeline_executable_properties"
               if getattr(dev, "pipeline_statistics", None) is False else "the driver reports nothing")
        for eid, (exe, variant) in mod._executables.items():
            entries = list(exe.entries)
            out[eid] = (variant.format, exe.resources(entries[0]) if entries else {})
    return out, why


def _frozen_inputs(specs: tuple[str, ...]) -> dict[str, Any]:
    from halbench.runtime.io import parse_input

    out = {}
    for s in specs:
        name, _, value = s.partition("=")
        if not name or not value:
            raise UserError(f"malformed --freeze-input '{s}': write NAME=SHAPExTYPE=VALUES, e.g. axes=1xi64=1")
        out[name] = parse_input(value)
    return out


def _input_shapes(specs: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    out = {}
    for s in specs:
        name, _, dims = s.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split("x"))
        except ValueError:
            shape = ()
        if not name or not shape or min(shape) < 0:
            raise UserError(f"malformed --input-shape '{s}': write NAME=1x3x224x224")
        out[name] = shape
    return out


# -- results: compare, gate, report, trace (halbench.reports; they read stored results only) ---

RESULTS_FILE = click.Path(dir_okay=False)


LIMIT_OPTIONS = [
    click.option("--threshold", type=click.FloatRange(0, 10), default=None,
                 help="Relative slowdown allowed, 0.05 = 5%  [default: the gate file's, else the "
                      "baseline suite's, else 0.05]"),
    click.option("--noise-floor-ms", type=click.FloatRange(0), default=None,
                 help="Slowdowns below this many ms are allowed  [default: the gate file's, else "
                      "the baseline suite's, else 0]"),
    click.option("--gate-file", type=click.Path(dir_okay=False), default=None,
                 help="YAML with a suite's gate keys (threshold, noise_floor_ms, alpha, overrides), "
                      "e.g. halbench-gate.yaml in the repository; overrides the baseline's suite."),
]


def _limit_options(f):
    for option in reversed(LIMIT_OPTIONS):
        f = option(f)
    return f


RUNTIME_OPTIONS = [
    click.option("--baseline-runtime", default=None, metavar="NAME",
                 help="Judge the candidate runtime against this runtime's entries (torch-cudagraph, "
                      "onnxruntime-cuda, ...), matched by (name, device); within one file when only "
                      "one is given."),
    click.option("--candidate-runtime", default=None, metavar="NAME",
                 help="The runtime judged against --baseline-runtime  [default: halbench]"),
]


MATCH_BY = click.option("--match-by", "match_by", type=click.Choice(["device", "model"]), default="device",
                        show_default=True,
                        help="Pair entries by device key, or by device model: fleet results whose units "
                             "differ (other nodes, other GPUs of one model) meet by model, units pooled.")


def _matched(doc: dict, match_by: str) -> dict:
    from halbench.reports.fleet import by_model

    return by_model(doc) if match_by == "model" else doc


def _runtime_options(f):
    for option in reversed(RUNTIME_OPTIONS):
        f = option(f)
    return f


def _two_files(command: str, files: tuple[str, ...], baseline: str | None,
               candidate: str | None) -> tuple[str | None, str | None]:
    """compare and gate name their inputs alike: ``BASELINE CANDIDATE`` as arguments, or
    ``--baseline``/``--candidate``. One file alone is the one that runtimes are compared within."""
    from halbench.errors import BadOption

    if len(files) > 2:
        raise BadOption(f"{command} takes at most two results files (BASELINE CANDIDATE), got {len(files)}")
    given = [f for f in (baseline, candidate) if f]
    if files and given:
        raise BadOption(f"{command}: give the results files as arguments (BASELINE CANDIDATE) or as "
                        f"--baseline/--candidate, not both")
    if files:
        return (files[0], files[1]) if len(files) == 2 else (None, files[0])
    return baseline, candidate


TWO_FILES = [
    click.argument("files", nargs=-1, type=RESULTS_FILE, metavar="[BASELINE] [CANDIDATE]"),
    click.option("--baseline", "--base", "baseline", default=None, type=RESULTS_FILE,
                 help="Results of the reference run (or the first argument)."),
    click.option("--candidate", "--new", "candidate", default=None, type=RESULTS_FILE,
                 help="Results of the run to judge (or the second argument)."),
]


def _two_file_options(f):
    for option in reversed(TWO_FILES):
        f = option(f)
    return f


@main.command("compare")
@_two_file_options
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text",
              show_default=True, help="Output format (JSON is strict: null, never NaN/Infinity).")
@_limit_options
@_runtime_options
@MATCH_BY
def compare_cmd(files: tuple[str, ...], baseline: str | None, candidate: str | None, fmt: str,
                threshold: float | None, noise_floor_ms: float | None, gate_file: str | None,
                baseline_runtime: str | None, candidate_runtime: str | None, match_by: str) -> None:
    """Compare two results files: per benchmark, medians, change, bounds and the gate's verdict.

    The files: BASELINE CANDIDATE as arguments, or --baseline/--candidate (as the gate takes
    them). The verdict per row is the gate's own decision with the gate's limits (from the
    BASELINE file's suite, --gate-file and the flags): faster, same (PASS), slower (REGRESSION)
    or inconclusive. Devices that differ between the files are a warning here (the gate refuses
    them). Entries meet by (name, device, runtime); with --baseline-runtime, that runtime's
    entries meet the candidate runtime's by (name, device), within one file when only one is given.
    """
    from halbench.bench.results import read_results
    from halbench.errors import BadOption
    from halbench.reports.compare import compare_results, device_differences, render
    from halbench.reports.runtimes import match
    from halbench.reports.thresholds import resolve_settings

    base, new = _two_files("compare", files, baseline, candidate)
    if base is None:  # one file: the runtimes within it
        base, new = new, None
    across = baseline_runtime is not None or candidate_runtime is not None
    if base is None:
        raise BadOption("compare needs BASELINE CANDIDATE (or --baseline/--candidate)")
    if new is None and not across:
        raise BadOption("compare needs CANDIDATE, or --baseline-runtime NAME to compare runtimes "
                        "within BASELINE")
    b = _matched(read_results(base), match_by)
    n = b if new is None else _matched(read_results(new), match_by)
    new = base if new is None else new
    sides = match(b, n, baseline_runtime, candidate_runtime, base_label=base, new_label=new)
    settings, warnings = resolve_settings(b, n, gate_file=gate_file, threshold=threshold,
                                          noise_floor_ms=noise_floor_ms)
    common = {x["device"] for x in b["benchmarks"]} & {x["device"] for x in n["benchmarks"]}
    warnings += [f"{d}: the comparison may mean little" for d in device_differences(b, n, common)]
    labels = (f"{base} [{sides.base_runtime}]", f"{new} [{sides.new_runtime}]") if across else (base, new)
    click.echo(render(compare_results(b, n, settings, sides), fmt, base_label=labels[0],
                      new_label=labels[1], settings=settings, warnings=warnings))
    if fmt == "json":
        for w in warnings:
            click.echo(f"warning: {w}", err=True)


@main.command("gate")
@_two_file_options
@_limit_options
@_runtime_options
@click.option("--inconclusive", "inconclusive", type=click.Choice(["report", "pass", "fail"]),
              default="report", show_default=True,
              help="What INCONCLUSIVE exits with: report (3), pass (0) or fail (1).")
@click.option("--summary", type=click.Path(dir_okay=False),
              help="Append a Markdown summary to this file (e.g. $GITHUB_STEP_SUMMARY).")
@click.option("--junit", type=click.Path(dir_okay=False), help="Write JUnit XML to this file.")
@click.option("--allow-device-mismatch", is_flag=True,
              help="Judge even when device UUID, name or driver version differ.")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text",
              show_default=True, help="Output format (JSON is strict: null, never NaN/Infinity).")
@click.option("--debug", is_flag=True, help="Show the traceback of an internal error.")
@MATCH_BY
@click.pass_context
def gate_cmd(ctx: click.Context, files: tuple[str, ...], baseline: str | None, candidate: str | None,
             threshold: float | None, noise_floor_ms: float | None, gate_file: str | None,
             baseline_runtime: str | None, candidate_runtime: str | None, inconclusive: str,
             summary: str | None, junit: str | None, allow_device_mismatch: bool, fmt: str,
             debug: bool, match_by: str) -> None:
    """Judge CANDIDATE against BASELINE: PASS, REGRESSION or INCONCLUSIVE.

    The files: BASELINE CANDIDATE as arguments, or --baseline/--candidate (as compare takes
    them); the baseline may be left out with --baseline-runtime.

    \b
    Per benchmark, the allowance is the threshold, or the noise floor where that is larger:
      REGRESSION    surely slower than the allowance: the change's 99% lower bound is above
                    it, also against the median move of the device's benchmarks; every
                    candidate repetition is slower than every baseline one by more than that;
                    a one-sided Mann-Whitney U test on the samples agrees. Or wrong results.
      PASS          the change's 95% upper bound is within the allowance.
      INCONCLUSIVE  the noise could hide a slowdown beyond the allowance, or the machine
                    (its repetitions, or the whole device) moved as much as the change; the
                    reason says how large a slowdown could hide and about how many
                    repetitions per side would detect one.
    Noise comes from the spread of the suite's repetitions (robust: one outlier repetition
    does not widen it), at least the median spread of the device's benchmarks. Limits come
    from the baseline's suite, then --gate-file, then the flags; never from the candidate.

    \b
    Runtimes: entries meet by (name, device, runtime). With --baseline-runtime NAME the
    candidate runtime's entries (halbench's unless --candidate-runtime) are judged against
    NAME's of the same (name, device), within the candidate file when --baseline is left out:
      halbench gate --candidate r.json --baseline-runtime torch-cudagraph --threshold 0.10
    fails when halbench is surely more than 10% slower than PyTorch. NAME's entries on a
    device without a candidate entry are listed as unmatched, not a problem.

    \b
    Exit codes:
      0  PASS (also INCONCLUSIVE with --inconclusive=pass)
      1  REGRESSION (also INCONCLUSIVE with --inconclusive=fail)
      2  unusable input: unreadable files, an invalid gate file, missing benchmarks,
         mismatched devices, a benchmark that could not be timed, or an internal error
      3  INCONCLUSIVE (the default --inconclusive=report)
    """
    from halbench.errors import BadOption
    from halbench.files import check_output
    from halbench.reports import gate

    try:  # an output that cannot be written, or would destroy an input: refused, nothing written
        baseline, candidate = _two_files("gate", files, baseline, candidate)
        if candidate is None:
            raise BadOption("gate needs CANDIDATE (the second argument, or --candidate)")
        for path, what in ((summary, "summary"), (junit, "JUnit file")):
            if path:
                check_output(path, *filter(None, (baseline, candidate)), what=what)
    except HalbenchError as e:
        click.echo(f"halbench gate: error: {e}", err=True)
        ctx.exit(gate.EXIT_UNUSABLE)
    try:
        if baseline is None and baseline_runtime is None and candidate_runtime is None:
            raise BadOption("gate needs --baseline, or --baseline-runtime NAME to judge runtimes "
                            "within the candidate")
        report = _gate_report(baseline, candidate, threshold, noise_floor_ms, gate_file,
                              allow_device_mismatch, inconclusive, (baseline_runtime, candidate_runtime),
                              match_by)
        _write_gate_outputs(report, summary, junit, fmt=fmt)
    except (BadOption, HalbenchError) as e:  # an option the input cannot satisfy, a full disk: exit 2
        click.echo(f"halbench gate: error: {e}", err=True)
        with contextlib.suppress(Exception):
            _write_gate_outputs(gate.unusable_report(str(e), baseline=baseline or candidate or "",
                                                     candidate=candidate or ""), summary, junit,
                                echo=fmt == "json", fmt=fmt)
        ctx.exit(gate.EXIT_UNUSABLE)
    except Exception as e:  # a gate that crashes must not read as "regression" (exit 1)
        if debug or ctx.meta.get("halbench.debug"):
            ctx.meta["halbench.debug"] = True  # shared with the group: it re-raises too
            raise
        click.echo(f"halbench gate: internal error: {type(e).__name__}: {e} (exit 2; --debug shows "
                   f"the traceback)", err=True)
        with contextlib.suppress(Exception):  # the one-line message above is what matters
            _write_gate_outputs(gate.unusable_report(f"internal error: {type(e).__name__}: {e}",
                                                     baseline=baseline or "", candidate=candidate or ""),
                                summary, junit, echo=fmt == "json", fmt=fmt)
        ctx.exit(gate.EXIT_UNUSABLE)
    ctx.exit(report.exit_code)


def _gate_report(baseline: str | None, candidate: str, threshold: float | None,
                 noise_floor_ms: float | None, gate_file: str | None,
                 allow_device_mismatch: bool, inconclusive: str,
                 runtimes: tuple[str | None, str | None] = (None, None), match_by: str = "device"):
    from halbench.bench.results import read_results
    from halbench.errors import BadOption
    from halbench.reports import gate

    try:
        base = None if baseline is None else _matched(read_results(baseline), match_by)
        cand = _matched(read_results(candidate), match_by)
        base = cand if base is None else base  # one file: its runtimes against each other
        return gate.run_gate(base, cand, threshold=threshold, noise_floor_ms=noise_floor_ms,
                             gate_file=gate_file, allow_device_mismatch=allow_device_mismatch,
                             inconclusive=inconclusive, baseline_runtime=runtimes[0],
                             candidate_runtime=runtimes[1], labels=(baseline or candidate, candidate))
    except BadOption:
        raise
    except HalbenchError as e:  # unreadable files or an invalid gate file: exit 2, not 1
        return gate.unusable_report(str(e), baseline=baseline or candidate, candidate=candidate,
                                    inconclusive=inconclusive)


def _write_gate_outputs(report, summary: str | None, junit: str | None, echo: bool = True,
                        fmt: str = "text") -> None:
    """The printed report (text, Markdown or JSON), the appended Markdown summary and the JUnit
    file, each written atomically."""
    from pathlib import Path

    from halbench.files import atomic_write
    from halbench.reports import gate

    if echo:
        render = {"text": gate.render_text, "markdown": gate.render_markdown, "json": gate.render_json}
        click.echo(render[fmt](report))
    if summary:  # appended (CI step summaries accumulate): the old text plus this, replaced atomically
        old = Path(summary).read_text(encoding="utf-8") if Path(summary).exists() else ""
        atomic_write(summary, old + gate.render_markdown(report), "summary")
    if junit:
        atomic_write(junit, gate.render_junit(report), "JUnit file")


@main.command("report")
@click.argument("results", nargs=-1, required=True, type=RESULTS_FILE)
@click.option("-o", "--output", default="report.html", show_default=True, type=click.Path(dir_okay=False),
              help="The HTML file to write.")
@FORMAT
def report_cmd(results: tuple[str, ...], output: str, fmt: str) -> None:
    """Write one self-contained HTML report (opens offline) from one or more results files;
    with two, a comparison section gives each pair the verdict `compare` gives it."""
    from halbench.files import check_output
    from halbench.reports.report import write_report

    check_output(output, *results, what="report")
    path = write_report(list(results), output)
    if fmt == "json":
        click.echo(json.dumps({"output": str(path), "bytes": path.stat().st_size, "results": list(results)}))
        return
    click.echo(f"wrote {path} ({path.stat().st_size / 1e3:,.0f} kB)")


@main.command("trace")
@click.argument("results", type=RESULTS_FILE)
@click.option("--benchmark", default=None, help="Only the benchmark of this name.")
@click.option("-o", "--output", default="trace.json", show_default=True, type=click.Path(dir_okay=False),
              help="The Chrome trace-event JSON file to write (open in ui.perfetto.dev).")
@FORMAT
def trace_cmd(results: str, benchmark: str | None, output: str, fmt: str) -> None:
    """Export stored dispatch timings as a Chrome / Perfetto trace: one track per device queue."""
    from halbench.bench.results import read_results
    from halbench.files import atomic_write, check_output
    from halbench.reports.trace import to_trace_events

    check_output(output, results, what="trace")
    trace = to_trace_events(read_results(results), benchmark)
    atomic_write(output, json.dumps(trace), "trace")
    slices = sum(1 for e in trace["traceEvents"] if e.get("cat") == "dispatch")
    if fmt == "json":
        click.echo(json.dumps({"output": output, "dispatch_slices": slices}))
        return
    click.echo(f"wrote {output} ({slices} dispatch slices)")


# -- exit codes: every command's --help ends with its own; README's table is this one ----------

_USAGE = (2, "a bad option or argument (click's usage error)")
_BUG = [(3, "a bug in halbench (one line; --debug shows the traceback)"), (130, "interrupted")]
_LISTING = [(0, "listed (an unavailable driver is listed with its reason, not an error)"),
            (1, "an unknown or unavailable driver or device (one line on stderr)"), _USAGE]
EXIT_CODES: dict[str, list[tuple[int, str]]] = {
    "list-peers": [(0, "listed"), _USAGE],
    "list-drivers": [(0, "listed (an unavailable driver is listed with its reason)"), _USAGE],
    "list-devices": _LISTING,
    "dump-devices": _LISTING,
    "list-targets": [(0, "listed"), _USAGE],
    "list-ops": [(0, "listed"), _USAGE],
    "check": [(0, "every node compiles"), (1, "some node cannot, or the model is unreadable"), _USAGE],
    "compile": [(0, "the bundle is written"), (1, ("the model is unreadable or does not compile "
                                                 "(nothing is written)")), _USAGE],
    "run-module": [(0, "ran (and every --expected_output matched)"),
                   (1, "an error, or a result that differs from --expected_output"), _USAGE],
    "run-suite": [(0, ("every benchmark ran and was correct (one skipped for a missing device or "
                      "feature does not count)")),
                  (1, ("a benchmark errored or computed a wrong result, or a device named explicitly is "
                       "not here (the others are still written)")),
                  (2, "the suite is unusable or selects nothing (nothing is written)")],
    "compare": [(0, "compared, whatever the verdicts (compare informs; the gate decides)"),
                (1, "an unreadable or invalid results or gate file"),
                (2, "a bad option, or files given both as arguments and as --baseline/--candidate")],
    "gate": [(0, "PASS (also INCONCLUSIVE with --inconclusive=pass)"),
             (1, "REGRESSION (also INCONCLUSIVE with --inconclusive=fail)"),
             (2, ("unusable input: unreadable files, an invalid gate file, missing benchmarks, "
                 "mismatched devices, an untimed benchmark, or an internal error")),
             (3, "INCONCLUSIVE (the default --inconclusive=report)")],
    "report": [(0, "the report is written"), (1, "an unreadable or invalid results file"), _USAGE],
    "tune": [(0, "tuned and the cache written (or the problems file, with --save-problems alone)"),
             (1, "an unreadable or invalid source, cache or problems file, or no GPU device"), _USAGE],
    "inspect": [(0, "shown"), (1, "an unreadable or invalid bundle"), _USAGE],
    "trace": [(0, "the trace is written"), (1, ("an unreadable results file, or no stored dispatch "
                                               "timings")), _USAGE],
}
#: A command added without an entry gets the codes every command shares.
DEFAULT_EXIT_CODES = [(0, "success"), (1, "an error (one line on stderr)"), _USAGE]


def exit_codes(name: str) -> list[tuple[int, str]]:
    """A command's exit codes, the shared ones (a bug, an interrupt) included; the gate turns
    its own internal errors into 2, so a crash never reads as a regression."""
    codes = EXIT_CODES.get(name, DEFAULT_EXIT_CODES)
    return codes if name == "gate" else codes + [c for c in _BUG if c[0] not in {k for k, _ in codes}]


def _document_exit_codes(name: str, cmd: click.Command) -> None:
    """End the command's --help with its exit codes (once; those that list them already keep theirs)."""
    if getattr(cmd, "_halbench_exit_codes", False):
        return
    cmd._halbench_exit_codes = True  # type: ignore[attr-defined]
    import inspect
    import re

    help_text = inspect.cleandoc(cmd.help or "")  # dedented first: the lines added are not indented
    codes, title = exit_codes(name), "Exit codes:"
    if "Exit codes" in help_text:  # the docstring lists its own: add only those it leaves out
        own = help_text.split("Exit codes", 1)[1]
        codes = [(c, w) for c, w in codes if not re.search(rf"(?<![\w.]){c}(?![\w.%])", own)]
        title = "Also:"
    if codes:
        lines = "\n".join(f"  {code:<3}  {what}" for code, what in codes)
        cmd.help = help_text.rstrip() + f"\n\n\b\n{title}\n" + lines

