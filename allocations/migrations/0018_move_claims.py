# Issue 14, compaction on the Kubernetes backend: a move replaces the claim and holder pod under new names
# (Allocation.claim_generation), and a move whose new claim failed or landed elsewhere is FAILED with a reason.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("allocations", "0017_cohorts"),
    ]

    operations = [
        migrations.AddField(
            model_name="allocation",
            name="claim_generation",
            field=models.PositiveSmallIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="slicemove",
            name="reason",
            field=models.CharField(blank=True, db_default="", default="", max_length=500),
        ),
        migrations.AddField(
            model_name="slicemove",
            name="claim_generation",
            field=models.PositiveSmallIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="slicemove",
            name="step",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("notified", "Owner told"),
                    ("placed", "Placed at the destination"),
                    ("done", "Done"),
                    ("skipped", "Skipped"),
                    ("failed", "Failed"),
                ],
                default="pending",
                max_length=16,
            ),
        ),
    ]
