"""The runtime: loads a bundle on a HAL device, records its command buffers, invokes, profiles.

It never imports ``halbench.compiler``: a bundle compiled elsewhere runs on a machine that has
no compiler.

Example
-------
>>> import halbench
>>> from halbench.runtime import Module
>>> with halbench.create_device("local-sync://") as dev:                 # doctest: +SKIP
...     with Module.load("model.hbx", dev) as m:
...         (logits,) = m.invoke("main", [x])
...         p = m.profile("main", [x], runs=20)
"""

from __future__ import annotations

from halbench.runtime.inputs import check_inputs
from halbench.runtime.module import Module
from halbench.runtime.profile import DispatchInfo, ProfileResult

__all__ = ["DispatchInfo", "Module", "ProfileResult", "check_inputs"]
