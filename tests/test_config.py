from __future__ import annotations

from dataclasses import dataclass

import pytest

from hpclab.config import Config, ConfigError, param, quick_mode


@dataclass(frozen=True)
class Demo(Config):
    size: int = param(64, min=1, max=4096, quick=8, help="matrix size")
    dtype: str = param("fp32", choices=("fp32", "fp64"), help="dtype")
    rate: float = param(0.1, min=0.0, max=1.0, help="learning rate")
    sizes: tuple = param((1, 2), min=1, max=10, help="several sizes")
    flag: bool = param(False, help="a switch")

    def check(self):
        if self.dtype == "fp64" and self.size > 1024:
            raise ConfigError("size > 1024 is not allowed with dtype=fp64")


def test_defaults_and_coercion():
    c = Demo(size=32.0, rate=1, sizes=[3, 4])
    assert c.size == 32 and isinstance(c.size, int)
    assert c.rate == 1.0 and isinstance(c.rate, float)
    assert c.sizes == (3, 4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"size": 0}, "size=0 is out of range; allowed: 1..4096"),
        ({"size": 2.5}, "size=2.5 must be a whole number"),
        ({"dtype": "fp8"}, "dtype='fp8' is not allowed; allowed: one of fp32, fp64"),
        ({"rate": "fast"}, "rate='fast' must be a number"),
        ({"sizes": (1, 11)}, "sizes=11 is out of range; allowed: 1..10"),
        ({"flag": "yes"}, "flag='yes' must be true or false"),
        ({"dtype": "fp64", "size": 2048}, "size > 1024 is not allowed with dtype=fp64"),
    ],
)
def test_bad_values_give_one_line_naming_field_and_range(kwargs, message):
    with pytest.raises(ConfigError) as info:
        Demo(**kwargs)
    assert str(info.value) == message


def test_create_refuses_unknown_names():
    with pytest.raises(ConfigError, match="unknown parameter 'sise'.*known: .*size"):
        Demo.create(sise=3)


def test_quick_mode_defaults(monkeypatch):
    monkeypatch.setenv("HPCLAB_QUICK", "1")
    assert quick_mode()
    assert Demo.create().size == 8
    assert Demo.create(size=100).size == 100  # explicit beats quick
    monkeypatch.setenv("HPCLAB_QUICK", "0")
    monkeypatch.setenv("CI", "true")
    assert not quick_mode()  # HPCLAB_QUICK=0 overrides CI
    monkeypatch.delenv("HPCLAB_QUICK")
    assert quick_mode() and Demo.create().size == 8


def test_frozen():
    with pytest.raises(AttributeError):
        Demo().size = 3


def test_describe_drives_cli_and_widgets():
    rows = {r["name"]: r for r in Demo.describe()}
    assert rows["size"]["allowed"] == "1..4096"
    assert rows["dtype"]["choices"] == ("fp32", "fp64")
    assert rows["flag"]["type"] == "bool"


def test_one_value_for_a_list_field_is_a_list_of_one():
    from hpclab.storage.read_experiment import ReadConfig

    cfg = ReadConfig.create(cache="warm")
    assert cfg.cache == ("warm",)
    with pytest.raises(ConfigError, match="cache"):
        ReadConfig.create(cache="tepid")
