"""How the batching engine forms decode waves from SkyRL's one-prompt calls, on a recording generator
(no model: what is under test is which requests share a batch, and how long a wave waits)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from mcprl.inference.engine import BatchingEngine, Completion, PromptTooLong, SamplingParams


class RecordingEngine(BatchingEngine):
    """Answers each prompt with its first token; records the first tokens (session numbers) per batch."""

    def __init__(self, **options) -> None:
        super().__init__(tokenizer=None, context=64, max_batch_size=8, **options)
        self.batches: list[list[int]] = []

    def _generate(self, prompts_token_ids: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        self.batches.append(sorted(p[0] for p in prompts_token_ids))
        return [Completion("x", [p[0]], [-0.1], "stop") for p in prompts_token_ids]


async def episode(engine: BatchingEngine, session: int, turns: int, tool_seconds: float = 0.0,
                  first_prompt: list[int] | None = None) -> None:
    """What SkyRL's agent loop does: a call per turn, an env step between turns, finish_session at the end."""
    try:
        for turn in range(turns):
            prompt = first_prompt if first_prompt and turn == 0 else [session, turn]
            await engine.generate({"prompt_token_ids": [prompt], "session_ids": [f"s{session}"],
                                   "sampling_params": {"max_tokens": 1}})
            await asyncio.sleep(tool_seconds if turn == 0 else 0.0)
    finally:
        await engine.finish_session(f"s{session}")


def run_episodes(engine: BatchingEngine, *episodes) -> float:
    async def main() -> None:
        await asyncio.gather(*episodes, return_exceptions=True)

    engine.expect(len(episodes))
    start = time.perf_counter()
    asyncio.run(main())
    return time.perf_counter() - start


@pytest.mark.parametrize("max_wait_ms", [None, 100.0])
def test_waves_hold_every_running_episode_only_when_waiting_is_unbounded(max_wait_ms) -> None:
    engine = RecordingEngine(max_wait_ms=max_wait_ms)
    run_episodes(engine, episode(engine, 1, 2), episode(engine, 2, 2), episode(engine, 3, 2, tool_seconds=0.4))
    if max_wait_ms is None:  # the slow tool call delays the second wave; nobody is left behind
        assert engine.batches == [[1, 2, 3], [1, 2, 3]]
    else:  # the wave closes after 100 ms without episode 3, which then decodes alone
        assert engine.batches == [[1, 2, 3], [1, 2], [3]]


def test_an_episode_that_ends_releases_the_wave_at_once() -> None:
    engine = RecordingEngine(max_wait_ms=None)
    seconds = run_episodes(engine, episode(engine, 1, 2), episode(engine, 2, 2), episode(engine, 3, 1, 0.3))
    assert engine.batches == [[1, 2, 3], [1, 2]]
    assert seconds < 1.0  # woken by finish_session, not a timeout


def test_an_episode_refused_before_its_first_turn_does_not_hold_the_first_wave() -> None:
    engine = RecordingEngine(max_wait_ms=None)
    seconds = run_episodes(engine, episode(engine, 1, 1), episode(engine, 2, 1),
                           episode(engine, 3, 1, first_prompt=[3] * 100))  # longer than the 64-token context
    assert engine.batches == [[1, 2]] and seconds < 1.0


def test_first_wave_waits_for_announced_episodes_that_start_late() -> None:
    engine = RecordingEngine(max_wait_ms=None)

    async def late(session: int) -> None:  # env init (tool listing) that takes a while
        await asyncio.sleep(0.2)
        await episode(engine, session, 1)

    run_episodes(engine, episode(engine, 1, 1), late(2))
    assert engine.batches == [[1, 2]]


def test_without_sessions_a_quiet_gap_closes_the_batch() -> None:
    engine = RecordingEngine(batch_wait_ms=20.0)

    async def main() -> list[dict]:
        calls = [engine.generate({"prompt_token_ids": [[i]], "sampling_params": {"max_tokens": 1}}) for i in (1, 2)]
        return await asyncio.gather(*calls)

    outputs = asyncio.run(main())
    assert engine.batches == [[1, 2]] and [o["response_ids"] for o in outputs] == [[[1]], [[2]]]
    with pytest.raises(PromptTooLong):
        asyncio.run(engine.generate({"prompt_token_ids": [[1] * 100]}))


def test_batches_do_not_depend_on_tool_timing_when_more_episodes_run_than_a_batch_holds() -> None:
    """An eval runs 100 episodes in batches of 16: which rows share a batch (and so their bf16 logits) must
    come from the episodes' state, not from which tool call returned first."""
    import random

    def batches(seed: int) -> list[list[int]]:
        engine = RecordingEngine(max_wait_ms=None)
        delays = random.Random(seed)
        run_episodes(engine, *(episode(engine, s, turns=1 + s % 3, tool_seconds=delays.uniform(0, 0.05))
                               for s in range(1, 21)))
        return engine.batches

    first = batches(1)
    assert first == batches(2)
    assert first[:3] == [list(range(1, 9)), list(range(9, 17)), list(range(17, 21))]  # a wave of 20 in 8s, in order
    assert all(len(b) <= 8 for b in first)
