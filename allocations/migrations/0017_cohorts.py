# Cohorts, borrowing and reclaim (issue 15): the contract of session 8.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("allocations", "0016_request_namespace"),
    ]

    operations = [
        migrations.AddField(
            model_name="allocation",
            name="borrowed_compute_slices",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="allocation",
            name="borrowed_memory_slices",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="allocation",
            name="reclaim_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="allocation",
            name="reclaim_notice_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="allocation",
            name="reclaimed_for",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="allocations.allocation",
            ),
        ),
        migrations.AddField(
            model_name="quota",
            name="borrowing_compute_limit",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="quota",
            name="borrowing_memory_limit",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="quota",
            name="lending_compute_limit",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="quota",
            name="lending_memory_limit",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="Cohort",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=100)),
                ("reclaim_grace_minutes", models.PositiveIntegerField(default=30)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "pool",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="cohorts", to="allocations.nodepool"
                    ),
                ),
            ],
            options={
                "ordering": ["pool__name", "name"],
            },
        ),
        migrations.AddField(
            model_name="quota",
            name="cohort",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="quotas",
                to="allocations.cohort",
            ),
        ),
        # Reclaim notices to borrowers (issue 15): a new kind of inbox message.
        migrations.AlterField(
            model_name="notification",
            name="kind",
            field=models.CharField(
                choices=[
                    ("request_pending", "A request waits for approval"),
                    ("request_decided", "A request was decided"),
                    ("extension_pending", "A lease extension waits for approval"),
                    ("extension_decided", "A lease extension was decided"),
                    ("lease_expiring", "A lease ends soon"),
                    ("idle_reclaim", "Idle slices will be released"),
                    ("quota_change_decided", "A quota change was decided"),
                    ("allocation_move", "A slice moves to make room"),
                    ("borrow_reclaim", "Borrowed slices are taken back"),
                ],
                max_length=32,
            ),
        ),
        migrations.AddConstraint(
            model_name="cohort",
            constraint=models.UniqueConstraint(
                fields=("pool", "name"),
                name="cohort_unique_pool_name",
                violation_error_message="This pool already has a cohort with this name.",
            ),
        ),
    ]
