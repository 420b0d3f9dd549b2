"""Fleet runs: a suite over every device of a host at once (``--parallel``), or over the devices
of every node of a Ray cluster (``--cluster``), merged into one results file.

Above ``bench/`` (it runs the ordinary runner in one pinned worker process per physical device)
and below ``cli.py``. Ray is an optional extra (``halbench[fleet]``), imported only by
``fleet/ray_fleet.py`` and only for ``--cluster``.
"""

from __future__ import annotations

import os
from typing import Any

from halbench.bench.suite import Suite
from halbench.errors import NothingToDo

__all__ = ["run_parallel"]


def run_parallel(suite: Suite, output: str | os.PathLike, *, devices: list[str] | None = None,
                 only: list[str] | None = None, progress: bool = True, command_line: list[str] | None = None,
                 resume: bool = False, peers: list[str] | None = None) -> dict[str, Any]:
    """Run ``suite`` on every device of this host at once: one pinned worker per physical device,
    each running its device's benchmarks serially; one results file (``run_suite``'s contract)."""
    from halbench.bench.runner import node_info
    from halbench.files import check_output, exclusive
    from halbench.fleet.merge import Fleet, collect, plans_for
    from halbench.fleet.units import make_units, run_unit
    from halbench.fleet.worker import discover

    check_output(output, suite.path, what="results file")
    found: dict[str, Any] = {}

    def resolve(patterns: tuple[str, ...]) -> tuple[list[str], list[tuple[str, str]]]:
        d = discover(list(patterns))
        for e in d["devices"]:
            found.setdefault(e["uri"], e)
        return [e["uri"] for e in d["devices"]], [tuple(m) for m in d["missing"]]

    plans, missing = plans_for(suite, only, devices, resolve)
    if not plans:
        raise NothingToDo(f"no benchmark of suite {suite.name} matches --only {' '.join(only or [])}; "
                          f"its benchmarks: {', '.join(b.name for b in suite.benchmarks)}")
    node, info = node_info()
    units = make_units(node, list(found.values()), plans, "")
    with exclusive(output, "results file"):
        fleet = Fleet(str(output), suite, {node: info}, resume, command_line)
        try:
            fleet.extra += skipped_entries(suite, missing)
            run = fleet.run.to_dict()

            def start(unit: Any) -> Any:
                return run_unit(unit, suite.path, run=run, only_done=fleet.done_of(unit),
                                device_infos=fleet.infos_of(unit), peers=list(peers or ()), suffix="",
                                command_line=command_line)

            collect(fleet, units, start, progress)
            return fleet.finish()
        except BaseException:
            fleet.close()
            raise


def skipped_entries(suite: Suite, missing: list[tuple[str, str, str]]) -> list[Any]:
    """Entries for device patterns that named a device no node has (``skipped``, with the reason)."""
    from halbench.bench.schema import BenchmarkResult

    kinds = {s.name: s.kind for s in suite.benchmarks}
    return [BenchmarkResult(name, kinds[name], pattern, pattern.partition("://")[0], "skipped", why)
            for name, pattern, why in missing]
