"""Loads a script of tools/ as a module, for the tests that check it or share its rules."""

from __future__ import annotations

import functools
import importlib.util
import pathlib
import sys

TOOLS = pathlib.Path(__file__).resolve().parents[3] / "tools"


@functools.cache
def load_tool(name: str):
    """tools/<name>.py as the module <name>, loaded once."""
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module
