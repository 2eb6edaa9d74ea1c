"""Rewards: rule-based shaping and outcome (`heuristic`), answer matching (`answers`), LLM judge (`judge`).

`judge` is imported on demand (it pulls in the OpenAI client); see docs/rewards.md.
"""

from mcprl.rewards.answers import answer_matches
from mcprl.rewards.heuristic import HeuristicWeights, RewardState, reward_heuristic

__all__ = ["HeuristicWeights", "RewardState", "answer_matches", "reward_heuristic"]
