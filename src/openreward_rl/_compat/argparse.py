"""argparse's test for "a negative number, not an option" (`ArgumentParser._negative_number_matcher`).

Before Python 3.13 only `-1` and `-.5` were numbers, so a negative number in exponent form (`--lr -1e-5`)
was taken for an unknown option; 3.13's matcher reads it as a value. No version gate (the standard library
moves with the interpreter): a parser without the attribute is left as it is.
"""

from __future__ import annotations

import argparse
import re

__all__ = ["read_exponent_negatives"]

NEGATIVE_NUMBER = re.compile(r"-\.?\d")


def read_exponent_negatives(parser: argparse.ArgumentParser) -> None:
    """Make `parser` read `-1e-5` as a value, as Python 3.13's argparse does."""
    if hasattr(parser, "_negative_number_matcher"):
        parser._negative_number_matcher = NEGATIVE_NUMBER
