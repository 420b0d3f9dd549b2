"""mma.sync split-K (tuning.mma_sync_split) over random shapes: a convolution's split stays within
the scratch room the schedule reserved, a split is 1 or at least 2 slices, matmuls stay unsplit.
(Apart from test_mma_pipeline.py so that its GPU tests run where hypothesis is not installed.)"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from halbench.compiler.codegen.tuning import MmaTiles, mma_sync_split, tuning_for


@settings(max_examples=200, deadline=None)
@given(m=st.integers(1, 4096), n=st.integers(1, 4096), k=st.integers(1, 20000), batch=st.integers(1, 8),
       room=st.integers(1, 16), kind=st.sampled_from(["tf32", "f16"]))
def test_split_never_exceeds_the_room(m, n, k, batch, room, kind):
    t = tuning_for("h100", "cuda")
    base = MmaTiles(16, 8, 8 if kind == "tf32" else 16, 2, 2, 2, 4, 32 if kind == "tf32" else 64, stages=3)
    got = mma_sync_split(t, base, kind, m, n, k, batch, room, conv=True)
    assert 1 <= got.split <= max(room, 1)
    assert got is base or got.split >= 2
    assert mma_sync_split(t, base, kind, m, n, k, batch, room, conv=False) is base  # matmuls unsplit
