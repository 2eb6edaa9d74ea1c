"""Rule-based per-step reward: shaping for good tool use plus a verifiable outcome reward.

A step is scored in three stages that the LLM judge reuses:

1. `observe` records what the step did (call made, sequence pointer, tools that succeeded, answer
   correctness) in the episode's `RewardState` and returns the facts;
2. `shaping_components` / `outcome_components` turn the facts into named contributions;
3. `settle` caps the episode's shaping (positive total <= ``shaping_cap``, negative total >=
   ``-penalty_cap``), clips the step to [-1, 1] and records the caps as components, so the
   components of a step always sum to its ``total_reward``.

Because shaping is capped and ``solved - penalty_cap > shaping_cap``, a solved episode always
returns more than any unsolved one (checked when `HeuristicWeights` is built).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcprl.options import opt
from mcprl.protocol.parsing import ParsedAction, canonical_json, parse_action
from mcprl.rewards.answers import ABS_TOL, REL_TOL, answer_matches
from mcprl.rewards.base import NO_REWARD, STEP_MAX, STEP_MIN, Reward, Step, StopReason

OUTCOME_COMPONENTS = frozenset(
    {"solved", "wrong_answer", "answer_after_error", "ungrounded_answer", "premature_answer", "unanswered"}
)
_REWARDS = (
    "tool_allowed", "first_call", "sequence_step", "tool_ok", "solved",
    "shaping_cap", "penalty_cap", "rel_tol", "abs_tol",
)  # fmt: skip
_PENALTIES = (
    "malformed", "unknown_tool", "disallowed_tool", "timeout", "invalid_arguments", "tool_error",
    "server_error", "repeated_call", "no_action", "wrong_answer", "answer_after_error", "premature_answer",
    "ungrounded_answer", "unanswered",
)  # fmt: skip
_ERROR_TYPES = ("invalid_arguments", "unknown_tool", "timeout", "server_error", "tool_error")


@dataclass(frozen=True)
class HeuristicWeights:
    """Every reward weight and threshold of the heuristic (see docs/rewards.md for the table)."""

    tool_allowed: float = opt(0.2, "The called tool exists and is in the task's allowed list.")
    first_call: float = opt(0.4, "The episode's first call is success.must_call_tool.")
    sequence_step: float = opt(0.2, "The call succeeded and is the next expected tool_sequence step.")
    tool_ok: float = opt(0.1, "The tool returned ok.")
    malformed: float = opt(-0.2, "A recognised but unparseable call.")
    unknown_tool: float = opt(-0.2, "The tool does not exist.")
    disallowed_tool: float = opt(-0.2, "The tool exists but is not in gt['allowed_tools'].")
    timeout: float = opt(-0.2, "The call timed out.")
    invalid_arguments: float = opt(-0.3, "The arguments failed the tool's schema (nets negative with tool_allowed).")
    tool_error: float = opt(-0.05, "The tool ran and reported an error.")
    server_error: float = opt(0.0, "The server failed; not the model's fault.")
    repeated_call: float = opt(0.0, "Same name and arguments as an earlier call (never earns shaping).")
    no_action: float = opt(-0.05, "Prose with neither a call nor an answer.")
    solved: float = opt(1.0, "Correct answer, or (answer-free task) every tool_sequence step done.")
    wrong_answer: float = opt(-0.3, "An answer that does not match gt['answer'].")
    answer_after_error: float = opt(-0.5, "Added to wrong_answer or ungrounded_answer when the answer comes while "
                                          "the latest call had failed (made up after an error), so that with "
                                          "any shaping such an episode returns < 0 (checked); 0 turns it off. "
                                          "The default sum equals unanswered.")
    premature_answer: float = opt(-0.3, "An answer to an answer-free task before its steps are done.")
    unanswered: float = opt(-0.8, "The episode ended (max turns) unanswered: <= wrong_answer - shaping_cap "
                                  "(see episode_end).")
    ungrounded_answer: float = opt(-0.3, "A correct answer before the required calls were made ok: = wrong_answer.")
    shaping_cap: float = opt(0.5, "Most positive shaping an episode can earn.")
    penalty_cap: float = opt(0.4, "Most negative shaping an episode can accumulate.")
    require_grounding: bool = opt(True, "A correct answer counts only after must_call tool(s) returned ok.")
    rel_tol: float = opt(REL_TOL, "Numeric answers: relative tolerance.")
    abs_tol: float = opt(ABS_TOL, "Numeric answers: absolute tolerance.")

    def __post_init__(self) -> None:
        for name in _REWARDS:
            if getattr(self, name) < 0:
                raise ValueError(f"reward weight {name}={getattr(self, name)} must be >= 0")
        for name in _PENALTIES:
            if getattr(self, name) > 0:
                raise ValueError(f"penalty weight {name}={getattr(self, name)} must be <= 0")
        if not 0 < self.solved <= STEP_MAX:
            raise ValueError(f"solved={self.solved} must be in (0, 1]: a step reward is clipped to [-1, 1]")
        if self.solved - self.penalty_cap <= self.shaping_cap:
            raise ValueError(
                f"solved - penalty_cap ({self.solved} - {self.penalty_cap}) must exceed shaping_cap "
                f"({self.shaping_cap}), or an unsolved episode could out-earn a solved one; "
                "lower shaping_cap or penalty_cap"
            )
        without_it = max(self.wrong_answer, self.ungrounded_answer) + self.shaping_cap  # a made-up answer's best
        if self.answer_after_error and without_it + self.answer_after_error >= 0:
            raise ValueError(
                f"answer_after_error={self.answer_after_error} is too weak: an answer made up after an error "
                f"could still return {without_it + self.answer_after_error:+.2f} with full shaping; make it < "
                f"{-without_it:.2f}, or 0 to turn it off"
            )


@dataclass
class RewardState:
    """What one episode has done so far; create one per episode."""

    calls: list[tuple[str, str]] = field(default_factory=list)  # (name, canonical arguments)
    ok_tools: list[str] = field(default_factory=list)  # tools that returned ok, in call order
    ok_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (name, arguments) of ok calls
    next_step: int = 0  # index of the next expected tool_sequence step
    first_call_done: bool = False
    last_call_failed: bool = False  # the latest call came back with an error (not repaired since)
    positive_shaping: float = 0.0
    negative_shaping: float = 0.0
    solved: bool = False
    steps: int = 0
    episode_return: float = 0.0


@dataclass(frozen=True)
class StepFacts:
    """What one step did, as the reward sees it."""

    kind: str
    name: str | None = None
    exists: bool = False
    allowed: bool = False
    repeated: bool = False
    first_call_correct: bool = False
    sequence_matched: bool = False
    ok: bool = False
    error_type: str | None = None
    answer_correct: bool | None = None  # None: no answer, or nothing to check it against
    after_error: bool = False  # an answer given while the latest call had failed
    grounded: bool = False
    premature: bool = False
    solved_now: bool = False


def reward_heuristic(
    action: ParsedAction | str,
    tool_name: str | None,
    tool_result: dict[str, Any] | None,
    gt: dict[str, Any],
    state: RewardState,
    weights: HeuristicWeights = HeuristicWeights(),
) -> dict[str, Any]:
    """Score one step: ``{"total_reward", "components", "task_complete"}``; updates `state`."""
    parsed = action if isinstance(action, ParsedAction) else parse_action(action)
    facts = observe(parsed, tool_name, tool_result, gt, state, weights)
    components = {**shaping_components(facts, weights), **outcome_components(facts, weights)}
    return settle(components, state, weights)


def observe(
    action: ParsedAction,
    tool_name: str | None,
    tool_result: dict[str, Any] | None,
    gt: dict[str, Any],
    state: RewardState,
    weights: HeuristicWeights = HeuristicWeights(),
) -> StepFacts:
    """Record the step in `state` (calls, sequence pointer, solved) and return what it did."""
    gt = gt if isinstance(gt, dict) else {}
    state.steps += 1
    if action.kind == "tool_call":
        facts = _observe_call(action, tool_name or action.name or "", tool_result, gt, state)
    elif action.kind == "answer":
        facts = _observe_answer(action.answer or "", gt, state, weights)
    else:
        facts = StepFacts(kind=action.kind)
    if facts.solved_now:
        state.solved = True
    return facts


def shaping_components(facts: StepFacts, weights: HeuristicWeights) -> dict[str, float]:
    """Named shaping contributions of one step (before the episode caps)."""
    if facts.kind == "malformed":
        return {"malformed": weights.malformed}
    if facts.kind == "none":
        return {"no_action": weights.no_action}
    if facts.kind != "tool_call":
        return {}
    parts: dict[str, float] = {}
    if facts.repeated:
        parts["repeated_call"] = weights.repeated_call
    else:
        if facts.allowed:
            parts["tool_allowed"] = weights.tool_allowed
        if facts.first_call_correct:
            parts["first_call"] = weights.first_call
        if facts.sequence_matched:
            parts["sequence_step"] = weights.sequence_step
        if facts.ok:
            parts["tool_ok"] = weights.tool_ok
    if facts.exists and not facts.allowed:
        parts["disallowed_tool"] = weights.disallowed_tool
    if facts.error_type in _ERROR_TYPES:
        parts[facts.error_type] = getattr(weights, facts.error_type)
    return parts


def outcome_components(facts: StepFacts, weights: HeuristicWeights) -> dict[str, float]:
    """The uncapped outcome part of one step: solved, or a wrong/ungrounded/premature answer."""
    if facts.solved_now:
        return {"solved": weights.solved}
    if facts.premature:
        return {"premature_answer": weights.premature_answer}
    made_up = {"answer_after_error": weights.answer_after_error} if facts.after_error else {}
    if facts.answer_correct is True and not facts.grounded:
        return {"ungrounded_answer": weights.ungrounded_answer, **made_up}
    if facts.answer_correct is False:
        return {"wrong_answer": weights.wrong_answer, **made_up}
    return {}


def settle(components: dict[str, float], state: RewardState, weights: HeuristicWeights) -> dict[str, Any]:
    """Apply the episode caps and the [-1, 1] clip; components then sum to ``total_reward``."""
    parts = dict(components)
    shaping = [v for k, v in parts.items() if k not in OUTCOME_COMPONENTS]
    positive, negative = sum(v for v in shaping if v > 0), sum(v for v in shaping if v < 0)
    granted_pos = min(positive, max(0.0, weights.shaping_cap - state.positive_shaping))
    granted_neg = max(negative, min(0.0, -weights.penalty_cap - state.negative_shaping))
    if granted_pos < positive:
        parts["shaping_cap"] = granted_pos - positive
    if granted_neg > negative:
        parts["penalty_cap"] = granted_neg - negative
    state.positive_shaping += granted_pos
    state.negative_shaping += granted_neg
    raw = float(sum(parts.values()))
    total = min(STEP_MAX, max(STEP_MIN, raw))
    if total != raw:
        parts["clip"] = total - raw
    state.episode_return += total
    return {"total_reward": total, "components": parts, "task_complete": state.solved}


def episode_end(gt: dict[str, Any], state: RewardState, weights: HeuristicWeights = HeuristicWeights()) -> dict[str, Any]:
    """Terminal reward when an episode is cut off (max turns) unsolved: without it, a policy that keeps
    calling tools and never answers keeps its shaping and out-earns one that answers and is wrong.

    The default (-0.8 = wrong_answer - shaping_cap) makes giving up after any number of good calls
    earn no more than a wrong answer after none; at -0.3, GRPO from a weak warm start learned to call
    until max turns (greedy answer rate 88% -> 37%, docs/experiments/)."""
    needs_answer = gt.get("answer") is not None or bool(_success(gt).get("answer_required"))
    parts = {"unanswered": weights.unanswered} if needs_answer and not state.solved else {}
    return settle(parts, state, weights)


def names_match(called: str, expected: str | None, server: str | None = None) -> bool:
    """Whether a called name (``tool`` or ``server.tool``) is the expected tool (of `server`)."""
    if not isinstance(expected, str) or not expected:
        return False
    called_server, called_tool = _split_name(called)
    expected_server, expected_tool = _split_name(expected)
    server = server if isinstance(server, str) and server else expected_server
    if called_tool != expected_tool:
        return False
    return not (server and called_server and server != called_server)


def required_tools(gt: dict[str, Any]) -> list[str]:
    """The tools ``success`` says must be called: must_call_tool plus must_call_tools."""
    success = _success(gt)
    many = success.get("must_call_tools")
    names = [success.get("must_call_tool"), *(many if isinstance(many, list) else [])]
    return list(dict.fromkeys(n for n in names if isinstance(n, str) and n))


def _observe_call(
    action: ParsedAction, name: str, result: dict[str, Any] | None, gt: dict[str, Any], state: RewardState
) -> StepFacts:
    result = result if isinstance(result, dict) else None
    ok = bool(result and result.get("ok") is True)
    error_type = None if result is None or ok else str(result.get("error_type") or "tool_error")
    exists = result is not None and error_type != "unknown_tool"
    allowed_list = gt.get("allowed_tools")
    listed = not isinstance(allowed_list, list) or any(names_match(name, a) for a in allowed_list if isinstance(a, str))
    call = (name, canonical_json(action.arguments or {}))
    repeated = call in state.calls
    state.calls.append(call)
    if result is not None:  # as answered_after_error_rate: a call with no result neither fails nor repairs
        state.last_call_failed = not ok

    success = _success(gt)
    first_call_correct = not state.first_call_done and names_match(name, success.get("must_call_tool"))
    state.first_call_done = True

    sequence = _sequence(gt)
    matched = False
    if ok and state.next_step < len(sequence):
        step = sequence[state.next_step]
        matched = names_match(name, step.get("tool"), step.get("server"))
        state.next_step += matched
    if ok:
        state.ok_tools.append(name)
        state.ok_calls.append((name, dict(action.arguments or {})))
    finished = matched and state.next_step == len(sequence)
    answer_free = gt.get("answer") is None and not success.get("answer_required")
    return StepFacts(
        kind="tool_call",
        name=name,
        exists=exists,
        allowed=exists and listed,
        repeated=repeated,
        first_call_correct=first_call_correct,
        sequence_matched=matched,
        ok=ok,
        error_type=error_type,
        solved_now=finished and answer_free and not state.solved and _required_calls_made(gt, state),
    )


def _observe_answer(answer: str, gt: dict[str, Any], state: RewardState, weights: HeuristicWeights) -> StepFacts:
    expected = gt.get("answer")
    grounded = not weights.require_grounding or (all(
        any(names_match(called, tool) for called in state.ok_tools) for tool in required_tools(gt)
    ) and _required_calls_made(gt, state))
    if expected is None:
        steps_done = _sequence_done(gt, state)
        answer_required = bool(_success(gt).get("answer_required"))
        return StepFacts(
            kind="answer",
            grounded=grounded,
            premature=not steps_done and not state.solved,
            solved_now=answer_required and steps_done and not state.solved,
        )
    correct = answer_matches(
        answer, expected, rel_tol=weights.rel_tol, abs_tol=weights.abs_tol, ordered=bool(gt.get("answer_ordered"))
    )
    return StepFacts(
        kind="answer",
        answer_correct=correct,
        after_error=state.last_call_failed,
        grounded=grounded,
        solved_now=correct and grounded and not state.solved,
    )


def _required_calls_made(gt: dict[str, Any], state: RewardState) -> bool:
    """Every `success.must_call_with` entry ({tool, params}) matches an ok call's given arguments.

    This is what makes side effects count only when right: a post to the wrong channel or with the
    wrong text does not complete a "post X to #c" task.
    """
    required = _success(gt).get("must_call_with") or []
    return all(
        any(names_match(name, req.get("tool")) and _params_match(args, req.get("params") or {})
            for name, args in state.ok_calls)
        for req in required if isinstance(req, dict)
    )


def _params_match(actual: dict[str, Any], expected: dict[str, Any]) -> bool:
    for key, want in expected.items():
        got = actual.get(key)
        if got is None:
            return False
        if isinstance(want, str) and isinstance(got, str):
            got, want = got.strip().lstrip("#"), want.strip().lstrip("#")
        if not answer_matches(str(got), want):
            return False
    return True


def _sequence_done(gt: dict[str, Any], state: RewardState) -> bool:
    sequence = _sequence(gt)
    return bool(sequence) and state.next_step >= len(sequence)


def _success(gt: dict[str, Any]) -> dict[str, Any]:
    success = gt.get("success")
    return success if isinstance(success, dict) else {}


def _sequence(gt: dict[str, Any]) -> list[dict[str, Any]]:
    sequence = gt.get("tool_sequence")
    return [s for s in sequence if isinstance(s, dict)] if isinstance(sequence, list) else []


def _split_name(name: str) -> tuple[str | None, str]:
    server, dot, tool = name.strip().rpartition(".")
    return (server or None, tool) if dot else (None, name.strip())


class HeuristicReward:
    """The rule-based reward as a `RewardFn` (registered as `heuristic`): shaping and the verified answer
    per step, and `episode_end`'s penalty when an episode stops unanswered and unsolved."""

    def __init__(self, weights: HeuristicWeights = HeuristicWeights()) -> None:
        self.weights = weights
        self.gt: dict[str, Any] = {}
        self.state = RewardState()

    def reset(self, ground_truth: dict[str, Any]) -> None:
        self.gt, self.state = ground_truth, RewardState()

    def step(self, step: Step) -> Reward:
        return Reward.from_dict(reward_heuristic(step.parsed, step.parsed.name, step.result, self.gt, self.state,
                                                 self.weights))

    def end(self, reason: StopReason) -> Reward:
        if reason in ("max_turns", "idle") and not self.state.solved:
            return Reward.from_dict(episode_end(self.gt, self.state, self.weights))
        return NO_REWARD
