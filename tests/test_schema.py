"""One schema: docs/results.md documents every record field and status that the harness writes."""

from __future__ import annotations

from pathlib import Path

from scaling.report.columns import SCALING_FIELDS
from scaling.schema import ALLREDUCE_FIELDS, RECORD_FIELDS, STATUSES

README = (Path(__file__).resolve().parents[1] / "docs" / "results.md").read_text()


def test_the_readme_lists_every_record_field_and_status():
    for name in [*RECORD_FIELDS, *SCALING_FIELDS, *STATUSES, *ALLREDUCE_FIELDS]:
        assert f"`{name}`" in README, name
