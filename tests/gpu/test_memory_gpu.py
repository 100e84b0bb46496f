"""Chapter 09 part 1 on a GPU: the probe reads the CUDA caching allocator's counters
(``memory_allocated``, ``max_memory_allocated``) at the same marks as on a CPU, and the parts
equal the byte model. (Written without a GPU at hand: run it where one exists.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_cuda_allocator_sees_the_parts_the_model_counts(dtype):
    from hpclab.memory.anatomy import measure, modelled

    cfg = SimpleNamespace(depth=8, batch_size=1024, side=28, optimizer="sgd-momentum", dtype=dtype)
    got = measure(cfg, 1024, "cuda")
    want = modelled(cfg, 1024)
    for part in ("params", "grads", "optimizer"):
        assert got[part] == pytest.approx(want[part], rel=0.01), (part, got, want)
    assert got["activations"] == pytest.approx(want["activations"], rel=0.1), (got, want)
