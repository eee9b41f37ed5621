"""The node agent's browser tests reuse the Playwright fixtures of tests/browser (system Chromium)."""

from __future__ import annotations

from tests.browser.conftest import browser, screenshot, signed_in

__all__ = ["browser", "screenshot", "signed_in"]
