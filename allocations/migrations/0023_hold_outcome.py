"""How a hold ended, and when (issue 14): `Allocation.hold_outcome` and `hold_ended_at`, which the hold policy
prices the pool's next holds by (allocations/admission/outcomes.py). Holds that ended before have none: their
pool's price starts from its prior. Indexes for the per-decision read: a pool's requests by age, its ended holds."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("allocations", "0022_allocation_held"),
    ]

    operations = [
        migrations.AddField(
            model_name="allocation",
            name="hold_ended_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="allocation",
            name="hold_outcome",
            field=models.CharField(
                blank=True,
                choices=[
                    ("placed", "placed on a retry"),
                    ("forced", "placed forced at its deadline"),
                    ("lost", "no longer fit: waits for room"),
                ],
                db_default="",
                default="",
                max_length=8,
            ),
        ),
        migrations.AddIndex(
            model_name="allocation",
            index=models.Index(fields=["pool", "created_at"], name="allocation_pool_recent_idx"),
        ),
        migrations.AddIndex(
            model_name="allocation",
            index=models.Index(
                condition=models.Q(("hold_ended_at__isnull", False)),
                fields=["pool", "hold_ended_at"],
                name="allocation_pool_hold_end_idx",
            ),
        ),
    ]
