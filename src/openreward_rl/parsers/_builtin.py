"""Imports every format module of this package, so that each registers itself with `register_parser`.

The package's `__init__` imports this module once, after `base`: every way into the package registers
the built-in formats, and `base` itself imports none of them.
"""

import importlib
import pkgutil
from pathlib import Path

_NOT_FORMATS = {"base", "common", "schema"}
_PACKAGE = __name__.rpartition(".")[0]

for _module in pkgutil.iter_modules([str(Path(__file__).parent)]):
    if not _module.name.startswith("_") and _module.name not in _NOT_FORMATS:
        importlib.import_module(f"{_PACKAGE}.{_module.name}")
