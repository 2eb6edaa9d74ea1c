import json

import pytest
from typer.testing import CliRunner

from mcprl.cli.data import app
from mcprl.data.sample import read_samples

from .openai_stub import Reply, StubOpenAI
from .test_llm import VALID
from .test_specs import write_specs

runner = CliRunner()


def test_specs_to_split_files_that_validate(tmp_path, servers_yaml):
    specs = write_specs(tmp_path / "specs.jsonl")
    out = tmp_path / "out" / "tasks.jsonl"
    result = runner.invoke(app, ["generate", "specs", "--in", str(specs), "--out", str(out),
                                 "--servers-config", str(servers_yaml), "--split", "train=0.5,test=0.5", "--seed", "1"])
    assert result.exit_code == 0, result.output
    files = sorted(p.name for p in out.parent.iterdir())
    assert files == ["tasks.dropped.jsonl", "tasks_test.experts.jsonl", "tasks_test.jsonl",
                     "tasks_train.experts.jsonl", "tasks_train.jsonl"]
    ids = [s.task_id for name in ("train", "test") for s in read_samples(out.parent / f"tasks_{name}.jsonl")]
    assert sorted(ids) == ["lookup", "sum", "zone"]
    dropped = [json.loads(line) for line in (out.parent / "tasks.dropped.jsonl").read_text().splitlines()]
    assert [d["index"] for d in dropped] == [3, 4, 5, 6, 7] and all(d["reason"] for d in dropped)
    result = runner.invoke(app, ["validate", "--in", str(out.parent / "tasks_train.jsonl"),
                                 "--servers-config", str(servers_yaml)])
    assert result.exit_code == 0 and "Validation passed" in result.output, result.output


def test_llm_generation_from_env_knobs(tmp_path, servers_yaml, monkeypatch):
    secret = "sk-cli-secret-abcdefghijklmnopqrstuvwxyz"
    with StubOpenAI(lambda path, body: Reply(VALID)) as stub:
        env = {"OPENAI_API_KEY": secret, "OPENAI_BASE_URL": stub.url, "OPENAI_MODEL": "stub-model",
               "N_SAMPLES": "2", "DOMAINS": "fx", "COMPLEXITIES": "medium"}
        out = tmp_path / "llm.jsonl"
        result = runner.invoke(app, ["generate", "llm", "--out", str(out), "--servers-config",
                                     str(servers_yaml), "--cache-dir", str(tmp_path / "cache")], env=env)
    assert result.exit_code == 0, result.output
    assert len(stub.requests) == 2 and all(b["model"] == "stub-model" for _, b in stub.requests)
    (sample,) = read_samples(out)  # the second request proposed the same task: a duplicate
    assert sample.ground_truth["answer"] == 15 and sample.data_source == "llm/fx"
    written = "".join(p.read_text() for p in tmp_path.glob("llm*.jsonl"))
    assert (tmp_path / "llm.dropped.jsonl").is_file() and (tmp_path / "llm.experts.jsonl").is_file()
    assert secret not in written and secret not in result.output


@pytest.mark.parametrize(("args", "fragment"), [
    (["magic", "--out", "x.jsonl"], "No such command 'magic'"),
    (["specs", "--out", "x.jsonl"], "Missing option '--in'"),
    (["rules", "--out", "outdir"], "is a directory"),
    (["rules", "--out", "x.jsonl", "--split", "train=0.9"], "must sum to 1"),
    (["rules", "--out", "x.jsonl", "--recovery", "1.5"], "recovery must be in [0, 1]"),
    (["families", "--out", "x.jsonl", "--style", "xml"], "unknown --style 'xml'"),
    (["families", "--out", "x.jsonl", "--no-demo", "net_incme"], "net_income"),
    (["specs", "--in", "missing.jsonl", "--out", "x.txt"], "specs file not found"),
])
def test_generate_errors_are_one_clear_line(args, fragment, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["generate", *args])
    assert result.exit_code == 2 and fragment in result.output and "Traceback" not in result.output


def test_rules_generation_split_for_skyrl_validates_against_our_servers(tmp_path):
    out = tmp_path / "processed"
    result = runner.invoke(app, ["generate", "rules", "--n", "20", "--seed", "0", "--out", f"{out}/",
                                 "--split", "train=0.8,val=0.1,test=0.1", "--format", "parquet"])
    assert result.exit_code == 0, result.output
    sizes = {name: len(read_samples(out / f"{name}.parquet")) for name in ("train", "val", "test")}
    assert sum(sizes.values()) == 20 and all(sizes.values())
    experts = (out / "train.experts.jsonl").read_text().splitlines()
    assert len(experts) == sizes["train"]
    result = runner.invoke(app, ["validate", "--in", str(out / "train.parquet")])
    assert result.exit_code == 0 and "Validation passed" in result.output, result.output
