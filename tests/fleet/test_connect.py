"""_connect's retry: a Ray Client server that was reached but started no session (Ray raises
ConnectionAbortedError, "Initialization failure from server") is tried again, a bounded number of
times, only for ray:// addresses; anything else fails at once, in one line. Ray's own client is
replaced by a recorder of calls here: what is under test is halbench's retry policy around it."""

from __future__ import annotations

import pytest

from halbench.errors import UserError
from halbench.fleet import ray_fleet


class _Ray:
    def __init__(self, failures: list[BaseException]) -> None:
        self.failures, self.inits, self.shutdowns, self.connected = list(failures), 0, 0, False

    def is_initialized(self) -> bool:
        return self.connected

    def init(self, **_kwargs: object) -> None:
        self.inits += 1
        if self.failures:
            raise self.failures.pop(0)
        self.connected = True

    def shutdown(self) -> None:
        self.shutdowns += 1


@pytest.fixture(autouse=True)
def _no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_fleet, "_CLIENT_INIT_RETRIES", (0.0, 0.0))


def test_a_session_that_did_not_start_is_tried_again() -> None:
    ray = _Ray([ConnectionAbortedError("Initialization failure from server:\n")] * 2)
    assert ray_fleet._connect(ray, "ray://127.0.0.1:10001") is True
    assert (ray.inits, ray.shutdowns) == (3, 2)


def test_the_tries_are_bounded_and_the_error_says_where_to_look() -> None:
    ray = _Ray([ConnectionAbortedError("Initialization failure from server:\n")] * 5)
    with pytest.raises(UserError, match=r"started no session \(3 tries\); see ray_client_server\*\.err"):
        ray_fleet._connect(ray, "ray://127.0.0.1:10001")
    assert ray.inits == 3


def test_other_failures_and_head_addresses_fail_at_once() -> None:
    ray = _Ray([ConnectionError("Failed to connect to 127.0.0.1:1\nmore")])
    with pytest.raises(UserError, match=r"cannot connect to the Ray cluster at ray://127.0.0.1:1: Failed to connect"):
        ray_fleet._connect(ray, "ray://127.0.0.1:1")
    assert ray.inits == 1
    ray = _Ray([ConnectionAbortedError("aborted")])
    with pytest.raises(UserError, match=r"started no session \(1 try\)"):
        ray_fleet._connect(ray, "127.0.0.1:6379")
    assert ray.inits == 1  # not a Ray Client address: no retry


def test_a_connected_process_is_left_as_it_is() -> None:
    ray = _Ray([])
    ray.connected = True
    assert ray_fleet._connect(ray, "ray://127.0.0.1:10001") is False
    assert ray.inits == 0
