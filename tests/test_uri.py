"""Device URIs: the accepted forms and one-line errors for the rest."""

from __future__ import annotations

import pytest

from halbench.errors import UserError
from halbench.uri import DeviceURI, dashed_uuid, normalize_uuid, parse_uri

HEX = "6d65736132322e332e36000000000000"
DASHED = "GPU-6d657361-3232-2e33-2e36-000000000000"


@pytest.mark.parametrize("text, expected", [
    ("vulkan", DeviceURI("vulkan")),
    ("vulkan://", DeviceURI("vulkan")),
    ("VULKAN://", DeviceURI("vulkan")),
    ("cuda://0", DeviceURI("cuda", ordinal=0)),
    ("vulkan://12", DeviceURI("vulkan", ordinal=12)),
    ("local-sync://", DeviceURI("local-sync")),
    (f"vulkan://{DASHED}", DeviceURI("vulkan", uuid=HEX)),
    (f"vulkan://{DASHED.lower()[4:]}", DeviceURI("vulkan", uuid=HEX)),  # dashed without GPU-
    (f"vulkan://{HEX.upper()}", DeviceURI("vulkan", uuid=HEX)),  # IREE's undashed form
    ("  hip://1 ", DeviceURI("hip", ordinal=1)),
])
def test_parse(text: str, expected: DeviceURI) -> None:
    assert parse_uri(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "vulkan:0", "vulkan/0", "vulkan://xyz", "vulkan://-1",
                                  "vulkan://GPU-1234", "9vk://0", "vul kan://0", "://0", "vulkan://0x1"])
def test_bad_uris_are_user_errors(text: str) -> None:
    with pytest.raises(UserError) as e:
        parse_uri(text)
    assert "\n" not in str(e.value) and "DRIVER://" in str(e.value)


def test_str_round_trip() -> None:
    for text in ("vulkan://", "cuda://3", f"vulkan://{DASHED}"):
        assert str(parse_uri(text)) == text
    assert str(parse_uri(f"vulkan://{HEX}")) == f"vulkan://{DASHED}"


def test_uuid_helpers() -> None:
    assert dashed_uuid(bytes.fromhex(HEX)) == DASHED
    assert dashed_uuid(HEX) == DASHED and dashed_uuid(DASHED.lower()) == DASHED
    assert normalize_uuid(DASHED) == HEX and normalize_uuid("GPU-12") is None
    with pytest.raises(UserError):
        dashed_uuid("not-a-uuid")
