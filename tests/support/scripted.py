"""A scripted inference client with SkyRL's interface: it replays expert actions, or a fixed text.

It stands in for the model (as SkyRL's own CPU tests do) so tests can check the real generator,
env, servers and evaluation with exact expected outcomes.
"""

from __future__ import annotations

from typing import Any, Callable


class ScriptedClient:
    def __init__(self, tokenizer, policy: Callable[[str, int], str]) -> None:
        """`policy(user_question, turn_index) -> action text`."""
        self.tokenizer = tokenizer
        self.policy = policy
        self.default_sampling = None
        self.calls = 0

    async def generate(self, input_batch: dict[str, Any], model: str | None = None) -> dict[str, Any]:
        texts, ids = [], []
        for prompt in input_batch["prompt_token_ids"]:
            history = self.tokenizer.decode(prompt)
            question = history.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
            turn = history.count("<|im_start|>assistant") - 1
            text = self.policy(question, turn)
            texts.append(text)
            ids.append(self.tokenizer.encode(text, add_special_tokens=False))
        self.calls += 1
        return {"responses": texts, "response_ids": ids, "stop_reasons": ["stop"] * len(texts),
                "response_logprobs": [[-0.5] * len(i) for i in ids]}

    def expect(self, sessions: int) -> None:
        """Replies are computed per call, so there is no decode wave to size."""

    async def finish_session(self, session_id: Any) -> None:
        return None


def expert_policy(experts: list[dict[str, Any]]) -> Callable[[str, int], str]:
    """Replays each task's expert trajectory, keyed by its user question."""
    by_question = {e["messages"][1]["content"]: [m["content"] for m in e["messages"] if m["role"] == "assistant"]
                   for e in experts}
    return lambda question, turn: by_question[question][min(turn, len(by_question[question]) - 1)]
