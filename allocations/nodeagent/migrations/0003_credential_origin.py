# The `chart` package's migration (issue 12): bootstrapped credentials are told apart from admins' ones.
# Numbered 0003 because `agentcmd` adds 0002 in the same app; at the merge this one comes after it.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("nodeagent", "0002_agent_commands"),
    ]

    operations = [
        migrations.AddField(
            model_name="agentcredential",
            name="origin",
            field=models.CharField(
                choices=[("admin", "Issued by an admin"), ("bootstrap", "Bootstrapped from a ServiceAccount token")],
                default="admin",
                max_length=16,
            ),
        ),
    ]
