"""docs/configuration.md is generated from the SQLConf entries (tests/docs_support.py): the page
checked in must be exactly what the code's entries render, so a key, default or description
changed in BatchLogConf without regenerating the page fails here."""

from __future__ import annotations

import difflib

from docs_support import PAGE, REGENERATE, render
from pyspark.sql import SparkSession


def test_the_configuration_page_is_generated_from_the_sqlconf_entries(spark: SparkSession) -> None:
    expected = render(spark)
    actual = PAGE.read_text() if PAGE.exists() else ""
    diff = "".join(
        difflib.unified_diff(
            actual.splitlines(keepends=True),
            expected.splitlines(keepends=True),
            "docs/configuration.md (checked in)",
            "docs/configuration.md (from the SQLConf entries)",
        )
    )
    assert actual == expected, f"docs/configuration.md is stale: run `{REGENERATE}`\n{diff}"
    # every key batchlog registers has its row
    for key in ("spark.batchlog.writer.leaseTimeout", "spark.batchlog.retention.batches"):
        assert f"| `{key}` |" in actual
