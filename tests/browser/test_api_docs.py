"""The interactive API docs work under the portal's Content-Security-Policy (issue 9): no script or style of theirs
is refused, and they show the API."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import SLOW_PAGE_MS
from tests.conftest import World


@pytest.mark.parametrize(("path", "name"), [("/api/v1/docs/", "swagger"), ("/api/v1/redoc/", "redoc")])
def test_the_api_docs_render_without_csp_violations(world: World, signed_in, screenshot, path, name):
    # given
    page = signed_in(world.alice)
    page.set_default_timeout(SLOW_PAGE_MS)  # goto and the full-page screenshot
    refused: list[str] = []
    page.on(
        "console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None
    )
    # when
    page.goto(path)
    # then
    expect(page.get_by_text("Fatia API").first).to_be_visible(timeout=SLOW_PAGE_MS)
    expect(page.get_by_text("/api/v1/allocations/").first).to_be_attached(timeout=SLOW_PAGE_MS)
    page.wait_for_timeout(500)  # late violations (workers, lazily loaded styles) are reported asynchronously
    assert refused == []
    screenshot(page, f"api-docs-{name}")
