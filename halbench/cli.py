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
