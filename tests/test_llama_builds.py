"""Named llama.cpp builds: listed from a config, made by `make builds` from a tag, checked by doctor,
refused for a GPU row on a CPU build, and recorded by what they are.

No compiler runs here. The source resolution clones a local bare git repository with a tag
(as `make builds` clones the public one by tag); the install script runs for real with a
protocol fake of `cmake` on PATH whose "build" is a llama-server script printing the version
the CMake arguments gave it (`version: 0.5.0-dev (build N, commit C)`, as the vendored tree
prints); doctor's checks and the run's refusal read fake llama-servers printing upstream's
`--version` and `--list-devices` output. One check runs the project's real llama-server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from metrobench.agents import llama_builds
from metrobench.agents.llama_builds import source_tree
from metrobench.agents.runner.config import parse_model_config
from metrobench.agents.serving import (gpu_libraries, installed_llama_server, listed_devices, named_build,
                                       require_gpu)
from metrobench.agents.serving_record import build_label, parse_version, server_build
from metrobench.cli import main
from metrobench.doctor import check_named_builds
from metrobench.errors import MetrobenchError
from metrobench.study import load_study
from metrobench.training.export import build_tools

REPO = Path(__file__).resolve().parents[1]
PAPER, OVERLAY, DEMO = (REPO / "config" / n for n in ("config.yaml", "rehearsal.yaml", "demo.yaml"))
CUDA_DEVICE = "  CUDA0: NVIDIA GeForce RTX 5090 (32607 MiB, 31820 MiB free)"


def git(*args: str, cwd: Path | None = None) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def upstream(tmp_path):
    """A llama.cpp-shaped repository of three commits, tag b2 on the second (upstream numbers its
    builds by commit count), as a bare repository and a checkout at the third commit."""
    work = tmp_path / "llama.cpp"
    (work / "tools" / "server").mkdir(parents=True)
    (work / "tools" / "server" / "server.cpp").write_text("int main() {}\n")
    (work / "gguf-py" / "gguf").mkdir(parents=True)                  # the converter, as an old tree has it:
    (work / "gguf-py" / "gguf" / "__init__.py").write_text("")       # no conversion/ folder
    (work / "convert_hf_to_gguf.py").write_text("# llama.cpp's converter\n")
    git("init", "-q", "-b", "master", str(work))
    for i in (1, 2, 3):
        (work / "CMakeLists.txt").write_text(f"project(llama.cpp) # {i}\n")
        git("add", "-A", cwd=work)
        git("commit", "-q", "-m", f"commit {i}", cwd=work)
        if i == 2:
            git("tag", "b2", cwd=work)
    bare = tmp_path / "upstream.git"
    git("clone", "-q", "--bare", str(work), str(bare))
    return work, bare, git("rev-parse", "b2^{commit}", cwd=work)


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def fake_server(folder: Path, version: str, devices: list[str] | None = None, record: dict | None = None,
                libraries: tuple[str, ...] = ("libggml-base.so", "libggml-cpu.so")) -> Path:
    """A llama-server answering --version and --list-devices as llama.cpp prints them."""
    listed = "\n".join(devices) if devices else "  (none)"
    binary = executable(folder / "llama-server", f"""#!/bin/sh
case "$1" in
  --version) printf '%s\\nbuilt with GNU 12.2.0 for Linux x86_64\\n' '{version}' >&2 ;;
  --list-devices) printf 'Available devices:\\n{listed}\\n' ;;
  *) exit 1 ;;
esac
""")
    for name in libraries:
        (folder / name).write_bytes(b"")
    if record is not None:
        (folder / "metrobench-build.json").write_text(json.dumps(record))
    return binary


# -- listing -------------------------------------------------------------------------------

def test_the_builds_a_config_serves_on_with_their_rows():
    paper = load_study([PAPER]).llama_builds()
    assert list(paper) == ["b10398", "b8642"]
    assert {"qwen3.5-27b-b10398", "qwen3.6-27b", "qwen3.8-27b", "muse-glimmer-30b"} <= set(paper["b10398"].rows)
    assert {"qwen3.5-27b", "qwen3.5-35b-a3b", "student_serving"} <= set(paper["b8642"].rows)
    assert sum(len(u.rows) for u in paper.values()) == 26       # 25 local rows and the students
    assert all(u.strict_gpu_rows == list(u.rows) for u in paper.values())   # n_gpu_layers 999, CPU not allowed
    rehearsed = load_study([PAPER, OVERLAY]).llama_builds()
    assert list(rehearsed) == ["b10398", "b8642"]                # the paper's names, kept
    assert all(u.gpu_rows == list(u.rows) and u.strict_gpu_rows == [] for u in rehearsed.values())
    assert load_study([DEMO]).llama_builds() == {}               # the CPU demo: the default build


def test_the_listing_command(capsys):
    assert main(["builds", "--list", "--config", str(PAPER)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["b10398", "b8642"]
    assert "student_serving" in lines[1].split("\t")[1].split()


@pytest.mark.parametrize("name", ["../x", "a/b", "/abs", ".hidden"])
def test_a_build_name_that_is_a_path_is_one_error_line_at_config_load(tmp_path, name):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"models": {"m": {"serving": {"gguf": "m.gguf", "build": name}}}}))
    with pytest.raises(MetrobenchError) as caught:
        load_study([config])
    message = str(caught.value)
    assert message.startswith(f"{config}: field models.m.serving.build: ") and "not a build name" in message
    assert "\n" not in message


# -- where the source comes from -----------------------------------------------------------

def test_no_checkout_clones_the_tag_shallowly_once(upstream, tmp_path):
    _, bare, tagged = upstream
    tree = Path(source_tree("b2", None, tmp_path / "work", repo_url=f"file://{bare}"))
    assert tree == tmp_path / "work" / "src" / "b2"
    assert git("rev-parse", "HEAD", cwd=tree) == tagged
    assert git("rev-parse", "--is-shallow-repository", cwd=tree) == "true"
    marker = tree / "kept"
    marker.write_text("")
    assert Path(source_tree("b2", None, tmp_path / "work", repo_url=f"file://{bare}")) == tree and marker.exists()
    with pytest.raises(MetrobenchError, match=r"cloning file://.* at tag b9 failed"):
        source_tree("b9", None, tmp_path / "work", repo_url=f"file://{bare}")


def test_a_checkout_is_used_at_the_tag_else_cloned_there_and_never_moved(upstream, tmp_path):
    checkout, bare, tagged = upstream
    head = git("rev-parse", "HEAD", cwd=checkout)
    tree = Path(source_tree("b2", str(checkout), tmp_path / "work"))          # HEAD is past the tag
    assert tree == tmp_path / "work" / "src" / "b2" and git("rev-parse", "HEAD", cwd=tree) == tagged
    assert git("rev-parse", "HEAD", cwd=checkout) == head                       # the user's checkout as it was
    assert git("rev-list", "--count", "HEAD", cwd=tree) == "2"                  # whole history: the build number
    assert Path(source_tree("b2", str(bare), tmp_path / "work2")).is_dir()      # a bare repository: cloned
    git("checkout", "-q", "b2", cwd=checkout)
    assert source_tree("b2", str(checkout), tmp_path / "work3") == str(checkout)  # at the tag: itself
    (checkout / "CMakeLists.txt").write_text("edited\n")                        # but not with local edits
    assert source_tree("b2", str(checkout), tmp_path / "work3") != str(checkout)
    assert source_tree("b2", "vendored", tmp_path / "work") == "vendored"
    with pytest.raises(MetrobenchError, match=r"LLAMA_CPP_SOURCE=.*: no tag b7 there"):
        source_tree("b7", str(checkout), tmp_path / "work")
    with pytest.raises(MetrobenchError, match=r"no such folder"):
        source_tree("b2", str(tmp_path / "absent"), tmp_path / "work")


FAKE_CMAKE = r"""#!/usr/bin/env bash
# cmake's protocol as install-llama-cpp.sh uses it: --version, configure (-S -B args), --build.
set -e
if [[ "$1" == --version ]]; then echo "cmake version 3.28.3"; exit 0; fi
if [[ "$1" == -S ]]; then
  build=$4; mkdir -p "$build"; shift 4; printf '%s\n' "$@" > "$build/args"; echo configure >> "$LOG"; exit 0
fi
build=$2; echo build >> "$LOG"
number=$(sed -n 's/^-DLLAMA_BUILD_NUMBER=//p' "$build/args")
commit=$(sed -n 's/^-DLLAMA_BUILD_COMMIT=//p' "$build/args")
cuda=$(grep -c '^-DGGML_CUDA=ON$' "$build/args" || true)
mkdir -p "$build/bin"; : > "$build/bin/libggml-base.so"; [[ $cuda == 1 ]] && : > "$build/bin/libggml-cuda.so"
cat > "$build/bin/llama-server" <<EOF
#!/bin/sh
echo "version: 0.5.0-dev (build ${number:-1}, commit ${commit:-unknown})" >&2
EOF
chmod +x "$build/bin/llama-server"
printf '#!/bin/sh\necho "usage: llama-quantize" >&2\n' > "$build/bin/llama-quantize"; chmod +x "$build/bin/llama-quantize"
"""


def test_make_builds_builds_each_named_build_from_its_tag_once(upstream, tmp_path, monkeypatch, capsys):
    """`make builds`' path end to end: the config's builds listed, the tag cloned shallowly, the real
    install script run (a fake cmake), the record beside the build, and the version it reports."""
    _, bare, tagged = upstream
    executable(tmp_path / "bin" / "cmake", FAKE_CMAKE)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LOG", str(tmp_path / "cmake.log"))
    monkeypatch.setenv("LLAMA_CPP_WORK", str(tmp_path / "work"))
    monkeypatch.setenv("METROBENCH_LLAMA_BUILDS", str(tmp_path / "builds"))
    monkeypatch.setenv("LLAMA_CPP_REPO", f"file://{bare}")
    monkeypatch.delenv("LLAMA_CPP_SOURCE", raising=False)
    monkeypatch.setenv("LLAMA_CMAKE_ARGS", "-DGGML_CUDA=ON")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"models": {"m": {"serving": {"gguf": "m.gguf", "build": "b2",
                                                                   "n_gpu_layers": 99}}}}))
    args = ["--config", str(config), "--venv", sys.prefix]
    assert main(["builds", *args]) == 0, capsys.readouterr().err
    binary = tmp_path / "builds" / "b2" / "llama-server"
    assert named_build("b2") == binary
    record = json.loads((binary.parent / "metrobench-build.json").read_text())
    assert record["name"] == record["tag"] == "b2" and record["commit"] == tagged
    assert record["llama_cmake_args"] == "-DGGML_CUDA=ON" and record["cmake_args"][-2:] == [
        "-DLLAMA_BUILD_NUMBER=2", f"-DLLAMA_BUILD_COMMIT={tagged[:8]}"]     # a shallow clone counts 1 commit
    assert server_build(binary) == {"version": "0.5.0-dev", "build": 2, "commit": tagged[:8], "tag": "b2",
                                    "name": "b2"}
    assert gpu_libraries(binary.parent) == ["CUDA"]
    tools = build_tools("b2")        # the students' converter and quantiser are the serving build's
    assert (tools.server, tools.quantizer) == (binary, binary.parent / "llama-quantize")
    assert (tools.converter / "convert_hf_to_gguf.py").read_text() == "# llama.cpp's converter\n"
    assert (tools.converter / "gguf-py" / "gguf" / "__init__.py").is_file()
    assert not (tools.converter / "conversion").exists()
    assert tools.describe() == f"b2 (commit {tagged[:12]})"
    assert [c.status for c in check_named_builds(load_study([config]))] == ["ok", "ok"]  # CUDA; devices not listed
    assert (tmp_path / "cmake.log").read_text().split() == ["configure", "build"]
    assert main(["builds", *args]) == 0                                  # installed from its tag: nothing to do
    assert "b2: installed from tag b2" in capsys.readouterr().out
    assert (tmp_path / "cmake.log").read_text().split() == ["configure", "build"]
    monkeypatch.setenv("LLAMA_CMAKE_ARGS", "")                            # other CMake arguments: built again
    assert main(["builds", *args]) == 0
    assert (tmp_path / "cmake.log").read_text().split() == ["configure", "build"] * 2
    assert gpu_libraries(binary.parent) == []
    monkeypatch.setenv("LLAMA_CPP_REPO", f"file://{tmp_path / 'nowhere.git'}")
    monkeypatch.setenv("LLAMA_CMAKE_ARGS", "-DGGML_VULKAN=ON")           # a clone kept at the tag is reused;
    shutil.rmtree(tmp_path / "work" / "src")                             # without it, the clone is needed
    capsys.readouterr()
    assert main(["builds", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("metrobench: error: llama.cpp build b2: cloning file://") and "\n" not in err


# -- what a build reports ------------------------------------------------------------------

def test_both_version_formats_are_read():
    assert parse_version("version: 8642 (a1b2c3d4)\nbuilt with cc for x86_64") == {
        "version": "8642", "build": 8642, "commit": "a1b2c3d4"}
    assert parse_version("version: 0.5.0-dev (build 10398, commit 0c1e5701)\nbuilt with ...") == {
        "version": "0.5.0-dev", "build": 10398, "commit": "0c1e5701"}
    assert parse_version("version: 0.5.0-dev (build 0, commit unknown)")["commit"] is None
    assert parse_version("llama-server: unknown option") == {"version": None, "build": None, "commit": None}


def test_the_serving_record_reads_an_upstream_build_and_what_the_record_beside_it_says(tmp_path):
    upstream = fake_server(tmp_path / "up", "version: 8642 (a1b2c3d4)")
    assert server_build(upstream) == {"version": "8642", "build": 8642, "commit": "a1b2c3d4", "tag": "b8642"}
    vendored = fake_server(tmp_path / "b8642", "version: 0.5.0-dev (build 291, commit 0c1e570)",
                           record={"name": "b8642", "tag": None, "source": "vendored", "commit": None,
                                   "llama_cpp_python": "0.3.36"})
    info = server_build(vendored)
    assert info == {"version": "0.5.0-dev", "build": 291, "commit": "0c1e570", "tag": None, "name": "b8642",
                    "source": "vendored"}
    assert build_label(info) == "b8642 (the vendored tree, build 291)"
    default = fake_server(tmp_path / "lib", "version: 0.5.0-dev (build 291, commit 0c1e570)",
                          record={"key": "abc", "llama_cpp_python": "0.3.36", "source": "/x/vendor/llama.cpp"})
    assert server_build(default)["tag"] is None            # git's count of the tree it sits in is no tag
    with pytest.raises(MetrobenchError, match="--version: "):
        server_build(tmp_path / "absent")


def test_an_upstream_build_without_a_record_is_read_from_what_it_prints_on_stderr(tmp_path):
    """Real upstream llama.cpp: backend lines first, then `version: N (commit)` and `built with`, on stderr."""
    binary = executable(tmp_path / "up" / "llama-server", """#!/bin/sh
echo "load_backend: loaded CPU backend from /opt/llama/libggml-cpu-haswell.so" >&2
echo "version: 8642 (a1b2c3d4)" >&2
echo "built with cc (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0 for x86_64-linux-gnu" >&2
""")
    info = server_build(binary)
    assert info == {"version": "8642", "build": 8642, "commit": "a1b2c3d4", "tag": "b8642"}
    assert build_label(info) == "b8642"


def test_a_version_that_never_answers_is_one_error_line_after_the_timeout(tmp_path, monkeypatch):
    from metrobench.agents import serving_record

    monkeypatch.setattr(serving_record, "VERSION_TIMEOUT_S", 0.5)   # the binary never answers: any bound will do
    hung = executable(tmp_path / "hung" / "llama-server", "#!/bin/sh\nexec sleep 600\n")
    with pytest.raises(MetrobenchError) as refused:
        server_build(hung)
    assert str(refused.value) == (f"{hung} --version did not answer within 0.5 s (a hung binary?): the build "
                                  f"cannot be recorded; run it by hand to see why")


# -- doctor ----------------------------------------------------------------------------------

def study_on(tmp_path, name: str = "b8642", **serving) -> object:
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump({"models": {
        "big": {"serving": {"gguf": "m.gguf", "build": name, "n_gpu_layers": 999, **serving}},
        "hosted": {"provider": "openai", "base_url": "http://127.0.0.1:1/v1"}}}))
    return load_study([config])


def lines(checks) -> list[tuple[str, str, str]]:
    return [(c.status, c.name, c.detail) for c in checks]


def test_doctor_checks_each_named_build_version_and_gpu(tmp_path, monkeypatch):
    builds = tmp_path / "builds"
    monkeypatch.setenv("METROBENCH_LLAMA_BUILDS", str(builds))
    study = study_on(tmp_path)
    [(status, name, detail)] = lines(check_named_builds(study))
    assert (status, name) == ("FAIL", "build b8642") and "not installed (1 rows serve on it: big)" in detail
    assert "`make builds`" in detail

    record = {"name": "b8642", "tag": "b8642", "source": "/src", "commit": "a1b2c3d4" + "0" * 32}
    fake_server(builds / "b8642", "version: 8642 (a1b2c3d4)", record=record)
    version, gpu = lines(check_named_builds(study))
    assert version[:2] == ("ok", "build b8642") and "build 8642, commit a1b2c3d4), tag b8642" in version[2]
    assert gpu[:2] == ("FAIL", "build b8642 gpu") and "is a CPU-only build" in gpu[2] and "big serve" in gpu[2]
    assert "serving.allow_cpu: true" in gpu[2]
    _, gpu = lines(check_named_builds(study_on(tmp_path, allow_cpu=True)))
    assert gpu[0] == "warn" and "(serving.allow_cpu: true)" in gpu[2]
    assert len(check_named_builds(study_on(tmp_path, n_gpu_layers=0))) == 1       # no GPU layers: no GPU check

    fake_server(builds / "b8642", "version: 8642 (a1b2c3d4)", devices=[CUDA_DEVICE], record=record,
                libraries=("libggml-base.so", "libggml-cuda.so"))
    _, gpu = lines(check_named_builds(study))
    assert gpu == ("ok", "build b8642 gpu", "CUDA backend; devices: CUDA0: NVIDIA GeForce RTX 5090 (32607 MiB, "
                   "31820 MiB free)")
    fake_server(builds / "b8642", "version: 8642 (a1b2c3d4)", devices=[], record=record,
                libraries=("libggml-base.so", "libggml-cuda.so"))
    _, gpu = lines(check_named_builds(study))
    assert gpu[0] == "FAIL" and "has the CUDA backend but it lists no device" in gpu[2]

    fake_server(builds / "b8642", "version: 8600 (ffff0000)", record={**record, "commit": None})
    version = lines(check_named_builds(study))[0]
    assert version[0] == "FAIL" and "reports build 8600 (commit ffff0000), not 8642: not tag b8642" in version[2]
    fake_server(builds / "b8642", "version: 8642 (ffff0000)", record=record)
    version = lines(check_named_builds(study))[0]
    assert version[0] == "FAIL" and "reports commit ffff0000, its install record a1b2c3d40000" in version[2]

    fake_server(builds / "b8642", "version: 0.5.0-dev (build 291, commit 0c1e570)",
                record={"name": "b8642", "tag": None, "source": "vendored", "commit": None,
                        "llama_cpp_python": "0.3.36"})
    version = lines(check_named_builds(study))[0]
    assert version[0] == "warn" and version[2].startswith(
        "b8642 is the vendored tree (llama-cpp-python 0.3.36, version 0.5.0-dev (build 291, commit 0c1e570)), "
        "not tag b8642")

    other = study_on(tmp_path, name="cuda-test")                        # a name that is no tag: the commit
    fake_server(builds / "cuda-test", "version: 0.5.0-dev (build 5, commit 1234abcd)",
                record={"name": "cuda-test", "tag": None, "source": "/src", "commit": "1234abcd" + "0" * 32})
    assert lines(check_named_builds(other))[0][0] == "ok"
    fake_server(builds / "cuda-test", "version: 0.5.0-dev (build 5, commit 99999999)",
                record={"name": "cuda-test", "tag": None, "source": "/src", "commit": "1234abcd" + "0" * 32})
    assert lines(check_named_builds(other))[0][0] == "FAIL"


# -- the run's refusal -----------------------------------------------------------------------

def test_a_gpu_row_on_a_cpu_build_is_refused_unless_the_cpu_is_allowed(tmp_path, monkeypatch):
    builds = tmp_path / "builds"
    monkeypatch.setenv("METROBENCH_LLAMA_BUILDS", str(builds))
    binary = fake_server(builds / "b8642", "version: 8642 (a1b2c3d4)")
    cfg = parse_model_config({"name": "big", "serving": {"gguf": "m.gguf", "build": "b8642", "n_gpu_layers": 999}})
    with pytest.raises(MetrobenchError) as caught:
        require_gpu(cfg, binary)
    assert str(caught.value).startswith("model big: serving.n_gpu_layers is 999 and the config names a GPU, but "
                                        "llama.cpp build b8642 would serve on the CPU: ")
    assert "serving.allow_cpu: true" in str(caught.value) and "\n" not in str(caught.value)
    require_gpu(cfg.model_copy(update={"serving": cfg.serving.model_copy(update={"allow_cpu": True})}), binary)
    require_gpu(cfg.model_copy(update={"serving": cfg.serving.model_copy(update={"n_gpu_layers": 0})}), binary)
    fake_server(builds / "b8642", "version: 8642 (a1b2c3d4)", devices=[CUDA_DEVICE],
                libraries=("libggml-base.so", "libggml-cuda.so"))
    require_gpu(cfg, binary)                                            # a CUDA build that lists the card


def test_bench_require_gpu_stops_before_the_server_starts(tmp_path, root, monkeypatch, capsys):
    monkeypatch.setenv("METROBENCH_LLAMA_BUILDS", str(tmp_path / "builds"))
    fake_server(tmp_path / "builds" / "b8642", "version: 8642 (a1b2c3d4)")
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    config = tmp_path / "m.yaml"
    config.write_text(yaml.safe_dump({"name": "big", "serving": {"gguf": str(gguf), "build": "b8642",
                                                                 "n_gpu_layers": 999}}))
    out = tmp_path / "out.jsonl"
    code = main(["bench", "--data", str(root), "--system", "cta", "--model-config", str(config),
                 "--cases", "CTA-A-001", "--out", str(out), "--require-gpu"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("metrobench: error: model big: serving.n_gpu_layers is 999") and "\n" not in err
    assert not out.exists()


def test_the_workflow_passes_require_gpu_only_when_the_config_names_a_card(monkeypatch):
    # the study's run job (`run --view`, what the run rule runs) carries the config's card: a GPU row is
    # then refused on a CPU build and held to the card by its GGUF's header (issue 49, item 6); a CPU
    # study names no card, and nothing is required
    from metrobench.cli import main
    from metrobench.commands import runs

    seen: dict = {}
    monkeypatch.setattr(runs, "execute", lambda job, **options: seen.update(card=job.card, **options) or 0)
    view = ["--system", "doha", "--view", "holdout"]
    assert main(["run", "--config", "config/demo.yaml", "--model", "rule-agent", *view]) == 0
    assert seen["card"] is None and seen["require_gpu"] is False
    assert main(["run", "--config", "config/config.yaml", "--model", "qwen3.5-27b", *view]) == 0
    assert seen["card"].memory_gib == 32 and seen["require_gpu"] is True
    assert seen["set_aside"] is True and seen["rerun_changed"] is True


# -- the real llama-server -----------------------------------------------------------------

def default_work() -> str:
    """The install script's work folder holding the default build (the checkout that ran `make install`)."""
    from metrobench.agents.serving import llama_build_info

    source = (llama_build_info() or {}).get("source")     # WORK/llama_cpp_python-V/vendor/llama.cpp
    return os.environ.get("LLAMA_CPP_WORK") or (str(Path(source).parents[2]) if source else "")


def test_the_projects_llama_server_reports_its_version_and_no_gpu_device_here(tmp_path, monkeypatch):
    """The vendored build (make install): the version line parsed, --list-devices as llama.cpp prints it
    (no GPU device on a CPU build), and installed under a name it is the vendored tree to doctor."""
    real = installed_llama_server()
    if real is None:
        pytest.skip("llama.cpp is not installed (make install)")
    info = server_build(real)
    assert isinstance(info["build"], int) and info["version"] and info["tag"] is None
    if gpu_libraries(real.parent):
        pytest.skip("a GPU build: the CPU expectations below do not hold")
    assert listed_devices(real) == []
    monkeypatch.setenv("METROBENCH_LLAMA_BUILDS", str(tmp_path / "builds"))
    env = dict(os.environ, LLAMA_CPP_SOURCE="vendored", LLAMA_CPP_BUILD="b8642", LLAMA_CPP_WORK=default_work())
    done = subprocess.run(["bash", str(REPO / "scripts" / "install-llama-cpp.sh"), sys.prefix], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    checks = lines(check_named_builds(study_on(tmp_path)))
    assert checks[0][0] == "warn" and checks[0][2].startswith("b8642 is the vendored tree (llama-cpp-python ")
    assert checks[1][:2] == ("FAIL", "build b8642 gpu") and "is a CPU-only build" in checks[1][2]
    named = server_build(tmp_path / "builds" / "b8642" / "llama-server")
    assert named == {**info, "name": "b8642", "source": "vendored"}
