"""The host CPU probe behind local-sync and local-task."""

from __future__ import annotations

from halbench.probe import cpu

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse4_1 sse4_2 avx avx2 fma avx512f avx512bw amx_tile

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse4_1 sse4_2 avx avx2 fma avx512f avx512bw amx_tile

processor\t: 2
model name\t: Intel(R) Xeon(R) Platinum 8480+
physical id\t: 0
core id\t\t: 1
flags\t\t: fpu sse4_1 sse4_2 avx avx2 fma avx512f avx512bw amx_tile
"""
ARM = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes sha1 asimdhp asimddp sve sve2 bf16 i8mm
CPU implementer\t: 0x41
"""


def test_parse_x86() -> None:
    info = cpu.parse_cpuinfo(X86)
    assert info["model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert info["flags"] == ("sse4_1", "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "amx_tile")
    assert info["physical_cores"] == 2 and info["packages"] == 1


def test_parse_arm() -> None:
    info = cpu.parse_cpuinfo(ARM)
    assert {"asimd", "asimddp", "sve2", "bf16", "i8mm"} <= set(info["flags"])
    assert info["physical_cores"] is None


def test_both_local_drivers_see_the_same_host() -> None:
    (sync,) = cpu.query_devices("local-sync")
    (task,) = cpu.query_devices("local-task")
    assert (sync.driver, sync.ordinal, task.driver, task.ordinal) == ("local-sync", 0, "local-task", 0)
    assert sync.identity == task.identity and sync.identity.device_type == "cpu"
    assert sync.attributes["logical_cores"] >= 1 and sync.memory.total_bytes > 0
    assert isinstance(sync.attributes["simd_features"], tuple)
    assert all(isinstance(v, bool) for v in sync.features.flags.values())
