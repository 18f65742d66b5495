"""Upload a published student's folder to the hub in one commit, and record the commit.

The token comes from the environment only (``HF_TOKEN``), is handed to ``huggingface_hub``
and never printed or written: an error from the hub is reported in one line with the token
scrubbed from it, and the record beside the folder holds the repo, the commit and the files.
A repo that already holds files is replaced only with ``update`` (then the commit also
deletes what the folder does not hold, so the repo holds exactly the listed files); a missing
repo is created only with ``create``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from metrobench.errors import MetrobenchError

TOKEN_ENV = "HF_TOKEN"
#: What the hub puts in every new repo by itself.
HUB_OWN = {".gitattributes"}


def _scrub(text: str, token: str) -> str:
    return text.replace(token, "***") if token else text


def push(folder: Path, repo: str, files: dict[str, int], *, create: bool, update: bool,
         record: Path, message: str) -> dict[str, Any]:
    """Upload ``folder`` to model repo ``repo`` in one commit; write and return the record."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise MetrobenchError(f"publish --push: no hub token: set {TOKEN_ENV} in the environment "
                              "(it is read from there only)")
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)
    try:
        try:
            present = set(api.list_repo_files(repo, repo_type="model")) - HUB_OWN
        except RepositoryNotFoundError:
            if not create:
                raise MetrobenchError(f"publish --push: repo {repo} does not exist on the hub; "
                                      "--create creates it") from None
            api.create_repo(repo, repo_type="model", exist_ok=False)
            present = set()
        if present and not update:
            raise MetrobenchError(f"publish --push: repo {repo} already holds {len(present)} file(s) "
                                  f"(e.g. {sorted(present)[0]}); --update replaces them with this folder")
        info = api.upload_folder(folder_path=str(folder), repo_id=repo, repo_type="model",
                                 commit_message=message, delete_patterns=["*"] if present else None)
    except HfHubHTTPError as exc:
        line = " ".join(_scrub(str(exc), token).split())
        raise MetrobenchError(f"publish --push: the hub refused repo {repo}: {line}") from None
    out = {"repo": repo, "commit": info.oid, "commit_url": info.commit_url, "files": files}
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return out
