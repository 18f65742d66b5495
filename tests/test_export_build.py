"""One llama.cpp from GGUF to server (issue 39, item 4): a student served on a named build is
converted by that build's converter, quantised by its ``llama-quantize`` and load-checked by its
``llama-server``; which llama.cpp did it is recorded beside the sizes (Table 8)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from metrobench.agents.serving import installed_llama_server
from metrobench.cli import main
from metrobench.errors import MetrobenchError
from metrobench.study import load_study
from metrobench.training.export import build_tools, check_serves

REPO = Path(__file__).resolve().parents[1]


def test_the_students_are_converted_by_the_build_that_serves_them(monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    paper = load_study(["config/config.yaml"])
    assert paper.export.converter == "serving" and paper.student_converter_build() == "b8642"
    vendored = tmp_path / "vendored.yaml"
    vendored.write_text("export: {converter: vendored}\n")
    assert load_study(["config/config.yaml", vendored]).student_converter_build() is None
    assert load_study(["config/demo.yaml"]).student_converter_build() is None       # served on the default build


def test_a_converter_that_is_no_choice_is_one_error_line(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("export: {converter: xml}\n")
    with pytest.raises(MetrobenchError, match=r"export\.converter") as caught:
        load_study([config])
    assert "\n" not in str(caught.value)


def test_a_build_without_its_converter_or_not_installed_is_one_line(tmp_path, monkeypatch, capsys):
    builds = tmp_path / "builds"
    monkeypatch.setenv("METROBENCH_LLAMA_BUILDS", str(builds))
    gguf = tmp_path / "m-f16.gguf"
    gguf.write_bytes(b"GGUF")
    assert main(["quantize", "--gguf", str(gguf), "--out", str(tmp_path / "q.gguf"), "--build", "b8642"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("metrobench: error: llama.cpp build b8642 is not installed: build it with `make builds`")
    # installed before the converter and llama-quantize were installed with it
    (builds / "b8642").mkdir(parents=True)
    server = builds / "b8642" / "llama-server"
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)
    assert main(["export-gguf", "--model", str(tmp_path), "--out", str(tmp_path / "m.gguf"), "--build", "b8642"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"metrobench: error: llama.cpp build b8642 in {builds / 'b8642'} has no converter or "
                   "llama-quantize (installed before they were): reinstall it with `make builds FORCE=1`, or set "
                   "export.converter: vendored to convert with the vendored llama.cpp"]
    assert not (tmp_path / "m.gguf").exists() and not (tmp_path / "q.gguf").exists()


def test_doctor_checks_the_students_build_has_its_converter(tmp_path, monkeypatch):
    from test_llama_builds import executable, fake_server

    from metrobench.doctor import check_named_builds

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("METROBENCH_LLAMA_BUILDS", str(tmp_path))
    fake_server(tmp_path / "b8642", "version: 8642 (1a2b3c4d)", devices=["  CUDA0: NVIDIA RTX 5090 (32607 MiB)"],
                libraries=("libggml-base.so", "libggml-cuda.so"))
    paper = load_study(["config/config.yaml"])

    def export_line():
        return [(c.status, c.detail) for c in check_named_builds(paper) if c.name == "build b8642 export"]

    [(status, detail)] = export_line()
    assert status == "FAIL" and "has no converter or llama-quantize (installed before they were)" in detail
    executable(tmp_path / "b8642" / "llama-quantize", "#!/bin/sh\n")
    executable(tmp_path / "b8642" / "convert" / "convert_hf_to_gguf.py", "")
    assert export_line() == [("ok", f"converts and quantises the students: {tmp_path / 'b8642' / 'convert'}, "
                                    f"{tmp_path / 'b8642' / 'llama-quantize'}")]
    vendored = tmp_path / "vendored.yaml"
    vendored.write_text("export: {converter: vendored}\n")
    assert [c for c in check_named_builds(load_study(["config/config.yaml", vendored]))
            if c.name.endswith(" export")] == []


@pytest.mark.slow
def test_the_export_rules_pass_the_serving_build(tmp_path):
    from test_workflow import snakemake

    from conftest import workflow_copy
    from metrobench import layout

    cwd = workflow_copy(tmp_path)
    target = layout.quantized_gguf("2b", 42)
    plan = snakemake(cwd, "-n", "-p", target)
    assert plan.returncode == 0, plan.stderr[-2000:]
    export = [line for line in plan.stdout.splitlines()
              if "metrobench export-gguf " in line or "metrobench quantize " in line]
    assert len(export) == 2 and all(" --build b8642 " in c for c in export), export
    vendored = snakemake(cwd, "-n", "-p", target, "--config", "export={'converter': 'vendored'}")
    assert vendored.returncode == 0, vendored.stderr[-2000:]
    assert "--build" not in vendored.stdout and "metrobench quantize --gguf" in vendored.stdout


@pytest.mark.slow
def test_a_tiny_qwen3_5_student_goes_from_gguf_to_server_on_one_named_build(tmp_path, monkeypatch):
    """The vendored tree installed under a name (as the rehearsal does): its converter, its llama-quantize,
    its server's load check; the record names the build; a file the server cannot read is one line."""
    if installed_llama_server() is None:
        pytest.skip("llama.cpp is not installed (make install)")
    from test_llama_builds import default_work

    from metrobench.training.base import tiny_qwen3_5

    monkeypatch.setenv("METROBENCH_LLAMA_BUILDS", str(tmp_path / "builds"))
    env = dict(os.environ, LLAMA_CPP_SOURCE="vendored", LLAMA_CPP_BUILD="b8642", LLAMA_CPP_WORK=default_work())
    done = subprocess.run(["bash", str(REPO / "scripts" / "install-llama-cpp.sh"), sys.prefix], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    tools = build_tools("b8642")
    assert (tools.converter / "conversion").is_dir()            # the vendored tree's converter is split
    assert tools.describe().startswith("b8642 (the vendored llama.cpp of llama-cpp-python ")

    model = tiny_qwen3_5(tmp_path / "model")
    f16, q4, sizes = tmp_path / "m-f16.gguf", tmp_path / "m-Q4_K_M.gguf", tmp_path / "sizes.json"
    assert main(["export-gguf", "--model", str(model), "--out", str(f16), "--build", "b8642"]) == 0
    assert main(["quantize", "--gguf", str(f16), "--out", str(q4), "--sizes", str(sizes), "--build", "b8642"]) == 0
    assert f16.read_bytes()[:4] == q4.read_bytes()[:4] == b"GGUF"
    record = json.loads(sizes.read_text())
    assert record == {"m-f16.gguf": f16.stat().st_size, "m-Q4_K_M.gguf": q4.stat().st_size,
                      "llama_cpp": tools.describe()}
    assert q4.stat().st_size < f16.stat().st_size

    broken = tmp_path / "broken.gguf"
    broken.write_bytes(q4.read_bytes()[:4096])                   # a header and no tensors
    with pytest.raises(MetrobenchError, match=r"broken\.gguf does not load in llama\.cpp build b8642's "
                                              r"llama-server: llama\.cpp server for .* exited"):
        check_serves(broken, tools)
