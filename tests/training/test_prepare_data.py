"""The trainer's datasets: generated when missing, again when `data.generate` changes, never over the user's."""

import json
import shutil

import pytest

from mcprl.training.config import load_train_config
from mcprl.training.run import prepare_data


def _config(tmp_path, *extra):
    return load_train_config("configs/quickstart.yaml", [
        "data.generate.n_train=8", "data.generate.n_eval=1", "data.generate.recovery=0.0", f"data.train={tmp_path / 'train.jsonl'}",
        f"data.eval={tmp_path / 'test.jsonl'}", *extra])


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """One generation for the tests that start from generated files: each takes ~20 s of server start-ups."""
    out = tmp_path_factory.mktemp("generated")
    prepare_data(_config(out))
    return out


def _copy(generated, tmp_path):
    """The generated files in `tmp_path`, as if `prepare_data` had written them there (the stamp holds only
    the settings, no path)."""
    for f in generated.iterdir():
        shutil.copy2(f, tmp_path / f.name)


def _slips(experts_path):
    return sum(m.get("weight") == 0 for line in experts_path.read_text().splitlines()
               for m in json.loads(line)["messages"])


def test_generated_once_then_again_only_when_the_generation_settings_change(tmp_path, generated):
    _copy(generated, tmp_path)  # what `prepare_data` generated on an empty directory (the fixture)
    experts = tmp_path / "train.experts.jsonl"
    written = experts.stat().st_mtime_ns
    train, _, experts = prepare_data(_config(tmp_path))
    assert len(train) == 8 and _slips(experts) == 0
    assert experts.stat().st_mtime_ns == written  # same settings: the files are reused

    again, _, experts = prepare_data(_config(tmp_path, "data.generate.recovery=1.0"))
    assert [s.to_dict() for s in again] == [s.to_dict() for s in train]  # the same tasks
    assert _slips(experts) >= 3  # with demos of recovery


def test_files_without_a_stamp_are_the_users_and_stay(tmp_path, generated):
    _copy(generated, tmp_path)
    (tmp_path / "train.generate.json").unlink()
    experts = tmp_path / "train.experts.jsonl"
    mine = experts.read_text()
    prepare_data(_config(tmp_path, "data.generate.recovery=1.0"))
    assert experts.read_text() == mine


def test_files_generated_with_other_settings_and_a_method_that_needs_inputs_say_so(tmp_path, generated):
    _copy(generated, tmp_path)
    with pytest.raises(ValueError, match="generated with other data.generate settings.*method=llm needs inputs"):
        prepare_data(_config(tmp_path, "data.generate.method=llm"))


@pytest.mark.slow  # 16 s (an experimental knob's demos generated again): make test-all
def test_expert_guidance_needs_the_demos_even_without_sft(tmp_path, generated):
    _copy(generated, tmp_path)
    experts = tmp_path / "train.experts.jsonl"
    experts.unlink()
    prepare_data(_config(tmp_path, "sft.enabled=false"))
    assert not experts.exists()  # nothing reads them
    prepare_data(_config(tmp_path, "sft.enabled=false", "experimental.expert_guidance=true"))
    assert experts.exists()
