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
