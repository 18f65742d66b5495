"""Issue 51's fourth round of fault drills, the settings items: no key in a recorded setting (8) or on the
terminal from a command line (9), server flags in ``serving.extra_args`` (3), ``gpu.memory_gib`` bounded
(12), a renamed model's refusal on resume (15) and a run header's ``format`` (17).

Each test was checked to fail on the code before its fix (see each test's docstring for what it caught).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from metrobench.cli import main
from metrobench.standins.openai_api import FakeOpenAI, chat_payload
from test_secrets import BARE_SENTINEL, CASES, GIVEN, SENTINEL, _no_sentinel
from test_secrets import _refused as _one_error_line

HF_SENTINEL = "hf_SENTINELabcdefghij1234567890"


def _given(tmp_path: Path, name: str, text: str) -> str:
    """A file the user wrote (under ``given/``: the one place the sentinel is expected)."""
    path = tmp_path / GIVEN / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return str(path)


@pytest.fixture
def endpoint():
    with FakeOpenAI(lambda r: chat_payload('{"outcome": "request_declined"}')) as api:
        yield api


# --- item 8: a key in extra_body, chat_template_kwargs or the model id ---------------------------------

#: (where, inline YAML of the model's settings, the field the refusal names)
KEY_PLACES = {
    "extra_body key-named": ("extra_body: {{api_key: {key}}}", "extra_body.api_key"),
    "extra_body nested header": ("extra_body: {{headers: {{Authorization: 'Bearer {key}'}}}}",
                                 "extra_body.headers.Authorization"),
    "extra_body key-shaped in a list": ("extra_body: {{stop: ['</s>', '{key}']}}", "extra_body.stop[1]"),
    "chat_template_kwargs": ("chat_template_kwargs: {{hf_token: {key}}}", "chat_template_kwargs.hf_token"),
    "chat_template_kwargs key-shaped": ("chat_template_kwargs: {{note: '{key}'}}", "chat_template_kwargs.note"),
    "model id": ("model: '{key}'", "model"),
}


@pytest.mark.parametrize("key", [SENTINEL, BARE_SENTINEL, HF_SENTINEL], ids=["sk", "bare", "hf"])
@pytest.mark.parametrize("where", ["model config", "study config"])
@pytest.mark.parametrize("place", sorted(KEY_PLACES))
def test_a_key_in_a_recorded_setting_is_refused_naming_the_field(root, tmp_path, capsys, endpoint, place, where,
                                                                   key):
    """Before: passed the config check and was written into the header, every record and every view."""
    settings, field = KEY_PLACES[place]
    settings = settings.format(key=key)
    url = f"{endpoint.url}/v1"
    if where == "model config":
        flags = ["--model-config", _given(tmp_path, "m.yaml", f"name: m\nprovider: openai\nbase_url: {url}\n"
                                                               f"{settings}\n")]
    else:
        flags = ["--model", "m", "--config", _given(
            tmp_path, "study.yaml", f"models:\n  m: {{provider: openai, base_url: '{url}', {settings}}}\n")]
    code = main(["run", "--data", str(root), "--system", "marta", "--cases", CASES,
                 "--out", str(tmp_path / "runs" / "m" / "marta.jsonl"), *flags])
    err = _one_error_line(capsys, tmp_path, code)
    assert field in err and "key" in err and "api_key_env" in err, err
    assert not endpoint.requests


def test_a_key_given_as_the_model_name_on_the_command_line_is_refused(root, tmp_path, capsys, endpoint):
    code = main(["run", "--data", str(root), "--system", "marta", "--cases", CASES, "--model", SENTINEL,
                 "--provider", "openai", "--base-url", f"{endpoint.url}/v1",
                 "--out", str(tmp_path / "runs" / "m" / "marta.jsonl")])
    _one_error_line(capsys, tmp_path, code)
    assert not endpoint.requests


@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens", "prompt_cache_key", "enable_thinking",
                                  "reasoning_strength", "cache_prompt", "logit_bias", "thinking_budget_tokens",
                                  "id_slot", "n_probs"])
def test_settings_named_like_tokens_are_not_keys(name):
    from metrobench.credentials import secret_name

    assert not secret_name(name)


@pytest.mark.parametrize("name", ["api_key", "apiKey", "x-api-key", "hf_token", "Authorization", "client_secret",
                                  "password", "access_token", "private_key", "key"])
def test_key_names_are_keys(name):
    from metrobench.credentials import secret_name

    assert secret_name(name)


@pytest.mark.parametrize("value", ["Qwen3-30B-A3B-Instruct-2507", "claude-haiku-4-5-20251001", "gpt-5.6-sol",
                                   "unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M", "models/Muse-Glimmer-30B-Q4_K_M.gguf",
                                   "open-mistral-nemo", "ministral-8b-2512", "task-runner-with-a-long-name"])
def test_model_ids_are_not_key_shaped(value):
    from metrobench.credentials import looks_like_secret

    assert not looks_like_secret(value)


def test_the_repository_config_loads(tmp_path):
    """Every model of the study config passes the new check (no false alarm on a real setting)."""
    from metrobench.agents.runner.config import study_model_config
    from metrobench.study import load_study

    study = load_study([Path(__file__).resolve().parents[1] / "config" / "config.yaml"])
    for name, entry in study.models.items():
        if isinstance(entry, dict):
            study_model_config(name, entry)


# --- item 9: an unrecognised argument is printed back by its name only ---------------------------------

COMMAND_LINES = {
    "eval --flag key": ["eval", "--openai-api-key", SENTINEL],
    "eval --flag=key": ["eval", f"--openai-api-key={SENTINEL}"],
    "run --flag bare key": ["run", "--system", "marta", "--out", "x.jsonl", "--mistral-key", BARE_SENTINEL],
    "fetch-model --token": ["fetch-model", "--gguf", "x.gguf", "--token", HF_SENTINEL],
    "fetch-model --token=": ["fetch-model", "--gguf", "x.gguf", f"--token={HF_SENTINEL}"],
    "a stray key": ["eval", SENTINEL],
    "an invalid choice": ["run", "--system", "marta", "--out", "x.jsonl", "--provider", SENTINEL],
    "a key as the stage": [SENTINEL],
    "an ambiguous prefix": ["run", f"--mo={SENTINEL}"],
    "a key as a missing file": ["run", "--system", "marta", "--out", "x.jsonl", "--model-config", SENTINEL],
}


@pytest.mark.parametrize("line", sorted(COMMAND_LINES))
def test_no_key_of_a_command_line_reaches_the_terminal(root, tmp_path, capsys, monkeypatch, line):
    """Before: argparse printed ``unrecognized arguments: --openai-api-key sk-...``, the key whole."""
    monkeypatch.chdir(tmp_path)
    code = main(COMMAND_LINES[line])
    err = _one_error_line(capsys, tmp_path, code)
    if "flag" in line or "token" in line:
        assert "unrecognized argument: --" in err and "not shown" in err, err


def test_an_unknown_flag_is_still_named(capsys):
    code = main(["eval", "--bogus-flag=1", "--other", "2", "stray"])
    err = capsys.readouterr().err
    assert code == 2 and "unrecognized arguments: --bogus-flag, --other (3 values not shown)" in err, err
    assert "see metrobench eval --help" in err


# --- item 3: server flags in serving.extra_args -----------------------------------------------------------

def _model(**serving):
    from metrobench.agents.runner.config import parse_model_config

    return parse_model_config({"name": "m", "serving": {"gguf": "m.gguf", **serving}}, "config models.m")


@pytest.mark.parametrize("args,owner", [
    (["--ctx-size", "65536"], "serving.n_ctx"), (["-c", "65536"], "serving.n_ctx"),
    (["--ctx-size=65536"], "serving.n_ctx"), (["-np", "4"], "serving.parallel"),
    (["--parallel", "4"], "serving.parallel"), (["-ngl", "99"], "serving.n_gpu_layers"),
    (["--n-gpu-layers", "99"], "serving.n_gpu_layers"), (["-fa", "off"], "serving.flash_attn"),
    (["--kv-unified"], "serving.kv_unified"), (["--chat-template-file", "t.jinja"], "serving.chat_template_file"),
    (["--jinja"], "serving.server"), (["-m", "other.gguf"], "serving.gguf"), (["--model", "o.gguf"], "serving.gguf"),
    (["--port", "9000"], "127.0.0.1 at a free port"), (["--host", "0.0.0.0"], "127.0.0.1 at a free port"),
    (["--threads", "8"], "serving.n_threads"), (["-t", "8"], "serving.n_threads"),
    (["-ctk", "q8_0", "--n_ctx", "4096"], "serving.n_ctx"), (["--api-key", "x"], "needs no key"),
])
def test_a_flag_serving_owns_is_refused_in_extra_args_naming_its_setting(args, owner):
    """Before: accepted; the server ran ``--ctx-size 65536`` while the header, records and footprint said 8,192."""
    from metrobench.errors import MetrobenchError

    with pytest.raises(MetrobenchError) as caught:
        _model(extra_args=args)
    message = str(caught.value)
    assert message.startswith("config models.m: field serving.extra_args: ") and owner in message, message
    assert "\n" not in message


def test_a_key_in_extra_args_is_refused_unquoted():
    from metrobench.errors import MetrobenchError

    with pytest.raises(MetrobenchError) as caught:
        _model(extra_args=["--some-flag", SENTINEL])
    assert "SENTINEL" not in str(caught.value) and "serving.extra_args[1]" in str(caught.value)


def test_other_extra_args_are_kept_and_recorded(tmp_path, monkeypatch):
    """Before: the serving record held no extra_args, so a resume never compared them."""
    from metrobench.agents.serving_record import local_record

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cfg = _model(extra_args=["-ctk", "q8_0", "-ctv=q8_0"])
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    record = local_record(cfg.serving, gguf, None, "http://127.0.0.1:1/v1")
    assert record["extra_args"] == ["-ctk", "q8_0", "-ctv=q8_0"]


def _local(**extra) -> dict:
    return {"server": "llama-server", "gguf": "m.gguf", "gguf_sha256": "a" * 64, "n_ctx": 8192,
            "ctx_per_slot": 8192, "parallel": 2, "kv_unified": True, "flash_attn": True, "n_gpu_layers": 0, **extra}


def test_differences_compare_extra_args_and_read_an_old_local_record_as_having_none():
    from metrobench.agents.serving_record import differences

    kv8 = _local(extra_args=["-ctk", "q8_0"])
    assert differences(_local(extra_args=[]), kv8) == ["other server flags (serving.extra_args) none, now -ctk q8_0"]
    assert differences(kv8, _local(extra_args=[])) == ["other server flags (serving.extra_args) -ctk q8_0, now none"]
    assert differences(_local(), kv8) == ["other server flags (serving.extra_args) none, now -ctk q8_0"]
    assert differences(_local(), _local(extra_args=[])) == []  # an old record, no flags added: resumes
    assert differences(kv8, kv8) == []
    hosted = {"dialect": "openai", "deployment": "m", "api_version": None}
    assert differences(hosted, hosted) == []


@pytest.mark.parametrize("set_aside", [False, True], ids=["refused", "set aside"])
def test_a_resume_with_extra_args_changed_is_refused_or_set_aside(tmp_path, set_aside):
    """Before: ``-ctk q8_0`` added resumed the transcript, two KV cache types in one row."""
    import io

    from metrobench.agents.runner.run import prepare_resume, run_header
    from metrobench.errors import MetrobenchError
    from metrobench.transcripts.records import write_transcript

    cfg = _model()
    path = tmp_path / "marta.jsonl"
    write_transcript(path, [], run_header(cfg, "marta", _local(extra_args=[])))
    now = _local(extra_args=["-ctk", "q8_0"])
    if set_aside:
        stream = io.StringIO()
        assert prepare_resume(path, cfg, [], restart=False, system="marta", serving=now, set_aside_changed=True,
                              stream=stream) == set()
        assert not path.exists() and "other server flags (serving.extra_args) none, now -ctk q8_0" in \
            stream.getvalue()
    else:
        with pytest.raises(MetrobenchError, match=r"served otherwise \(other server flags \(serving.extra_args\) "
                                                  r"none, now -ctk q8_0\)"):
            prepare_resume(path, cfg, [], restart=False, system="marta", serving=now)


# --- item 12: gpu.memory_gib bounded by the largest card ---------------------------------------------------

@pytest.mark.parametrize("card,message", [
    ({"memory_gib": 32607}, "field gpu.memory_gib: Value error, 32607 GiB is more than any card has (at most 300); "
                            "MiB? divide by 1024 (31.84 GiB)"),
    ({"memory_gib": 301}, "field gpu.memory_gib: Value error, 301 GiB is more than any card has (at most 300)"),
    ({"memory_gib": float("inf")}, "field gpu.memory_gib: Input should be a finite number"),
    ({"memory_gib": float("nan")}, "field gpu.memory_gib: Input should be a finite number"),
    ({"memory_gib": 32, "headroom_gib": float("inf")}, "field gpu.headroom_gib: Input should be a finite number"),
    ({"memory_gib": 32, "headroom_gib": 32}, "headroom_gib 32 leaves nothing of memory_gib 32 for a job"),
])
def test_a_card_no_gpu_has_is_refused_saying_mib_where_it_looks_like_mib(tmp_path, card, message):
    """Before: 32607 (nvidia-smi's MiB) or .inf was taken, and every job "fit"."""
    import yaml

    from metrobench.errors import MetrobenchError
    from metrobench.study import load_study

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"gpu": {"name": "RTX 5090", **card}}))
    with pytest.raises(MetrobenchError) as err:
        load_study([Path(__file__).resolve().parents[1] / "config" / "demo.yaml", path])
    text = str(err.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text, text


def test_a_real_card_is_taken():
    from metrobench.study import Gpu

    assert Gpu(name="H200", memory_gib=139.8).memory_gib == 139.8
    assert Gpu(name="MI355X", memory_gib=268).memory_gib == 268


# --- item 15: a renamed model's refusal names the name -----------------------------------------------------

def _scripted_run(bench, tmp_path: Path, name: str, **settings):
    from metrobench.agents.runner.config import parse_model_config
    from metrobench.agents.runner.run import run_model

    cfg = parse_model_config({"name": name, "provider": "scripted", **settings})
    run_model(cfg, bench.system("marta"), [bench.case("MARTA-A-001")], tmp_path / "marta.jsonl",
              progress_stream=open("/dev/null", "w"))


@pytest.mark.parametrize("also", [{}, {"max_rounds": 7}], ids=["only the name", "the name and a setting"])
def test_a_renamed_model_is_refused_naming_the_name_change(bench, tmp_path, also):
    """Before: blamed "other settings (the prompt, tool parser, GGUF file or context per request)"."""
    from metrobench.errors import MetrobenchError

    _scripted_run(bench, tmp_path, "old-name")
    with pytest.raises(MetrobenchError) as refused:
        _scripted_run(bench, tmp_path, "new-name", **also)
    message = str(refused.value)
    assert "header: the transcript was run with other settings (the model's name changed (old-name → new-name)" \
        in message, message
    assert "tool parser" not in message
    assert ("max_rounds 100 → 7" in message) == bool(also)


def test_a_renamed_model_whose_hashed_serving_changed_too_says_both(tmp_path):
    """The name alone would not give the recorded fingerprint back: the rest is still blamed."""
    from metrobench.agents.runner.config import parse_model_config
    from metrobench.agents.runner.run import fingerprint_changes

    old = parse_model_config({"name": "a", "serving": {"gguf": "a.gguf"}})
    new = parse_model_config({"name": "b", "serving": {"gguf": "b.gguf"}})
    assert fingerprint_changes(new, "a", old.fingerprint(), old.settings()) == [
        "the model's name changed (a → b)", "the prompt, tool parser, GGUF file or context per request"]
    renamed = parse_model_config({"name": "b", "serving": {"gguf": "a.gguf"}})
    assert fingerprint_changes(renamed, "a", old.fingerprint(), old.settings()) == [
        "the model's name changed (a → b)"]


# --- item 17: a run header's format is a whole number 1..FORMAT, never a bool ------------------------------

def _header_file(tmp_path: Path, **fields) -> Path:
    import json

    path = tmp_path / "marta.jsonl"
    header = {"model": "m", "system": "marta", "config": "0" * 16, "settings": {}, "serving": None,
              "selection": None, "version": "0", "format": 2, **fields}
    path.write_text(json.dumps({"header": header}) + "\n")
    return path


@pytest.mark.parametrize("form", [True, False, 0, -1, 2.0, "2", None, [2]],
                         ids=["true", "false", "0", "-1", "2.0", "'2'", "null", "[2]"])
def test_a_header_format_that_is_no_whole_number_from_1_is_refused(tmp_path, form):
    """Before: ``true``, ``0`` and ``-1`` were read (bool is an int in Python; 0 and -1 are not > FORMAT)."""
    from metrobench.errors import MetrobenchError
    from metrobench.transcripts.records import read_header

    path = _header_file(tmp_path, format=form)
    with pytest.raises(MetrobenchError) as refused:
        read_header(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: line 1: field header.format: ") and "1 to 2" in message, message


def test_a_newer_format_says_update_and_known_formats_are_read(tmp_path):
    from metrobench.errors import MetrobenchError
    from metrobench.transcripts.records import FORMAT, read_header

    with pytest.raises(MetrobenchError, match="update metrobench"):
        read_header(_header_file(tmp_path, format=FORMAT + 1))
    for form in range(1, FORMAT + 1):
        assert read_header(_header_file(tmp_path, format=form)).format == form


@pytest.mark.parametrize("field,value", [("settings", [1]), ("serving", "x"), ("selection", 3), ("config", 5)])
def test_a_header_field_of_the_wrong_kind_is_refused_naming_it(tmp_path, field, value):
    from metrobench.errors import MetrobenchError
    from metrobench.transcripts.records import read_header

    path = _header_file(tmp_path, **{field: value})
    with pytest.raises(MetrobenchError, match=f"line 1: field header.{field}: must be"):
        read_header(path)


def test_a_bool_format_is_one_error_line_on_the_command_line(root, tmp_path, capsys):
    path = _header_file(tmp_path, format=True)
    code = main(["score", "--data", str(root), "--run", str(path), "--out", str(tmp_path / "scores")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "field header.format: true is not a transcript format" in err, err


def test_a_path_with_a_digest_keeps_its_other_words_in_an_error(capsys, tmp_path):
    digest = "0123456789abcdef0123456789abcdef01234567"
    missing = tmp_path / "snapshots" / digest / "model.yaml"
    code = main(["run", "--system", "marta", "--out", str(tmp_path / "x.jsonl"), "--model-config", str(missing)])
    err = capsys.readouterr().err
    assert code == 2 and digest not in err and "/snapshots/***/model.yaml" in err, err
