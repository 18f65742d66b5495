"""``metrobench eval``: one model, several systems, run into the work transcripts, scored, summarised.

Against the OpenAI wire-format stand-in on 127.0.0.1 (every request counted): the first call
runs the sampled cases of two systems and prints the summary; a second call sends nothing and
prints the same summary (resumed from the work transcripts).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from metrobench import layout
from metrobench.cli import main
from metrobench.data.root import SYSTEMS
from metrobench.transcripts.records import read_run
from metrobench.standins.json_server import DROP
from metrobench.standins.openai_api import FakeOpenAI, chat_payload

DECLINED = chat_payload('{"outcome": "request_declined"}')


def evaluate(root: Path, results: Path, url: str, *extra: str) -> int:
    return main(["eval", "--data", str(root), "--model", "mine", "--provider", "openai", "--base-url", f"{url}/v1",
                 "--system", "doha,marta", "--partition", "all", "--sample", "3", "--concurrency", "1",
                 "--results", str(results), *extra])


def test_eval_runs_two_systems_scores_and_summarises_then_resumes_without_a_request(root, tmp_path, capsys):
    results = tmp_path / "results"
    with FakeOpenAI(lambda request: DECLINED) as api:
        assert evaluate(root, results, api.url) == 0
        first = len(api.requests)
        out = capsys.readouterr().out
        assert evaluate(root, results, api.url) == 0
        again = capsys.readouterr().out
        assert len(api.requests) == first        # resumed: not one request more
    work = {s: read_run(Path(layout.work_path("mine", s, str(results)))) for s in ("doha", "marta")}
    assert all(len(run.records) == 3 for run in work.values())
    assert first == sum(r.api_rounds for run in work.values() for r in run.records) == 6   # one round a case
    assert {r["path"] for r in api.requests} == {"/v1/chat/completions"}
    assert out.count("ran 3 cases (0 failed), 0 already done") == 2
    assert again.count("ran 0 cases (0 failed), 3 already done") == 2
    scores = results / "eval" / "mine" / "scores"
    for s in ("doha", "marta"):
        assert (scores / f"model=mine/system={s}/part.parquet").is_file()
        assert (results / "eval" / "mine" / "runs" / f"{s}.jsonl").is_file()
    summary = out[out.index("model mine | partition full | 6 cases"):]
    assert summary == again[again.index("model mine | partition full | 6 cases"):]
    lines = summary.splitlines()
    assert [line.split()[0] for line in lines[2:5]] == ["marta", "doha", "headline"]   # the tables' order
    assert "judged component scores are missing" in summary     # --judge none: composite bounded
    assert not (results / "runs").exists() and not (results / "scores").exists()   # the workflow's folders
    with FakeOpenAI(lambda request: DECLINED) as api:                 # one system again: its summary alone
        assert main(["eval", "--data", str(root), "--model", "mine", "--provider", "openai", "--base-url",
                     f"{api.url}/v1", "--system", "doha", "--partition", "all", "--sample", "3",
                     "--results", str(results)]) == 0
        assert not api.requests
    alone = capsys.readouterr().out
    alone = alone[alone.index("model mine | partition full | 3 cases"):].splitlines()
    assert [line.split()[0] for line in alone[2:4]] == ["doha", "headline"]


@pytest.mark.parametrize("flags, expected", [
    (["--system", "atlantis"], "eval: --system: unknown system 'atlantis'"),
    (["--system", "doha,"], "--system: an empty item"),
])
def test_eval_refuses_a_bad_system_in_one_line_before_any_request(root, tmp_path, capsys, flags, expected):
    with FakeOpenAI(lambda request: DECLINED) as api:
        code = main(["eval", "--data", str(root), "--model", "mine", "--base-url", f"{api.url}/v1",
                     "--results", str(tmp_path), *flags])
        assert not api.requests
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("metrobench: error: ") and expected in err, err


def test_eval_stops_on_an_endpoint_that_is_down_with_the_runs_one_line(root, tmp_path, capsys):
    with FakeOpenAI(lambda request: DROP) as api:  # the server gone: infrastructure, never a case's ending
        config = tmp_path / "m.yaml"
        config.write_text("name: mine\nretries: 1\nbackoff_s: 0.01\nconcurrency: 1\n")
        code = main(["eval", "--data", str(root), "--model-config", str(config), "--base-url", f"{api.url}/v1",
                     "--system", "doha", "--cases", "DOHA-A-001", "--partition", "all",
                     "--results", str(tmp_path / "results")])
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]   # beside the progress lines
    assert code == 2 and len(errors) == 1 and errors[0].startswith("metrobench: error: "), errors
    assert "never answered" in errors[0] and "rerun the same command" in errors[0]
    assert not (tmp_path / "results" / "eval" / "mine" / "scores").exists()


# api_key_env is optional for an OpenAI-compatible endpoint on this machine (as the openai judge's)

@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/v1", "http://localhost:8080/v1", "http://[::1]:8080/v1",
                                 "http://127.0.0.2/v1", "http://LOCALHOST./v1"])
def test_a_keyless_openai_model_on_a_loopback_url_sends_a_placeholder_key(url, monkeypatch):
    from metrobench.agents.runner.client import ChatClient
    from metrobench.agents.runner.config import ModelConfig

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    client = ChatClient(ModelConfig(name="mine", provider="openai", base_url=url))
    assert client.client.api_key == "local"


@pytest.mark.parametrize("url", ["https://api.openai.com/v1", "http://10.0.0.5:8080/v1", "http://localhost.example/v1",
                                 None])
def test_a_keyless_openai_model_elsewhere_is_refused_naming_the_way_out(url, monkeypatch):
    from metrobench.agents.runner.client import ChatClient
    from metrobench.agents.runner.config import ModelConfig
    from metrobench.errors import MetrobenchError

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MetrobenchError, match=r"model mine: provider openai needs api_key_env \(or a base_url on "
                                              r"127\.0\.0\.1, localhost or ::1\)"):
        ChatClient(ModelConfig(name="mine", provider="openai", base_url=url))


# README's "Evaluate your own model": its YAML block and its command, run as written (only the URL
# changed to the stand-in's), with no key in the environment

README = Path(__file__).resolve().parents[1] / "README.md"
README_URL = "http://127.0.0.1:8080/v1"


def readme_section() -> tuple[str, str]:
    """The YAML block and the command of README's "Evaluate your own model" section."""
    import re

    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Evaluate your own model"):]
    section = section[:section.index("\n## ", 1)]
    yaml_block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    commands = re.search(r"```sh\n(.*?)```", section, re.S).group(1).strip().splitlines()
    assert len(commands) == 2, commands   # eval, then the workflow's Table 2: at most two commands
    return yaml_block, commands


def test_readmes_block_and_command_evaluate_a_model_on_the_stand_in(root, tmp_path, monkeypatch, capsys):
    import shlex

    import yaml

    block, (command, _) = readme_section()
    assert text_in_first_screen("## Evaluate your own model")
    entry = yaml.safe_load(block)["models"]
    (name, settings), = entry.items()
    assert settings["base_url"] == README_URL and "api_key_env" not in settings   # keyless, on this machine
    argv = shlex.split(command)
    assert argv[0] == ".venv/bin/metrobench"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("METROBENCH_DATA", str(root))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAI(lambda request: DECLINED) as api:
        config = argv[argv.index("--config") + 1]
        (tmp_path / config).write_text(block.replace(README_URL, f"{api.url}/v1"))
        assert main(argv[1:]) == 0
    out = capsys.readouterr().out
    assert {r["body"]["model"] for r in api.requests} == {settings["model"]}
    assert {r["headers"].get("authorization") for r in api.requests} == {"Bearer local"}
    work = [read_run(tmp_path / layout.work_path(name, s)) for s in SYSTEMS]
    assert [len(run.records) for run in work] == [5] * 6                 # --sample 5 on each of the six
    assert len(api.requests) == sum(r.api_rounds for run in work for r in run.records)
    assert f"model {name} | partition holdout | 30 cases" in out


def text_in_first_screen(text: str, lines: int = 40) -> bool:
    return text in "\n".join(README.read_text(encoding="utf-8").splitlines()[:lines])


@pytest.mark.slow
def test_readmes_two_commands_put_the_model_in_table2_in_a_new_shell(root, tmp_path):
    """The README's two commands, verbatim, each in a shell whose environment holds only PATH=/usr/bin:/bin
    (no .venv/bin), HOME, METROBENCH_DATA and PYTHONPATH (the code under test), in a fresh copy of the
    workflow whose .venv/bin holds this Python's metrobench and snakemake: the rules find `metrobench`
    themselves, the config's `bench:` makes the workflow run the cases eval ran (none sent again), and
    Table 2 has the model's row."""
    import os
    import shlex
    import subprocess
    import sys

    import pandas as pd
    import yaml

    import metrobench
    from conftest import workflow_copy

    block, (first, second) = readme_section()
    study = yaml.safe_load(block)
    (name, settings), = study["models"].items()
    eval_argv, workflow_argv = shlex.split(first), shlex.split(second)
    assert eval_argv[0] == ".venv/bin/metrobench" and workflow_argv[0] == ".venv/bin/snakemake"
    sample = int(eval_argv[eval_argv.index("--sample") + 1])
    assert study["bench"] == {"partition": "holdout", "sample": sample}   # Table 2 on the cases eval runs
    (tmp_path / "checkout").mkdir()
    cwd = workflow_copy(tmp_path / "checkout")
    venv_bin = cwd / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    for tool in ("metrobench", "snakemake"):
        installed = Path(sys.executable).parent / tool
        if not installed.is_file():
            pytest.skip(f"no {tool} beside {sys.executable} (the README's .venv)")
        (venv_bin / tool).symlink_to(installed)
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path)), "METROBENCH_DATA": str(root),
           "PYTHONPATH": str(Path(metrobench.__file__).resolve().parents[1])}

    def shell(command: str) -> None:
        done = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"

    with FakeOpenAI(lambda request: DECLINED) as api:
        (cwd / eval_argv[eval_argv.index("--config") + 1]).write_text(block.replace(README_URL, f"{api.url}/v1"))
        shell(first)
        by_eval = len(api.requests)
        shell(second)
    work = [read_run(cwd / layout.work_path(name, s)) for s in SYSTEMS]
    assert [len(run.records) for run in work] == [sample] * len(SYSTEMS)
    assert by_eval == len(api.requests) == sum(r.api_rounds for run in work for r in run.records) > 0
    assert {r["headers"].get("authorization") for r in api.requests} == {"Bearer local"}   # no key needed
    table2 = pd.read_csv(cwd / "results" / "table2.csv")
    assert list(table2["model"]) == [name]


def test_evals_summary_places_the_model_among_the_published_rows_and_says_it_is_sampled(root, tmp_path, capsys):
    with FakeOpenAI(lambda request: DECLINED) as api:
        assert main(["eval", "--data", str(root), "--model", "mine", "--provider", "openai", "--base-url",
                     f"{api.url}/v1", "--system", "doha,marta", "--sample", "3", "--concurrency", "1",
                     "--results", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    ranking = out[out.index("Among the paper's published Table 2"):].splitlines()
    assert "held-out, 238 cases, 6 systems" in ranking[0]
    mine = next(i for i, line in enumerate(ranking) if line.split()[1:2] == ["mine"])
    assert ranking[mine].split()[0] == "-" and "run here (sampled: 6 cases of 238, 2 of 6 systems;" in ranking[mine]
    assert "95 % CI Tier 1 [" in ranking[mine]         # judge off: no composite interval, Tier 1's
    above = ranking[mine - 1].split()
    assert above[0] == "25" and above[-1] == "published"      # the last ranked published row, then the model
    assert ranking[mine + 1].split()[:3] == ["ref.", "Rule-based", "baseline"] and ranking[mine + 1].endswith("published")


def test_eval_writes_one_results_file_that_validates_against_the_shipped_schema(root, tmp_path, monkeypatch):
    import json

    import jsonschema

    from metrobench.commands.eval_results import EvalResults, endpoint, schema, shipped_schema

    assert shipped_schema() == schema()      # the package's schema file is the model's (regenerate: --schema)
    monkeypatch.setenv("MY_KEY", "sk-secret-123")
    config = tmp_path / "m.yaml"
    config.write_text("name: mine\nprovider: openai\napi_key_env: MY_KEY\nconcurrency: 1\n")
    results = tmp_path / "results"
    with FakeOpenAI(lambda request: DECLINED) as api:
        argv = ["eval", "--data", str(root), "--model-config", str(config), "--base-url", f"{api.url}/v1?key=x",
                "--system", "doha,marta", "--sample", "3", "--results", str(results)]
        assert main(argv) == 0
        path = results / "eval" / "mine" / "results.json"
        first = path.read_bytes()
        assert main(argv) == 0                 # resumed, nothing sent: the same bytes (no timestamp)
        assert path.read_bytes() == first
    text = first.decode()
    data = json.loads(text)
    jsonschema.validate(data, shipped_schema())
    EvalResults.model_validate(data)
    assert text == json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert "sk-secret" not in text and "key=x" not in text and "/v1" not in text
    assert data["model"]["endpoint"] == api.url and data["model"]["fingerprint"]
    assert data["selection"]["systems"] == ["marta", "doha"] and data["selection"]["sample"] == 3
    assert data["headline"]["cases"] == 6 and data["headline"]["systems"] == 2
    assert data["headline"]["composite_high"] is not None and data["judge"]["kind"] == "none"
    assert data["runs"]["doha"]["endings"] == {"answered": 3} and data["tokens"]["input"] > 0
    assert data["published"]["comparable"] is False and data["published"]["holdout_cases"] == 238
    assert len(data["data"]["commit"]) == 40 and data["data"]["verified"] is True
    assert data["cost"] is None                # no study config: not priced
    assert endpoint("https://user:pw@api.example.com:8443/v1/x?api_key=k#f") == "https://api.example.com:8443"
    assert endpoint("http://[::1]/v1") == "http://[::1]"


def test_view_takes_an_evals_folder_as_it_is(root, tmp_path, capsys, monkeypatch):
    results = tmp_path / "results"
    with FakeOpenAI(lambda request: DECLINED) as api:
        assert evaluate(root, results, api.url) == 0
    capsys.readouterr()
    monkeypatch.setenv("METROBENCH_DATA", str(root))
    folder = results / "eval" / "mine"
    assert main(["view", str(folder), "--out", str(tmp_path / "site")]) == 0
    assert "1 model(s), 6 case pages" in capsys.readouterr().out
    index = (tmp_path / "site" / "index.html").read_text()
    assert index.count('<tr class="published">') == 26 and index.count('<tr class="run-here">') == 1
    assert "run here (partition full, not the paper&#x27;s held-out set, 6 cases, 2 of 6 systems;" in index
    assert len(list((tmp_path / "site" / "cases" / "mine").glob("*.html"))) == 6   # the model named by the header
    assert main(["view", "--runs", str(folder / "runs"), "--scores", str(folder / "scores"),   # the same, spelt out
                 "--out", str(tmp_path / "site2")]) == 0
    assert "1 model(s), 6 case pages" in capsys.readouterr().out
    assert main(["view", str(tmp_path), "--out", str(tmp_path / "site3")]) == 2
    assert "no runs/ and scores/ in it" in capsys.readouterr().err


def test_eval_judges_in_the_same_command_and_names_a_stand_in_judge(root, tmp_path, capsys, monkeypatch):
    import json

    from metrobench.standins.judge import MODEL, JudgeStandin

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    results = tmp_path / "results"
    with FakeOpenAI(lambda request: DECLINED) as api, JudgeStandin() as judge:
        assert evaluate(root, results, api.url, "--judge", "openai", "--judge-url", f"{judge.url}/v1",
                        "--judge-model", MODEL) == 0
        assert judge.requests                  # judged in the same command
    out = capsys.readouterr().out
    assert "judged component scores are missing" not in out          # the composite is exact, not bounded
    assert "judge: stand-in (digests, not judgments)" in out
    data = json.loads((results / "eval" / "mine" / "results.json").read_text())
    assert data["judge"]["stand_in"] is True and data["judge"]["endpoint"] == judge.url
    assert data["headline"]["composite_high"] is None and data["headline"]["composite_interval"] is not None
