"""The CLI's fixtures (a live server, API tokens, a private config), shared with tests/cli."""

from tests.cli.test_cli import fatia, private_config, server, tokens  # noqa: F401
