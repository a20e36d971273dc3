"""Tool schemas for the parser tests, written the way chat templates receive them.

`function_tool` is the OpenAI form (`{"type": "function", "function": {...}}`); `bare_tool` the inner
function alone, which some callers pass. Keys keep the order templates render: name, description,
parameters; and in parameters: type, properties, required.
"""

from __future__ import annotations

from typing import Any


def bare_tool(
    name: str, properties: dict[str, Any], *, required: list[str] | None = None, description: str | None = None
) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if description is not None:
        function["description"] = description
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required is not None:
        parameters["required"] = required
    function["parameters"] = parameters
    return function


def function_tool(
    name: str, properties: dict[str, Any], *, required: list[str] | None = None, description: str | None = None
) -> dict[str, Any]:
    return {"type": "function", "function": bare_tool(name, properties, required=required, description=description)}
