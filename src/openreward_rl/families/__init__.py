"""Model families: one object per family of models (parser, stop tokens, reasoning markers, bridge).

>>> from openreward_rl.families import family_for
>>> family = family_for("zai-org/GLM-4.5-Air")
>>> family.name, family.parser, family.tool_turn_stops
('glm-4.5', 'glm45', ('<|observation|>',))
"""

from openreward_rl.families.base import ModelFamily, ThinkingMarkers, TurnBridge, UnsupportedModelError
from openreward_rl.families.catalog import (
    family_for,
    find_family,
    get_family,
    known_families,
    match_family,
    parser_for_model,
    parser_for_template,
    register_family,
)

__all__ = [
    "ModelFamily",
    "ThinkingMarkers",
    "TurnBridge",
    "UnsupportedModelError",
    "family_for",
    "find_family",
    "get_family",
    "known_families",
    "match_family",
    "parser_for_model",
    "parser_for_template",
    "register_family",
]
