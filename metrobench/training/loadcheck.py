"""The export's load check, run in a subprocess: load a GGUF, generate a few tokens greedily, check the logits.

``python -m metrobench.training.loadcheck MODEL.gguf`` prints one line,
``METROBENCH-CHECK {"tokens": [...], "bad": null | {"token": k, "what": "..."}}``,
which :func:`metrobench.training.export.check_generates` reads. A subprocess
because a bad file can abort the process (a failed GGML assertion); this
module imports only numpy and llama_cpp, so it starts fast.

Why several tokens and the logits: one token showed the file loads, not that the
model computes. A model whose weights are NaN (a training that diverged, its
NaN adapter merged into the base) gives NaN logits; llama.cpp's greedy pick over
them is token 0, which is SmolLM2's end-of-text, so the old check "generated 1
token" and passed, and the student was served and scored near zero as if that
were a result (issue 49, item 4). Every generated position's whole logit vector
is checked here (:func:`logit_problem`), and :data:`CHECK_TOKENS` positions run
the attention and recurrent state over several tokens, where a state that
overflows shows. On a CPU that is seconds even at 27B.
"""

from __future__ import annotations

import json
import sys
from typing import Any

#: How many tokens the check generates greedily (each one's logits checked).
CHECK_TOKENS = 8
#: The chat prompt the check continues: short, in the ChatML every student is served with.
CHECK_PROMPT = "<|im_start|>user\nHello, can you help me buy a ticket?<|im_end|>\n<|im_start|>assistant\n"
#: The prefix of the one line the subprocess prints its result on.
MARKER = "METROBENCH-CHECK "


def logit_problem(logits: Any) -> str | None:
    """What is wrong with one position's logit vector, in words; None for a model that computes.

    NaN or infinite logits come only from NaN or infinite weights or activations (a
    training that diverged, a broken kernel); a vector whose logits are all equal says
    nothing about the next token (zeroed weights). A trained model gives neither, and
    neither does a random one (the tests' tiny models).
    """
    import numpy as np

    logits = np.asarray(logits, dtype=np.float64)
    nan, inf = int(np.isnan(logits).sum()), int(np.isinf(logits).sum())
    if nan and inf:
        return f"{nan} NaN and {inf} infinite of its {logits.size} logits"
    if nan or inf:
        return f"{nan or inf} {'NaN' if nan else 'infinite'} of its {logits.size} logits"
    if logits.size > 1 and float(logits.max()) == float(logits.min()):
        return f"all {logits.size} logits equal ({float(logits.max()):g})"
    return None


def generate(gguf: str, n: int = CHECK_TOKENS, prompt: str = CHECK_PROMPT) -> dict[str, Any]:
    """Greedy tokens after ``prompt`` on the CPU, stopping at the first position whose logits fail.

    End-of-text is not a stop: the check is of the numbers, not of the text.
    """
    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(gguf, n_ctx=256, n_gpu_layers=0, verbose=True)
    try:
        llm.eval(llm.tokenize(prompt.encode(), add_bos=True, special=True))
        picked: list[int] = []
        for step in range(n):
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
            problem = logit_problem(logits)
            if problem:
                return {"tokens": picked, "bad": {"token": step + 1, "what": problem}}
            picked.append(int(np.argmax(logits)))
            llm.eval(picked[-1:])
        return {"tokens": picked, "bad": None}
    finally:
        llm.close()


if __name__ == "__main__":
    print(MARKER + json.dumps(generate(sys.argv[1])), flush=True)
