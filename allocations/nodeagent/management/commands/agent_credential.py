"""``manage.py agent_credential issue <node> | revoke <prefix> | list``: node agent credentials from the shell."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from allocations.models import Node
from allocations.nodeagent import services
from allocations.nodeagent.models import AgentCredential
from tenants.errors import DomainError


class Command(BaseCommand):
    help = "Issue, revoke or list node agent credentials. The token is printed once; only its digest is kept."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        issue = sub.add_parser("issue", help="issue a credential for a node (prints the token once)")
        issue.add_argument("node", help="the node's name, as the portal lists it")
        revoke = sub.add_parser("revoke", help="revoke a credential by its prefix")
        revoke.add_argument("prefix")
        sub.add_parser("list", help="list credentials (prefix, node, state)")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "issue":
            node = Node.objects.filter(name=options["node"]).first()
            if node is None:
                raise CommandError(f"No node named {options['node']!r}.")
            credential, token = services.issue_agent_credential(node_id=node.pk, actor=None)
            self.stderr.write(f"Credential {credential.prefix} for node {node.name}; the token is shown only now:")
            self.stdout.write(token)
        elif action == "revoke":
            found = AgentCredential.objects.filter(prefix=options["prefix"]).first()
            if found is None:
                raise CommandError(f"No agent credential with prefix {options['prefix']!r}.")
            try:
                revoked = services.revoke_agent_credential(credential_id=found.pk, actor=None)
            except DomainError as exc:
                raise CommandError(f"Credential {found.prefix} is already revoked.") from exc
            self.stdout.write(f"Revoked credential {revoked.prefix} of node {revoked.node.name}.")
        else:
            for c in AgentCredential.objects.select_related("node").order_by("node__name", "-created_at"):
                state = "revoked" if c.revoked_at else "active"
                used = c.last_used_at.isoformat(timespec="seconds") if c.last_used_at else "never used"
                self.stdout.write(f"{c.prefix}  {c.node.name}  {state}  {used}")
