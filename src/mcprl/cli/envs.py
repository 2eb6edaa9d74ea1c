"""`mcprl env check`: build the env from a dataset sample, init, take one step, print what came back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from mcprl.cli.errors import fail
from mcprl.errors import ConfigError

app = typer.Typer(no_args_is_help=True, help="Inspect the MCP tool environment.")
console = Console()
DataOpt = typer.Option(None, "--data", "-d", help="Dataset file; default: one freshly generated rule task.")


def load_sample(data: Path | None, index: int):
    from mcprl.data.sample import read_samples

    if data is None:
        from mcprl.data.rules import generate

        return generate(1, seed=0, progress=False).samples[0]
    try:
        samples = read_samples(data)
    except (OSError, ValueError) as err:  # a missing file, a bad row: one line, not a traceback
        fail(ConfigError(str(err)))
    if not 0 <= index < len(samples):
        fail(ConfigError(f"--index {index} is out of range: {data} has {len(samples)} rows"))
    return samples[index]


def one_step(sample: Any, env_config: dict[str, Any], action: str | None) -> tuple[Any, dict[str, Any], str]:
    """init() then step() with `action`, or by default the task's first expected call."""
    import skyrl_gym

    import mcprl.envs  # noqa: F401 - registers the env
    from mcprl.protocol.parsing import format_tool_call

    if action is None:
        steps = sample.ground_truth.get("tool_sequence") or []
        if not steps or not isinstance(steps[0], dict) or "tool" not in steps[0]:
            fail(ConfigError(f"task {sample.task_id} has no expected call to send; pass --action"))
        action = format_tool_call(steps[0]["tool"], steps[0].get("params") or {})
    env = skyrl_gym.make("mcp_tool_env", env_config=env_config,
                         extras={"reward_spec": sample.reward_spec, "extra_info": sample.extra_info})
    env.init(sample.prompt)
    return env, env.step(action), action


@app.command("check")
def check(data: Optional[Path] = DataOpt, index: int = typer.Option(0, help="Row of the dataset."),
          action: Optional[str] = typer.Option(None, help="The model turn to send; default: the first expected call."),
          servers_config: Optional[Path] = typer.Option(None, "--servers-config", "-c")) -> None:
    """Build the env from a sample, call init() and one step('<tool_call>...'), print reward, done, metadata.

    Example: mcprl env check --data data/processed/quickstart_train.jsonl --index 3
    """
    sample = load_sample(data, index)
    env, out, action = one_step(sample, {"servers_config": str(servers_config) if servers_config else None}, action)
    console.print(f"task: {sample.task_id} ({sample.ground_truth.get('complexity')})")
    console.print(f"action: {action}")
    if out["observations"]:
        console.print(f"observation: {out['observations'][0]['content'][:300]}")
    console.print(f"reward: {float(out['reward']):.4f}")
    console.print(f"done: {bool(out['done'])}")
    console.print(f"metadata keys: {sorted(out['metadata'])}")
    console.print(f"reward components: {json.dumps(out['metadata'].get('reward_components', {}))}")
    env.close()
