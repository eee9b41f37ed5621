"""DRF's JSON parser, with every malformed body a 400."""

from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    """Python's json module recurses once per nesting level, so `[` x 30,000 (well under the body size limit)
    raised RecursionError, which DRF's parser does not catch: a 500. No request of ours nests deeper than 3."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise ParseError("JSON parse error - the document is nested too deeply.") from exc
