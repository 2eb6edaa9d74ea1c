"""The servers YAML: a misspelt key is one line naming it and the closest known key, not a setting
silently ignored; a training config checks its servers file at load."""

from __future__ import annotations

import pytest

from mcprl.errors import ConfigError
from mcprl.tools.config import load_servers_config
from mcprl.training.config import load_train_config


@pytest.mark.parametrize(("text", "message"), [
    ("servers:\n  - {name: a, transport: stdio, comand: x}\n", "servers.0.comand: unknown key; did you mean 'command'?"),
    ("servers:\n  - {name: a, command: x, timeout: 3}\n", "servers.0.timeout: unknown key; did you mean 'timeout_s'?"),
    ("servers: []\nserver_timeout: 3\n", "server_timeout: unknown key (known: servers)"),
])
def test_unknown_keys_are_errors_with_a_suggestion(tmp_path, text, message):
    path = tmp_path / "servers.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"^{path}: " + message.replace("(", r"\(").replace(")", r"\)")):
        load_servers_config(path)


def test_a_training_config_checks_its_servers_file_at_load(tmp_path):
    with pytest.raises(ConfigError, match="servers config not found: .*missing.yaml"):
        load_train_config(None, [f"rollout.servers_config={tmp_path / 'missing.yaml'}"])
    (tmp_path / "bad.yaml").write_text("servers:\n  - {name: a, transport: http}\n")
    with pytest.raises(ConfigError, match="transport http needs `url`"):
        load_train_config(None, [f"rollout.servers_config={tmp_path / 'bad.yaml'}"])
