"""Reaching batchlog through SQL, for sessions without a JVM gateway (Spark Connect).

A Spark Connect session (``SparkSession.builder.remote(...)``) has no py4j gateway, so the facade
cannot call ``io.batchlog.BatchLog``. The server's ``io.batchlog.sql.BatchLogExtensions``
(``spark.sql.extensions``) answers the same operations in SQL: ``BATCHLOG <op> ...`` statements
return the JVM's report as JSON (read by :mod:`batchlog.reports`, as over py4j), and table
functions (``batchlog_files`` ...) read the log. Errors carry their code (``[BATCHLOG.<CODE>]``),
mapped back to the Python exception class here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import DataFrame, Row, SparkSession

from batchlog._names import EXTENSIONS_CLASS  # what the Connect server needs for batchlog's SQL
from batchlog.errors import BatchLogError, error_for_code

_CODE = re.compile(r"\[BATCHLOG\.([A-Z_]+)\]\s*")


def is_remote(spark: SparkSession) -> bool:
    """True for a session without a JVM gateway here (Spark Connect)."""
    return not hasattr(spark, "_jsparkSession")


def literal(value: str) -> str:
    """``value`` as a quoted SQL string (both Spark's parser and ``BATCHLOG`` statements)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@contextmanager
def sql_errors() -> Iterator[None]:
    """Re-raises a server-side batchlog error as the matching Python exception."""
    try:
        yield
    except BatchLogError:
        raise
    except Exception as e:
        text = str(e)
        m = _CODE.search(text)
        if m is None:
            if "BatchLogExtensions" not in text and ("BATCHLOG" in text or "batchlog_" in text):
                raise BatchLogError(
                    "the Spark Connect server does not know batchlog's SQL: start it with the "
                    "batchlog jar (--jars; Spark loads its SQL from the jar, or name "
                    f"{EXTENSIONS_CLASS} in spark.sql.extensions). Server said: "
                    f"{text.splitlines()[0] if text else e!r}"
                ) from e
            raise
        message = text[m.end() :].split("\n\nJVM stacktrace:")[0].strip()
        raise error_for_code(m.group(1), message) from None


def statement(spark: SparkSession, sql: str) -> str:
    """Runs a ``BATCHLOG`` statement; its report, the JSON document of ``ReportJson``."""
    with sql_errors():
        rows = spark.sql(sql).collect()
    return str(rows[0]["report"])


def table(spark: SparkSession, function: str, *args: str | int) -> list[Row]:
    """The rows of a batchlog table function."""
    df = frame(spark, function, *args)
    with sql_errors():
        return df.collect()


def frame(spark: SparkSession, function: str, *args: str | int) -> DataFrame:
    """A batchlog table function as a DataFrame (errors surface when it runs)."""
    rendered = ", ".join(literal(a) if isinstance(a, str) else str(int(a)) for a in args)
    with sql_errors():
        return spark.sql(f"SELECT * FROM {function}({rendered})")
