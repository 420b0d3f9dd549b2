"""Device URIs: ``driver://path``.

``path`` is empty (the first device that meets the driver's baseline), an ordinal
(``vulkan://1``), or a UUID: dashed ``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` (the form
``nvidia-smi -L`` prints) or the 32 hex digits IREE prints for Vulkan devices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from halbench.errors import UserError

__all__ = ["DeviceURI", "dashed_uuid", "normalize_uuid", "parse_uri"]

_DRIVER_RE = re.compile(r"^[a-z][a-z0-9-]*$")
_HEX32_RE = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True)
class DeviceURI:
    """A parsed device URI. Exactly one of ``ordinal`` / ``uuid`` is set, or neither."""

    driver: str
    ordinal: int | None = None
    uuid: str | None = None  # canonical: 32 lowercase hex digits, no dashes

    @property
    def path(self) -> str:
        """What follows ``driver://``: '', the ordinal, or the dashed UUID."""
        return str(self).partition("://")[2]

    def __str__(self) -> str:
        if self.ordinal is not None:
            return f"{self.driver}://{self.ordinal}"
        if self.uuid is not None:
            return f"{self.driver}://{dashed_uuid(self.uuid)}"
        return f"{self.driver}://"


def normalize_uuid(text: str) -> str | None:
    """Return the 32-hex-digit lowercase form of a UUID in any accepted spelling, or None."""
    t = text.strip().lower()
    t = t.removeprefix("gpu-")
    t = t.replace("-", "")
    return t if _HEX32_RE.match(t) else None


def dashed_uuid(uuid: bytes | str) -> str:
    """``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` from 16 raw bytes or any accepted text."""
    if isinstance(uuid, (bytes, bytearray)):
        h = bytes(uuid).hex()
    else:
        n = normalize_uuid(uuid)
        if n is None:
            raise UserError(f"'{uuid}' is not a device UUID (expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)")
        h = n
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def parse_uri(text: str) -> DeviceURI:
    """Parse ``driver://path``; a bare driver name (``vulkan``) means ``vulkan://``.

    Raises :class:`UserError` naming the accepted forms when the text is malformed.
    """
    forms = "expected DRIVER://, DRIVER://ORDINAL or DRIVER://GPU-UUID, e.g. vulkan://0"
    if not isinstance(text, str) or not text.strip():
        raise UserError(f"empty device URI: {forms}")
    t = text.strip()
    if "://" in t:
        driver, _, path = t.partition("://")
    elif ":" in t or "/" in t:
        raise UserError(f"malformed device URI '{text}': {forms}")
    else:
        driver, path = t, ""
    driver = driver.lower()
    if not _DRIVER_RE.match(driver):
        raise UserError(f"malformed device URI '{text}': bad driver name '{driver}'; {forms}")
    if path == "":
        return DeviceURI(driver)
    if re.fullmatch(r"[0-9]{1,6}", path):  # ASCII digits only: "²".isdigit() is True
        return DeviceURI(driver, ordinal=int(path))
    uuid = normalize_uuid(path)
    if uuid is None:
        raise UserError(f"malformed device URI '{text}': '{path}' is neither an ordinal nor a UUID; {forms}")
    return DeviceURI(driver, uuid=uuid)
