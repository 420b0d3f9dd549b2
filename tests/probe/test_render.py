"""The dump document (JSON) against docs/device-schema.json, and the text rendered from it."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import halbench
from halbench.probe import cpu
from halbench.probe.info import DeviceInfo, Identity, Tier
from halbench.probe.render import DriverDevices, device_list, dump_document, render_device_list, render_text

SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "device-schema.json").read_text())
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def check(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """A hand check of the JSON Schema subset docs/device-schema.json uses (no new dependency)."""
    errs: list[str] = []
    if "const" in schema and value != schema["const"]:
        errs.append(f"{path}: {value!r} != {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errs.append(f"{path}: {value!r} not in {schema['enum']}")
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        ok = any((t == "integer" and isinstance(value, int) and not isinstance(value, bool))
                 or (t == "number" and isinstance(value, (int, float)) and not isinstance(value, bool))
                 or (t in _TYPES and isinstance(value, _TYPES[t])) for t in types)
        if not ok:
            return errs + [f"{path}: {value!r} is not {types}"]
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        errs.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        errs += [f"{path}: missing '{k}'" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k in props:
                errs += check(v, props[k], f"{path}.{k}")
            elif schema.get("additionalProperties") is False:
                errs.append(f"{path}: unexpected '{k}'")
            elif isinstance(schema.get("additionalProperties"), dict):
                errs += check(v, schema["additionalProperties"], f"{path}.{k}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errs.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errs.append(f"{path}: more than {schema['maxItems']} items")
        for i, v in enumerate(value):
            errs += check(v, schema.get("items", {}), f"{path}[{i}]")
    return errs


def _gpu(driver: str, uuid: str | None, tier: Tier | None = None) -> DeviceInfo:
    return DeviceInfo(driver=driver, ordinal=0, identity=Identity(name="NVIDIA H100 80GB HBM3", uuid=uuid),
                      tiers=(tier,) if tier else ())


def _entries(lavapipe: DeviceInfo) -> list[DriverDevices]:
    return [DriverDevices("vulkan", True, "", "Vulkan", (lavapipe,)),
            DriverDevices("cuda", False, "libcuda.so.1 not found", "CUDA"),
            DriverDevices("local-sync", True, "", "host", tuple(cpu.query_devices("local-sync")))]


def test_schema_round_trip(lavapipe: DeviceInfo) -> None:
    doc = json.loads(json.dumps(dump_document(_entries(lavapipe), halbench.__version__)))
    assert check(doc, SCHEMA) == []
    assert doc["schema_version"] == 1 and [d["name"] for d in doc["drivers"]] == ["vulkan", "cuda", "local-sync"]
    vk = doc["drivers"][0]["devices"][0]
    assert vk == {**lavapipe.to_dict(), "uuid_uri": f"vulkan://{lavapipe.identity.uuid}", "same_device_as": []}
    assert all(type(v) is bool for v in vk["features"]["flags"].values())
    assert doc["drivers"][1]["devices"] == [] and doc["drivers"][1]["reason"] == "libcuda.so.1 not found"


def test_checker_catches_drift(lavapipe: DeviceInfo) -> None:
    doc = json.loads(json.dumps(dump_document(_entries(lavapipe), "0")))
    dev = doc["drivers"][0]["devices"][0]
    dev["features"]["flags"]["shaderInt8"] = 1
    del dev["identity"]["name"]
    dev["surprise"] = True
    errs = check(doc, SCHEMA)
    assert any("shaderInt8" in e for e in errs) and any("'name'" in e for e in errs)
    assert any("surprise" in e for e in errs)


def test_text_layout(lavapipe: DeviceInfo) -> None:
    doc = dump_document(_entries(lavapipe), "0")
    text = render_text(doc)
    lines = text.splitlines()
    assert lines[0].startswith("# ====") and lines[1] == "# Driver: vulkan"
    assert f"# --device={lavapipe.uri}" in lines and f"# --device=vulkan://{lavapipe.identity.uuid}" in lines
    assert f"#   {lavapipe.name}" in lines
    assert "feature_tier[vulkan-1.3]: supported" in lines
    assert "features.flags.bufferDeviceAddress: true" in lines
    assert any(re.match(r"^limits\.max_shared_memory_bytes: \d+ \(\d+(\.\d+)? KiB\)$", ln) for ln in lines)
    assert any(ln.startswith("queues[0]: index=0 count=") for ln in lines)
    i = lines.index("# Driver: cuda")
    assert lines[i + 2] == "#   unavailable: libcuda.so.1 not found"
    assert "# Driver: local-sync" in lines and "# --device=local-sync://0" in lines
    # Rendered from the document alone: a JSON round trip changes nothing.
    assert render_text(json.loads(json.dumps(doc))) == text


def test_unsupported_tier_prints_missing() -> None:
    tier = Tier("vulkan-1.3", False, ("timelineSemaphore", "synchronization2"))
    text = render_text(dump_document([DriverDevices("vulkan", True, devices=(_gpu("vulkan", None, tier),))], "0"))
    lines = text.splitlines()
    i = lines.index("feature_tier[vulkan-1.3]: unsupported")
    assert lines[i + 1].strip() == "missing: timelineSemaphore, synchronization2"


def test_same_uuid_under_two_drivers() -> None:
    uuid = "GPU-8c1f5e2a-3b4d-4e6f-9a0b-1c2d3e4f5a6b"
    entries = [DriverDevices("vulkan", True, devices=(_gpu("vulkan", uuid),)),
               DriverDevices("cuda", True, devices=(_gpu("cuda", uuid.upper().replace("-", "").replace("GPU", "GPU-")),))]
    doc = dump_document(entries, "0")
    assert doc["drivers"][0]["devices"][0]["same_device_as"] == ["cuda://0"]
    assert doc["drivers"][1]["devices"][0]["same_device_as"] == ["vulkan://0"]
    assert "same_device_as: cuda://0" in render_text(doc).splitlines()
    # A dump of one driver still names its twin.
    only = dump_document(entries, "0", keep=[("vulkan", None)])
    assert [d["name"] for d in only["drivers"]] == ["vulkan"]
    assert only["drivers"][0]["devices"][0]["same_device_as"] == ["cuda://0"]


def test_keep_one_device() -> None:
    a = _gpu("vulkan", None)
    b = dataclasses.replace(a, ordinal=1, identity=Identity(name="second"))
    doc = dump_document([DriverDevices("vulkan", True, devices=(a, b))], "0", keep=[("vulkan", 1)])
    assert [d["uri"] for d in doc["drivers"][0]["devices"]] == ["vulkan://1"]


def test_device_list(lavapipe: DeviceInfo) -> None:
    listing = device_list(dump_document(_entries(lavapipe), "0"))
    assert listing["devices"][0] == {"uri": lavapipe.uri, "name": lavapipe.name, "driver": "vulkan",
                                     "uuid": lavapipe.identity.uuid, "uuid_uri": f"vulkan://{lavapipe.identity.uuid}"}
    lines = render_device_list(listing).splitlines()
    assert re.split(r"\s{2,}", lines[0]) == [lavapipe.uri, lavapipe.name, f"({lavapipe.identity.uuid})"]
    assert "# cuda: unavailable: libcuda.so.1 not found" in lines
