"""Flags: parsing, overrides, and the README's flag table."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlxpy import env
from rlxpy.errors import EnvError


def test_bad_value_names_the_flag():
    with pytest.raises(EnvError, match="RLX_WGPU_MAX_BINDING"):
        env.FLAGS["RLX_WGPU_MAX_BINDING"].parse("lots")


def test_override_restores():
    before = int(env.MAX_BINDING)
    with env.override(RLX_WGPU_MAX_BINDING=1 << 20):
        assert int(env.MAX_BINDING) == 1 << 20
    assert int(env.MAX_BINDING) == before


def test_readme_lists_every_flag():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    missing = [name for name in env.FLAGS if f"`{name}`" not in readme]
    assert not missing, f"README's flag table lacks {missing}"
