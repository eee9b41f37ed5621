"""`Allocation.held` (issue 14): whether a queued request waits because its pool's admission held it, as a field
instead of the marker phrase in its status message that told it before. Rows queued with that phrase are marked
held; then only a queued request may be held (a constraint)."""

from django.db import migrations, models
from django.db.models import Q

# The phrase every held request's message carried (allocations/admission/hold.py HELD_REASON), written out here:
# a migration must not change when the code's constant does.
HELD_REASON = "held to keep room for larger requests"


def mark_held(apps, schema_editor):
    allocation = apps.get_model("allocations", "Allocation")
    allocation.objects.filter(status="queued", status_message__contains=HELD_REASON).update(held=True)


class Migration(migrations.Migration):
    dependencies = [
        ("allocations", "0021_admission_hold"),
    ]

    operations = [
        migrations.AddField(
            model_name="allocation",
            name="held",
            field=models.BooleanField(db_default=False, default=False),
        ),
        # Backwards: the field goes with its column; the phrase is still in the messages.
        migrations.RunPython(mark_held, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="allocation",
            constraint=models.CheckConstraint(
                condition=Q(held=False) | Q(status="queued"),
                name="allocation_held_only_queued",
                violation_error_message="Only a queued request can be held.",
            ),
        ),
    ]
