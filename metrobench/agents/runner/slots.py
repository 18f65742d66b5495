"""How many requests a run keeps in flight: the model's ``concurrency``, else what suits its endpoint.

An OpenAI-compatible server on this machine (``provider: openai`` with a ``base_url`` on
127.0.0.1, ``localhost`` or ``::1``) is usually llama-server, whose requests share its slots
(4 by default, over one context): more requests than slots wait or thrash its prompt cache.
So where the model config sets no ``concurrency``, the run asks the server once, before its
first case, for its slot count (``GET <server root>/props``, llama-server's
``{"total_slots": N, ...}``; the root is the ``base_url`` without its ``/v1``) and keeps N
requests in flight; a server that does not answer so (another server, an error, no answer
within :data:`PROPS_TIMEOUT_S`) gets :data:`~metrobench.agents.runner.config.LOCAL_CONCURRENCY`
(2). The query never raises. Concurrency is not among the settings (:meth:`ModelConfig.settings`)
nor the fingerprint: it changes how fast cases run, not what the model answers.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from metrobench.agents.runner.config import LOCAL_CONCURRENCY, ModelConfig, loopback_openai

#: Seconds the ``/props`` query may take (connect and read): a local server answers at once.
PROPS_TIMEOUT_S = 3.0


def props_url(base_url: str) -> str:
    """The server's ``/props`` beside its API: ``http://127.0.0.1:8080/v1`` -> ``http://127.0.0.1:8080/props``."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, f"{path}/props", "", ""))


def server_slots(base_url: str, timeout_s: float = PROPS_TIMEOUT_S) -> int | None:
    """The server's ``total_slots`` from its ``/props``, or ``None`` where it gives none (never raises)."""
    try:
        import httpx

        response = httpx.get(props_url(base_url), timeout=timeout_s, follow_redirects=False)
        if response.status_code != 200:
            return None
        slots = response.json().get("total_slots")
    except Exception:  # noqa: BLE001 - any failure means "no slot count": the fallback is used
        return None
    if isinstance(slots, int) and not isinstance(slots, bool) and slots >= 1:
        return slots
    return None


def run_concurrency(cfg: ModelConfig, base_url: str | None = None) -> tuple[int, str]:
    """Requests in flight for a run of ``cfg`` against ``base_url`` (else its own), and why, in words
    (for the run's first line): as configured, the local server's slots, the local fallback, or the
    provider's default."""
    if cfg.concurrency is not None:
        return cfg.concurrency, "concurrency as configured"
    url = base_url or cfg.base_url
    if loopback_openai(cfg.provider, url):
        assert url is not None
        where = props_url(url)
        slots = server_slots(url)
        if slots is not None:
            return slots, f"the local server's {slots} slot{'s' if slots != 1 else ''}, from {where}"
        return LOCAL_CONCURRENCY, (f"a local endpoint: no slot count from {where}, so {LOCAL_CONCURRENCY}; "
                                   "set concurrency to the server's slots")
    return cfg.parallel, f"the default for provider {cfg.provider}"
