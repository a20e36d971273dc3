"""The public surface: engines, parser selection and families import from their packages."""

from __future__ import annotations


def test_engines_import_from_the_package() -> None:
    from openreward_rl.engines import OpenAIChatEngine, SGLangEngine, TransformersEngine
    from openreward_rl.engines.openai_chat import OpenAIChatEngine as OpenAIDirect
    from openreward_rl.engines.sglang import SGLangEngine as SGLangDirect
    from openreward_rl.engines.transformers import TransformersEngine as TransformersDirect

    assert (SGLangEngine, TransformersEngine, OpenAIChatEngine) == (SGLangDirect, TransformersDirect, OpenAIDirect)


def test_parser_selection_imports_from_the_package() -> None:
    from openreward_rl.parsers import KNOWN_PARSERS, get_parser, parser_for_model, parser_for_template

    assert parser_for_model("openai/gpt-oss-20b") == "gpt_oss"
    assert parser_for_template("... <|python_tag|> ...") == "llama3_json"
    assert all(get_parser(name) is not None for name in KNOWN_PARSERS)


def test_unknown_engine_name_is_an_attribute_error() -> None:
    import openreward_rl.engines as engines

    try:
        engines.NoSuchEngine  # noqa: B018
    except AttributeError as error:
        assert "NoSuchEngine" in str(error)
    else:
        raise AssertionError("an unknown engine name must raise AttributeError")
