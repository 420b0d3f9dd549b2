"""hip:// where no ROCm exists: the driver is listed as unavailable with the reason and
creating a device raises DriverUnavailable. Everything else of the hip driver is untested."""

from __future__ import annotations

import pytest

import halbench
from halbench.drivers import get_driver, query_available_drivers
from halbench.errors import DriverUnavailable


def test_hip_unavailable_path():
    try:
        get_driver("hip").query_available_devices()
    except DriverUnavailable as e:
        status = next(s for s in query_available_drivers() if s.name == "hip")
        assert not status.available and status.reason == e.reason
        with pytest.raises(DriverUnavailable):
            halbench.create_device("hip://")
    else:
        pytest.skip("a HIP device exists here: the conformance suite covers it")


def test_hip_api_adapter_reports_missing_runtime():
    from halbench.drivers.hip import api

    try:
        api.load_hip()
    except DriverUnavailable as e:
        assert "libamdhip64" in e.reason or "hip-python" in e.reason or "hipInit" in e.reason
    else:
        pytest.skip("HIP runtime present")
