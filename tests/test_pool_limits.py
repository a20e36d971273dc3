"""Connection pools bounded by the open-file limit (`_limits.pool_limit`): the SGLang engine's own pool
and the pooled environment transport take 40% of the soft limit each unless told otherwise, and
requests past a pool's cap wait for a connection and complete (real SGLang wire double, real aiohttp)."""

from __future__ import annotations

import asyncio
import resource

import pytest

from openreward_rl._compat.openreward.transport import PooledEnvironmentsAPI
from openreward_rl._limits import POOL_SHARE, pool_limit
from openreward_rl.assets import load_tokenizer
from openreward_rl.engines import GenerationRequest
from openreward_rl.engines.sglang import SGLangEngine
from openreward_rl.testing import ScriptedCompletion, SGLangTestServer

pytestmark = pytest.mark.anyio


def test_the_cap_is_a_share_of_the_open_file_limit() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert pool_limit() == (0 if soft == resource.RLIM_INFINITY else max(16, int(soft * POOL_SHARE)))
    assert pool_limit(7) == 7


async def test_engine_and_environment_pools_are_capped() -> None:
    engine = SGLangEngine("http://127.0.0.1:9")
    api = PooledEnvironmentsAPI(base_url="http://127.0.0.1:9", api_key="local")
    try:
        assert (await engine._own()).connector.limit == pool_limit()
        capped = SGLangEngine("http://127.0.0.1:9", max_connections=3)
        assert (await capped._own()).connector.limit == 3
        await capped.aclose()
        assert api._get_connector().limit == pool_limit()
    finally:
        await engine.aclose()
        await api._get_connector().close()


async def test_requests_past_the_cap_wait_and_complete() -> None:
    tokenizer = load_tokenizer("offline:qwen3")
    script = [ScriptedCompletion(text=f"answer {i}") for i in range(12)]
    async with SGLangTestServer(tokenizer, script=script, latency_s=0.05) as server:
        engine = SGLangEngine(server.url, max_connections=2)
        try:
            request = GenerationRequest(input_ids=[9707], sampling_params={"max_new_tokens": 8})
            generations = await asyncio.gather(*(engine.generate(request) for _ in range(12)))
        finally:
            await engine.aclose()
    assert sorted(tokenizer.decode(g.output_ids, skip_special_tokens=True) for g in generations) == sorted(
        f"answer {i}" for i in range(12)
    )
