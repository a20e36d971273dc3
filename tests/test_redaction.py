"""Secret redaction: the registry, `redact` over nested data, the log filter and the process-wide hook."""

from __future__ import annotations

import logging

import pytest

from openreward_rl.env.environment import EnvironmentFault
from openreward_rl.redaction import (
    MASK,
    RedactingFilter,
    SecretRegistry,
    install_log_redaction,
    redact,
    register_secrets,
)

SECRET = "sk-test-redaction-0123456789"


def test_registry_masks_values_in_nested_data_and_keeps_other_objects() -> None:
    registry = SecretRegistry()
    registry.register([SECRET, None, "", "abc"])
    marker = object()
    data = {"a": [f"x{SECRET}y", (SECRET, 3)], SECRET: b"key=" + SECRET.encode(), "o": marker}
    assert registry.redact(data) == {"a": [f"x{MASK}y", (MASK, 3)], MASK: b"key=***", "o": marker}
    assert len(registry) == 1 and "abc" not in registry  # too short to be a secret


def test_longest_secret_wins_when_one_contains_another() -> None:
    registry = SecretRegistry()
    registry.register(["secret-abc", "secret-abc-def"])
    assert registry.redact("secret-abc-def and secret-abc") == f"{MASK} and {MASK}"


def test_an_empty_registry_returns_the_value_itself() -> None:
    value = {"k": "v"}
    assert SecretRegistry().redact(value) is value


def test_filter_masks_message_arguments_and_traceback() -> None:
    registry = SecretRegistry()
    registry.register([SECRET])
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    handler.addFilter(RedactingFilter(registry))
    logger = logging.getLogger("openreward_rl.test_redaction.filter")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise ValueError(f"bad key {SECRET}")
        except ValueError:
            logger.exception("calling with %s", SECRET)
    finally:
        logger.removeHandler(handler)
    (record,) = records
    assert record.getMessage() == f"calling with {MASK}"
    assert SECRET not in (record.exc_text or "") and f"bad key {MASK}" in (record.exc_text or "")
    assert SECRET not in logging.Formatter().format(record)


def test_the_process_hook_masks_records_for_every_handler(caplog: pytest.LogCaptureFixture) -> None:
    install_log_redaction()
    install_log_redaction()  # idempotent
    register_secrets({"openai_api_key": SECRET, "other": ("tok-in-sdk-form-99", ["api.example.com"])})
    with caplog.at_level(logging.INFO):
        logging.getLogger("anything.at.all").info("token=%s", SECRET)
    assert SECRET not in caplog.text and f"token={MASK}" in caplog.text
    assert redact({"k": SECRET, "j": "tok-in-sdk-form-99"}) == {"k": MASK, "j": MASK}


def test_environment_faults_never_carry_a_registered_secret() -> None:
    register_secrets([SECRET])
    fault = EnvironmentFault(f"upstream said {SECRET}", kind="ToolFailed")
    assert SECRET not in str(fault) and MASK in str(fault)


def test_known_credentials_in_the_environment_are_registered() -> None:
    from openreward_rl.redaction import KNOWN_SECRET_VARIABLES, register_known_secrets

    values = {name: f"{name.lower()}-value-test-0042" for name in KNOWN_SECRET_VARIABLES}
    register_known_secrets(
        {**values, "CUSTOM_KEY_ENV": "custom-value-test-0042", "UNRELATED": "unrelated-value-0042"}, ["CUSTOM_KEY_ENV"]
    )
    text = " ".join([*values.values(), "custom-value-test-0042", "unrelated-value-0042"])
    assert redact(text) == " ".join([MASK] * (len(values) + 1) + ["unrelated-value-0042"])


def test_lines_the_sdk_prints_through_structlog_are_masked() -> None:
    """The SDK's own loggers (structlog print loggers, not `logging`): message and traceback."""
    import io

    import structlog

    install_log_redaction()
    register_secrets([SECRET])
    out = io.StringIO()
    logger = structlog.wrap_logger(
        structlog.PrintLogger(out),
        processors=[structlog.processors.format_exc_info, structlog.dev.ConsoleRenderer(colors=False)],
    )
    try:
        raise RuntimeError(f"upstream rejected {SECRET}")
    except RuntimeError:
        logger.error("tool_call_failed", key=SECRET, exc_info=True)
    logger.info("plain %s", SECRET)
    assert (
        SECRET not in out.getvalue()
        and f"upstream rejected {MASK}" in out.getvalue()
        and out.getvalue().count(MASK) >= 3
    )
