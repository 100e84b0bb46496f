"""``hpclab.environ.environ``: variables for a block, each put back as it was, also on error."""

from __future__ import annotations

import os

import pytest

from hpclab.environ import environ


def test_environ_sets_and_unsets_for_the_block_and_restores_each_name_even_on_error(monkeypatch):
    monkeypatch.setenv("HPCLAB_T_KEPT", "before")
    monkeypatch.setenv("HPCLAB_T_GONE", "there")
    monkeypatch.delenv("HPCLAB_T_NEW", raising=False)
    with (
        pytest.raises(RuntimeError),
        environ({"HPCLAB_T_KEPT": "during", "HPCLAB_T_NEW": "1"}, unset=("HPCLAB_T_GONE",)),
    ):
        assert os.environ["HPCLAB_T_KEPT"] == "during"
        assert os.environ["HPCLAB_T_NEW"] == "1"
        assert "HPCLAB_T_GONE" not in os.environ
        raise RuntimeError("the block failed")
    assert os.environ["HPCLAB_T_KEPT"] == "before"
    assert os.environ["HPCLAB_T_GONE"] == "there"
    assert "HPCLAB_T_NEW" not in os.environ
