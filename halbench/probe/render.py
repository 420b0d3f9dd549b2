"""The two renderers of probe results: the dump document (JSON) and its text layout.

The text is rendered from the JSON document, never from live objects, so the two cannot
disagree. The document's schema is docs/device-schema.md (and docs/device-schema.json).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from halbench.probe.info import SCHEMA_VERSION, DeviceInfo
from halbench.uri import normalize_uuid

__all__ = ["DriverDevices", "device_list", "dump_document", "render_device_list", "render_text"]

_RULE = "# " + "=" * 78
_THIN = "# ===" + "-" * 70 + "==="
# Sections of DeviceInfo.to_dict() in the order the text shows them (tiers come first, as in IREE).
_SECTIONS = ("identity", "limits", "features", "memory", "queues", "timing", "opportunities",
             "attributes", "extensions", "errors")


@dataclass(frozen=True)
class DriverDevices:
    """One driver's probe outcome: its devices, or why it is unavailable."""

    name: str
    available: bool
    reason: str = ""
    description: str = ""
    devices: tuple[DeviceInfo, ...] = ()


def _uuid_uri(device: dict[str, Any]) -> str | None:
    uuid = device["identity"].get("uuid")
    return f"{device['driver']}://{uuid}" if uuid else None


def dump_document(entries: Iterable[DriverDevices], halbench_version: str,
                  keep: Iterable[tuple[str, int | None]] | None = None) -> dict[str, Any]:
    """The dump-devices JSON document. ``keep`` limits the output to (driver, ordinal or None)
    pairs; cross-driver matches (``same_device_as``) are found among all ``entries``."""
    entries = list(entries)
    by_uuid: dict[str, list[str]] = {}
    for e in entries:
        for d in e.devices:
            n = normalize_uuid(d.identity.uuid) if d.identity.uuid else None
            if n:
                by_uuid.setdefault(n, []).append(d.uri)
    wanted = None if keep is None else list(keep)
    drivers = []
    for e in entries:
        picks = None if wanted is None else [o for name, o in wanted if name == e.name]
        if picks is not None and not picks:
            continue
        devices = []
        for d in e.devices:
            if picks is not None and None not in picks and d.ordinal not in picks:
                continue
            dd = d.to_dict()
            n = normalize_uuid(d.identity.uuid) if d.identity.uuid else None
            dd["uuid_uri"] = _uuid_uri(dd)
            dd["same_device_as"] = [u for u in by_uuid.get(n, []) if u != d.uri] if n else []
            devices.append(dd)
        drivers.append({"name": e.name, "description": e.description, "available": e.available,
                        "reason": e.reason, "devices": devices})
    return {"schema_version": SCHEMA_VERSION, "halbench_version": halbench_version, "drivers": drivers}


# -- text -------------------------------------------------------------------------------------

def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:g} {unit}" if unit == "B" else f"{n:.4g} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)  # pragma: no cover


def _scalar(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and key.endswith(("identity.vendor_id", "identity.device_id")):
        return f"0x{value:04x}"  # PCI ids are read in hex everywhere else (lspci, vulkaninfo)
    if isinstance(value, int) and key.endswith("_bytes") and value >= 1024:
        return f"{value} ({_human_bytes(value)})"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _is_empty(value: Any) -> bool:
    return value is None or value == "" or (isinstance(value, (list, dict)) and not value)


def _row(item: dict[str, Any]) -> str:
    """One list item (queue family, heap, matrix shape) on one line."""
    if {"m", "n", "k"} <= item.keys():
        return (f"{item['m']}x{item['n']}x{item['k']} a={item['a_type']} b={item['b_type']} c={item['c_type']} "
                f"result={item['result_type']} scope={item['scope']}" + (" saturating" if item["saturating"] else ""))
    parts = []
    for k, v in item.items():
        if isinstance(v, list):
            v = "|".join(map(str, v)) or "none"
        parts.append(f"{k}={_scalar(k, v)}")
    return " ".join(parts)


def _lines(prefix: str, value: Any) -> list[str]:
    if _is_empty(value):
        return []
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            out += _lines(f"{prefix}.{k}" if prefix else k, v)
        return out
    if isinstance(value, list):
        if all(isinstance(v, dict) for v in value):
            return [f"{prefix}[{i}]: {_row(v)}" for i, v in enumerate(value)]
        if prefix == "extensions":  # long: one per line under a count
            return [f"extensions: {len(value)}"] + [f"  {v}" for v in value]
        return [f"{prefix}: {', '.join(_scalar(prefix, v) for v in value)}"]
    return [f"{prefix}: {_scalar(prefix, value)}"]


def _device_text(d: dict[str, Any]) -> list[str]:
    out = ["", _THIN, f"# --device={d['uri']}"]
    if d.get("uuid_uri"):
        out.append(f"# --device={d['uuid_uri']}")
    out.append(f"#   {d['identity']['name']}")
    if d.get("compile_target"):  # added by the compiler's target table (targets.annotate_dump)
        out.append(f"#   compile with: {d['compile_target']['flag']}")
    out += [_THIN, ""]
    for t in d["tiers"]:
        out.append(f"feature_tier[{t['name']}]: {'supported' if t['supported'] else 'unsupported'}")
        if not t["supported"]:
            out.append(f"  missing: {', '.join(t['missing'])}")
    if d.get("same_device_as"):
        out.append(f"same_device_as: {', '.join(d['same_device_as'])}")
    for section in _SECTIONS:
        out += _lines(section, d.get(section))
    return out


def render_text(doc: dict[str, Any]) -> str:
    """The dump document laid out like ``iree-run-module --dump_devices``."""
    out: list[str] = []
    for drv in doc["drivers"]:
        out += [_RULE, f"# Driver: {drv['name']}"]
        if drv.get("description"):
            out.append(f"#   {drv['description']}")
        if not drv["available"]:
            out.append(f"#   unavailable: {drv['reason']}")
        elif not drv["devices"]:
            out.append("#   no devices")
        out.append(_RULE)
        for d in drv["devices"]:
            out += _device_text(d)
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# -- list-devices ------------------------------------------------------------------------------

def device_list(doc: dict[str, Any]) -> dict[str, Any]:
    """The list-devices document: one row per device, plus the unavailable drivers."""
    rows = [{"uri": d["uri"], "name": d["identity"]["name"], "driver": drv["name"],
             "uuid": d["identity"].get("uuid"), "uuid_uri": d.get("uuid_uri")}
            for drv in doc["drivers"] for d in drv["devices"]]
    unavailable = [{"name": drv["name"], "reason": drv["reason"]} for drv in doc["drivers"] if not drv["available"]]
    return {"schema_version": doc["schema_version"], "devices": rows, "unavailable": unavailable}


def render_device_list(listing: dict[str, Any]) -> str:
    rows = listing["devices"]
    w = max((len(r["uri"]) for r in rows), default=0)
    out = [f"{r['uri']:<{w}}  {r['name']}" + (f"  ({r['uuid']})" if r["uuid"] else "") for r in rows]
    out += [f"# {u['name']}: unavailable: {u['reason']}" for u in listing["unavailable"]]
    return "\n".join(out) + ("\n" if out else "")
