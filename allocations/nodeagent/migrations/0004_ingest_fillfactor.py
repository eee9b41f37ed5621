"""Room on every page for HOT updates of the rows ingest rewrites each sample (issue 12, package `ingest`).

Every telemetry sample rewrites each device's DeviceState row and the node's AgentStatus row. On full pages
(PostgreSQL's default fillfactor of 100) most of those updates land on another page and add an entry to every
index; with half of each page free they stay on their page as heap-only tuples and touch no index. Measured: the
server's CPU per 64-row update from 2.0 to 1.2 ms (docs/benchmarks.md, "Node agent and telemetry ingest").

Existing pages keep their fill until rewritten (`VACUUM FULL nodeagent_devicestate, nodeagent_agentstatus`, or
simply over time as rows come and go); new pages use the setting. PostgreSQL only: elsewhere (the demo's SQLite)
this does nothing.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

TABLES = ("nodeagent_devicestate", "nodeagent_agentstatus")


def _fillfactor(value: int) -> Any:
    def apply(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        for table in TABLES:
            schema_editor.execute(f"ALTER TABLE {schema_editor.quote_name(table)} SET (fillfactor = {int(value)})")

    return apply


class Migration(migrations.Migration):
    dependencies = [("nodeagent", "0003_credential_origin")]

    operations = [migrations.RunPython(_fillfactor(50), _fillfactor(100), elidable=False)]
