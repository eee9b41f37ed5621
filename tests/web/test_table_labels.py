"""Every data table's cells carry their column's name in data-label, as rendered by the server, so
that the phone layout's cards are labelled without JavaScript too (static/css/fatia.css; issue 9)."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.test import Client

from tests.conftest import World
from tests.pages import pages_for, seed


class TableLabels(HTMLParser):
    """Collects, for every <table class="table ...">, its header texts and each body cell's data-label."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict[str, list]] = []
        self.in_head = self.in_body = False
        self.header: list[str] | None = None
        self.column = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "table" and "table" in (attributes.get("class") or "").split():
            self.tables.append({"heads": [], "cells": []})
        elif not self.tables:
            return
        elif tag == "thead":
            self.in_head = True
        elif tag == "tbody":
            self.in_body = True
        elif tag == "tr":
            self.column = 0
        elif tag == "th" and self.in_head:
            self.header = []
        elif tag in ("th", "td") and self.in_body:
            if tag == "td":
                heads = self.tables[-1]["heads"]
                expected = heads[self.column] if self.column < len(heads) else None
                self.tables[-1]["cells"].append((expected, attributes.get("data-label")))
            self.column += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "thead":
            self.in_head = False
        elif tag == "tbody":
            self.in_body = False
        elif tag == "th" and self.header is not None:
            self.tables[-1]["heads"].append(" ".join("".join(self.header).split()))
            self.header = None

    def handle_data(self, data: str) -> None:
        if self.header is not None:
            self.header.append(data)


@pytest.mark.parametrize("who", ["mallory", "root"])
def test_every_table_cell_is_labelled_with_its_column(world: World, who: str):
    # given
    ids = seed(world)
    client = Client()
    client.force_login(getattr(world, who))
    checked = 0
    for name, url in pages_for(who, world, ids):
        # when
        response = client.get(url)
        assert response.status_code == 200
        parser = TableLabels()
        parser.feed(response.content.decode())
        # then
        cells = [cell for table in parser.tables for cell in table["cells"]]
        assert (name, [(head, label) for head, label in cells if head != label]) == (name, [])
        checked += len(cells)
    assert checked > 0
