"""The public surface: engines, parser selection and families import from their packages."""

from __future__ import annotations


def test_engines_import_from_the_package() -> None:
    from openreward_rl.engines import OpenAIChatEngine, SGLangEngine, TransformersEngine
    from openreward_rl.engines.openai_chat import OpenAIChatEngine as OpenAIDirect
    from openreward_rl.engines.sglang import SGLangEngine as SGLangDirect
    from openreward_rl.engines.transformers import TransformersEngine as TransformersDirect

    assert (SGLangEngine, TransformersEngine, OpenAIChatEngine) == (SGLangDirect, TransformersDirect, OpenAIDirect)


def test_parser_selection_imports_from_the_package() -> None:
    from openreward_rl.families import known_families, match_family, parser_for_model, parser_for_template
    from openreward_rl.families.catalog import _FAMILIES
    from openreward_rl.parsers import get_parser

    assert parser_for_model("openai/gpt-oss-20b") == "gpt_oss"
    assert parser_for_template("... <|python_tag|> ...") == "llama3_json"
    assert match_family("openai/gpt-oss-20b").name in known_families()
    assert all(
        get_parser(family.parser) is not None for family in _FAMILIES.values() if family.parser
    )  # refused families may name none
    assert all(family.parser or family.refused for family in _FAMILIES.values())


def test_unknown_engine_name_is_an_attribute_error() -> None:
    import openreward_rl.engines as engines

    try:
        engines.NoSuchEngine  # noqa: B018
    except AttributeError as error:
        assert "NoSuchEngine" in str(error)
    else:
        raise AssertionError("an unknown engine name must raise AttributeError")


def test_lazy_names_are_declared_for_type_checkers() -> None:
    """Every lazily exported name is also imported under TYPE_CHECKING, from the module it loads from."""
    import ast
    from pathlib import Path

    import openreward_rl
    import openreward_rl.engines as engines

    root_names = {name: module for module, names in openreward_rl._EXPORTS.items() for name in names}
    for package, lazy in ((openreward_rl, root_names), (engines, engines._LAZY)):
        tree = ast.parse(Path(package.__file__).read_text())
        declared = {
            alias.name: node.module
            for block in tree.body
            if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
            for node in block.body
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }
        assert declared == dict(lazy), package.__name__


def test_engines_do_not_import_the_trajectory_layer() -> None:
    """Engines sit below trajectories: nothing under openreward_rl.engines imports openreward_rl.loop.trajectory."""
    import ast
    from pathlib import Path

    import openreward_rl.engines as engines

    for path in Path(engines.__file__).parent.glob("*.py"):
        imported = {n.module for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom)}
        assert not any(
            m
            and m.startswith(
                ("openreward_rl.loop.trajectory", "openreward_rl.loop.episode", "openreward_rl.loop.tool_episode")
            )
            for m in imported
        ), path.name


def test_engines_load_without_the_openreward_sdk() -> None:
    """A GPU host running only an engine does not import the OpenReward SDK (the engines share retry.py with the environment side)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from openreward_rl.engines import OpenAIChatEngine, SGLangEngine\n"
        "assert 'openreward' not in sys.modules, sorted(m for m in sys.modules if m.startswith('openreward.'))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
