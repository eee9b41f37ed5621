"""Multi-document YAML in and out, with messages a person can act on (line and column of a syntax error)."""

from __future__ import annotations

from typing import Any

import yaml

MAX_BYTES = 512 * 1024
MAX_DOCUMENTS = 100


class DocumentError(ValueError):
    """The text is not YAML of Kubernetes objects; the message says where."""


def load_documents(text: str) -> list[dict[str, Any]]:
    """The objects in `text`, empty documents dropped. Raises DocumentError."""
    if len(text.encode()) > MAX_BYTES:
        raise DocumentError(f"The manifest is over {MAX_BYTES // 1024} KiB.")
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise DocumentError(f"Not valid YAML{where}: {problem}.") from None
    except RecursionError:
        raise DocumentError("The YAML is nested too deeply.") from None
    if not documents:
        raise DocumentError("The manifest has no Kubernetes object in it.")
    if len(documents) > MAX_DOCUMENTS:
        raise DocumentError(f"At most {MAX_DOCUMENTS} objects at a time.")
    for number, document in enumerate(documents, start=1):
        if not isinstance(document, dict) or not isinstance(document.get("kind"), str):
            raise DocumentError(f"Document {number} is not a Kubernetes object (a mapping with a `kind`).")
    return documents


def dump_documents(objects: list[dict[str, Any]]) -> str:
    """`---`-separated YAML, keys in the order they were written (kubectl and people read it top-down)."""
    return yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False, explicit_start=True, width=120)
