"""The ``halbench`` command line: parses options, prints, sets exit codes. No logic here."""

from __future__ import annotations

import json
import sys

import click

from halbench import __version__
from halbench.errors import HalbenchError

FORMAT = click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
                      show_default=True, help="Output format.")


class _Group(click.Group):
    """Turns a HalbenchError into one line on stderr and exit code 1; bugs keep their traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except HalbenchError as e:
            click.echo(f"halbench: error: {e}", err=True)
            sys.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="halbench")
def main() -> None:
    """halbench: what a GPU can do, and how fast real ML models run on it.

    Probe Vulkan, CUDA, HIP and CPU devices, run compiled models through halbench's own
    HAL with device timestamps, and compare results.
    """


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
@click.option("-o", "--output", default="results.json", show_default=True,
              help="Results file (JSON, written atomically; rewritten after every benchmark).")
@click.option("--device", "devices", multiple=True,
              help="Device pattern to run on instead of the suite's (repeatable): vulkan://*, cuda://0, *.")
@click.option("--only", multiple=True, help="Run only benchmarks whose name matches (glob, repeatable).")
@click.option("--report", "report_path", default=None, help="Also write an HTML report here.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def run_suite_cmd(suite: str, output: str, devices: tuple[str, ...], only: tuple[str, ...],
                  report_path: str | None, no_progress: bool) -> None:
    """Run a benchmark SUITE (a YAML file, or a shipped suite name: smoke, models, device-peaks)."""
    from halbench.bench.runner import run_suite
    from halbench.bench.suite import load_suite

    s = load_suite(suite)
    results = run_suite(s, output, devices=list(devices) or None, only=list(only) or None,
                        progress=not no_progress, command_line=["halbench", *sys.argv[1:]])
    counts: dict[str, int] = {}
    for b in results["benchmarks"]:
        counts[b["status"]] = counts.get(b["status"], 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    click.echo(f"{s.name}: {len(results['benchmarks'])} benchmark runs ({summary}) -> {output}")
    for w in results["warnings"]:
        click.echo(f"warning: {w}", err=True)
    if report_path:
        from halbench.reports.report import write_report

        write_report([output], report_path)
        click.echo(f"report -> {report_path}")


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
    from halbench.drivers import driver_names, get_driver
    from halbench.errors import DriverUnavailable, UserError
    from halbench.probe.render import dump_document
    from halbench.uri import parse_uri

    keep = None
    if target:
        u = parse_uri(target)
        if u.driver not in driver_names():
            raise UserError(f"unknown driver '{u.driver}'; known drivers: {', '.join(driver_names())}")
        entries = _probe_all()
        entry = next(e for e in entries if e.name == u.driver)
        if not entry.available:
            raise DriverUnavailable(entry.name, entry.reason)
        if "://" in target:  # a device URI: the driver picks it (or says which exist)
            keep = [(u.driver, get_driver(u.driver).select(str(u).partition("://")[2]).ordinal)]
        else:
            keep = [(u.driver, None)]
    else:
        entries = _probe_all()
    return dump_document(entries, __version__, keep)


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
@click.option("--api", type=click.Choice(["vulkan", "cuda", "hip"]), default=None,
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
