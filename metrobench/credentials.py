"""Where secrets may be named, and the checks that keep them out of every message.

Contract: keys come only from environment variables, and what a config or a
flag holds is the variable's *name* (``api_key_env``, ``--api-key-env``,
``scoring.judge_key_env``, ``--judge-key-env``). :func:`env_name_problem` refuses
a value that is not a plain variable name, or that has the shape of a key (long,
no underscore, letters and digits mixed), without ever quoting the value: a key
pasted where its variable's name belongs is never printed back. A URL
(``base_url``, ``--base-url``, ``judge_url``, ``--judge-url``) may not carry
credentials (``https://user:secret@host``), valid or not: the HTTP client would
send them as Basic auth instead of the API key. :func:`url_problem` refuses one,
and any message that quotes a URL quotes it through :func:`redact_url`.
:func:`is_loopback` tells an endpoint on this machine (127.0.0.0/8, ``localhost``, ``::1``): a
local OpenAI-compatible server needs no key, so its ``api_key_env`` may be left out.

Settings that are recorded (a model's ``extra_body``, ``chat_template_kwargs`` and
model id go into the run header, every transcript record and every view) may
hold no key: :func:`secret_problem` finds a key-named entry (``api_key``,
``token``, ``Authorization``, ``password`` ...) or a key-shaped string
(``sk-...``, ``hf_...``, a long run of mixed letters and digits) and names where
it is, never what it is. :func:`scrub_argv` masks key-shaped words of a command
line in a message (an unknown flag's value, an invalid choice).
The standard library only: the configs and the command line both import it.
"""

from __future__ import annotations

import re

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)?[^/?#]*@")
EXAMPLE_URL = "http://127.0.0.1:8080/v1"


def _looks_like_key(value: str) -> bool:
    """Long, no underscore, letters and digits mixed: how API keys look and variable names do not."""
    return len(value) >= 16 and "_" not in value and any(c.isdigit() for c in value) \
        and any(c.isalpha() for c in value)


#: Prefixes of the keys the usual services issue (OpenAI/Anthropic ``sk-``, Hugging Face ``hf_``, GitHub,
#: GitLab, Slack, AWS, Google, a JWT, a pasted ``Bearer`` header), each followed by a key's worth of characters.
_KEY_SHAPES = re.compile(
    r"(?:\b(?:sk|pk|rk)[-_][A-Za-z0-9_-]{16,}|\bhf_[A-Za-z0-9]{16,}|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bgithub_pat_\w{20,}|\bglpat-[\w-]{16,}|\bxox[abposr]-[\w-]{10,}|\bAKIA[0-9A-Z]{16}|\bAIza[\w-]{30,}"
    r"|\beyJ[\w-]{10,}\.[\w-]{10,}|\bBearer\s+\S{8,})")
#: A long unbroken run of letters and digits (an Azure or Mistral key: 32 of them); model ids, flags and
#: settings break theirs with '-', '.', '/' or '_' long before 24 characters.
_LONG_RUN = re.compile(r"[A-Za-z0-9]{24,}")
#: Words that make an entry's name a secret's wherever they stand (``client_secret``, ``x-api-key`` has
#: ``api`` + ``key``, below), and words that do so last only (``hf_token`` yes, ``max_tokens`` no).
_SECRET_WORDS = frozenset({"secret", "password", "passwd", "passphrase", "apikey", "authorization",
                           "credential", "credentials"})
_SECRET_LAST = frozenset({"token", "auth", "bearer", "cookie"})
#: ``<word>_key`` that names a key (``api_key``, ``private_key``), where ``prompt_cache_key`` does not.
_KEY_QUALIFIERS = frozenset({"api", "secret", "private", "access", "subscription", "auth", "client", "session"})


def secret_parts(value: str) -> list[str]:
    """The parts of ``value`` shaped like a key: after a known key prefix, or a long run of mixed letters
    and digits (a 64-hex digest is one too: a recorded setting has no reason to hold either)."""
    parts = [match.group(0) for match in _KEY_SHAPES.finditer(value)]
    return parts + [run for run in _LONG_RUN.findall(value)
                    if any(c.isdigit() for c in run) and any(c.isalpha() for c in run)]


def looks_like_secret(value: str) -> bool:
    """Whether ``value`` holds something shaped like a key (:func:`secret_parts`)."""
    return bool(secret_parts(value))


def secret_name(name: str) -> bool:
    """Whether an entry called ``name`` holds a secret (``api_key``, ``apiKey``, ``x-api-key``, ``hf_token``,
    ``Authorization``, ``client_secret``, ``password``), and not a setting (``max_tokens``, ``prompt_cache_key``)."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()
    words = [word for word in re.split(r"[^a-z0-9]+", spaced) if word]
    if not words:
        return False
    if _SECRET_WORDS.intersection(words) or words[-1] in _SECRET_LAST:
        return True
    return words[-1] == "key" and (len(words) == 1 or words[-2] in _KEY_QUALIFIERS)


def secret_problem(value: object, where: str) -> str | None:
    """Where in ``value`` (a recorded setting: a string, or mappings and lists of them) a key is, as
    ``where`` plus the path (``extra_body.headers.api_key``), with why; never the value. Else None."""
    found = _find_secret(value, where)
    if found is None:
        return None
    path, named = found
    why = "is named like a key" if named else "looks like a key"
    return (f"{path} {why} (not shown): a key is never written in a config, which every transcript and "
            "view records; put it in an environment variable and name that in api_key_env")


def _find_secret(value: object, path: str) -> tuple[str, bool] | None:
    """(path, key-named?) of the first key in ``value``, depth first."""
    if isinstance(value, str):
        return (path, False) if looks_like_secret(value) else None
    if isinstance(value, dict):
        for name, item in value.items():
            sub = f"{path}.{name}" if isinstance(name, str) and not looks_like_secret(name) else f"{path}.<name>"
            if isinstance(name, str) and looks_like_secret(name):
                return sub, False
            if isinstance(name, str) and secret_name(name) and isinstance(item, str) and item:
                return sub, True
            found = _find_secret(item, sub)
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _find_secret(item, f"{path}[{i}]")
            if found:
                return found
    return None


def scrub_argv(text: str, argv: list[str] | tuple[str, ...]) -> str:
    """``text`` with every key-shaped part of ``argv``'s words replaced by ``***``: an error message quoting a
    command line (argparse's invalid choice, a refused value) shows no key, and a path with a digest in it
    keeps the rest of its words (``.../snapshots/***/model.gguf``)."""
    parts = {part for arg in argv for part in secret_parts(arg)}
    for part in sorted(parts, key=len, reverse=True):
        text = text.replace(part, "***")
    return text


def env_name_problem(value: str) -> str | None:
    """Why ``value`` is no environment variable's name (never quoting it), else None."""
    if _ENV_NAME.fullmatch(value) and not _looks_like_key(value):
        return None
    hint = "it looks like a key; " if _looks_like_key(value) or "-" in value or len(value) >= 16 else ""
    return (f"not an environment variable name ({hint}give the variable's name, e.g. MISTRAL_API_KEY; "
            "the key itself goes in that variable)")


def redact_url(value: str) -> str:
    """``value`` with any ``user:password@`` replaced by ``***@``, for messages."""
    return _USERINFO.sub(lambda m: f"{m.group(1) or ''}***@", value)


def url_problem(value: str) -> str | None:
    """Why ``value`` is no usable endpoint URL (quoted redacted), else None."""
    from urllib.parse import urlsplit

    if _USERINFO.match(value):
        return (f"{redact_url(value)}: a URL may not carry credentials (user:password@); "
                "give the key's environment variable instead")
    try:
        parts = urlsplit(value)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError:
        ok = False
    if ok:
        return None
    shown = f"{value!r} is not" if "://" in value else "not"
    return f"{shown} an http:// or https:// URL with a host (e.g. {EXAMPLE_URL})"


def scrub(text: str, *secrets: str | None) -> str:
    """``text`` with each non-empty secret replaced by ``***`` (a server's error body may quote the key)."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine: ``localhost``, 127.0.0.0/8 or ``::1`` (never a lookup)."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    if not host:
        return False
    if host.rstrip(".").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
