"""Test doubles for parts that cannot run on a laptop, each faithful to its real wire format."""

from openreward_rl.testing import sglang_server
from openreward_rl.testing.sglang_server import (
    SGLANG_SAMPLING_PARAM_KEYS,
    RecordedRequest,
    ScriptedCompletion,
    SGLangTestServer,
    scripted_logprob,
)

__all__ = list(sglang_server.__all__)  # the package exports what its one module does
