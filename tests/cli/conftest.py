"""The CLI fixtures of test_cli.py (a live server, API tokens, `fatia(...)`), shared with the other CLI tests."""

from tests.cli.test_cli import fatia, private_config, server, tokens  # noqa: F401 (pytest finds fixtures by name)
