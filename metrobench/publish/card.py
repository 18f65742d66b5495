"""The model card (``README.md``) of a published student, written from :class:`~metrobench.publish.facts.Facts`.

Every number printed here is a field of the facts, which are the study's files as written
(Table 4 and 8's cells) or the tables' builders' output; nothing is typed in. A section whose
figures the study has not produced (no scores: no intervals; no Table 8 yet; no runs) is left
out rather than filled. The YAML front matter is what the hub reads: ``base_model``, ``tags``,
``library_name`` and ``license`` (the hub's identifier of the base's licence, where the
leaderboard names one the hub knows; otherwise the licence is named in the text only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

from metrobench.publish.facts import ADAPTER, SUMMARY, gguf_name

if TYPE_CHECKING:
    from metrobench.publish.facts import Facts

#: The leaderboard's licence names -> the hub's licence identifiers (its front matter's ``license``).
HUB_LICENCES = {"apache 2.0": "apache-2.0", "apache-2.0": "apache-2.0", "mit": "mit"}
TAGS = ["gguf", "peft", "lora", "qlora", "tool-calling", "metrollm-bench"]


def front_matter(facts: Facts) -> str:
    meta: dict[str, object] = {"base_model": facts.base_repo, "library_name": "peft", "tags": TAGS}
    hub = HUB_LICENCES.get((facts.licence or "").strip().lower())
    if hub:
        meta["license"] = hub
    return "---\n" + yaml.safe_dump(meta, sort_keys=False) + "---\n"


def _table(header: list[str], rows: list[list[object]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rows)]


def card_text(facts: Facts) -> str:
    """The card's text."""
    row = facts.table4
    lines = [front_matter(facts), f"# {facts.name}", "",
             f"A QLoRA student of [{facts.base_repo}](https://huggingface.co/{facts.base_repo}), seed {facts.seed}, "
             f"distilled from teacher traces on MetroLLM-Bench's train partition ({facts.model} in the study). "
             f"Files: `{gguf_name(facts.name)}` (served with llama.cpp), `{ADAPTER}/` (the LoRA adapter and its "
             f"tokenizer), `{SUMMARY}` (recipe, seed, base and its pinned commit, training set, versions).", "",
             "## Results (held-out partition)", ""]
    header, values = ["Model", "Held-out Tier 1"], [facts.model, facts.seed_tier1]
    if facts.intervals:
        i = facts.intervals
        header += ["95 % CI", "Composite", "95 % CI"]
        values += [f"[{i['tier1_lo']}, {i['tier1_hi']}]", i["composite"], f"[{i['composite_lo']}, {i['composite_hi']}]"]
    lines += _table(header, [values, [f"{facts.base_model} (base)", row["base_tier1"]] + [None] * (len(header) - 2)])
    lines += ["", f"Δ Tier 1 vs its base: {facts.delta:+.2f}.", ""]
    if facts.intervals:
        lines += [f"Intervals: bootstrap over the {facts.intervals['n']} held-out cases within systems "
                  "(the study's Table 9 statistic).", ""]
    if facts.by_system:
        lines += ["Tier 1 per system:", ""]
        lines += _table(list(facts.by_system), [list(facts.by_system.values())]) + [""]
    seeds = [k for k in row if k.startswith("s") and k[1:].isdigit() and row[k]]
    lines += [f"The study's Table 4 row (size {facts.size}):", ""]
    cols = ["base_tier1", *seeds, "mean", "delta", "seed_spread", "q4_k_m_gguf_bytes"]
    cols = [c for c in cols if row.get(c)]
    lines += _table(cols, [[row[c] for c in cols]]) + [""]
    if facts.published and facts.published.get("tier1"):
        p = facts.published
        where = f" ([{p['repo']}](https://huggingface.co/{p['repo']}))" if p.get("repo") else ""
        lines += [f"The paper's released student of this size, {p['model']}{where}, measured in the same "
                  f"study: held-out Tier 1 {p['tier1']}.", ""]
    if facts.table8:
        t8 = facts.table8
        cols = [c for c in ("max_seq", "minutes_per_seed", "adapter_bytes", "q4_k_m_gguf_bytes", "gguf_llama_cpp")
                if t8.get(c)]
        lines += ["## Training cost (the study's Table 8 row)", ""] + _table(cols, [[t8[c] for c in cols]]) + [""]
    if facts.serving:
        lines += ["## Serving settings it was measured with", ""]
        lines += [f"- {key}: {value}" for key, value in facts.serving.items()] + [""]
    lines += ["## Provenance", ""]
    if facts.data:
        lines += [f"- benchmark data: {facts.data['repository']} at commit {facts.data['commit']}"]
    if facts.licence:
        lines += [f"- licence: {facts.licence} (the base model's)"]
    converter = facts.summary.get("converter")
    if converter:
        lines += [f"- GGUF converted and quantised by llama.cpp {converter}"]
    base = facts.summary.get("base", {})
    if base.get("commit"):
        lines += [f"- base weights: {base['repo']} at commit {base['commit']}"]
    return "\n".join(lines) + "\n"
