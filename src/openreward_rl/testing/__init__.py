"""Test doubles for parts that cannot run on a laptop, each faithful to its real wire format."""

from openreward_rl.testing.kv_cache import KVCacheModel
from openreward_rl.testing.sglang_server import (
    SGLANG_SAMPLING_PARAM_KEYS,
    RecordedRequest,
    ScriptedCompletion,
    SGLangTestServer,
    scripted_logprob,
)

__all__ = [
    "KVCacheModel",
    "SGLANG_SAMPLING_PARAM_KEYS",
    "RecordedRequest",
    "SGLangTestServer",
    "ScriptedCompletion",
    "scripted_logprob",
]  # sglang_server's own
