"""The invoices table."""

from __future__ import annotations

from typing import ClassVar

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    operations: ClassVar[list[migrations.operations.base.Operation]] = [
        migrations.CreateModel(
            name="Invoice",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("period", models.DateTimeField()),
                ("run_id", models.CharField(max_length=32)),
                ("attempt", models.IntegerField()),
                ("node", models.CharField(max_length=200)),
            ],
        ),
    ]
