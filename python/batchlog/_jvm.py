"""Reaching the JVM side of batchlog, in one place.

Everything batchlog does happens in the JVM (``io.batchlog``); this module finds the JVM objects
through ``spark._jvm`` / ``spark._jsparkSession`` and turns JVM errors into Python exceptions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import SparkSession

from batchlog.errors import BatchLogError, error_for_code


def jvm(spark: SparkSession) -> Any:
    """The py4j view of the JVM behind ``spark``."""
    return spark._jvm


def jsession(spark: SparkSession) -> Any:
    """The JVM ``SparkSession`` behind ``spark``."""
    return spark._jsparkSession


def batchlog_package(spark: SparkSession) -> Any:
    """``io.batchlog`` in the JVM, or a clear error if the jar is not on the driver's class path."""
    pkg = jvm(spark).io.batchlog
    try:
        pkg.BatchLogConf.CommitProtocolClass()
    except Py4JJavaError:
        raise
    except Exception as e:  # py4j answers a missing class with a JavaPackage that fails on call
        raise BatchLogError(
            "the batchlog jar is not on this Spark driver's class path. Start Spark with "
            "batchlog.configure(SparkSession.builder), or --jars batchlog.jar_path() (the jar for "
            "this pyspark), or --packages io.batchlog:batchlog-spark-<line>_<scala>:<version>."
        ) from e
    return pkg


@contextmanager
def jvm_errors() -> Iterator[None]:
    """Re-raises a JVM ``io.batchlog.BatchLogException`` as the matching Python exception: from a
    py4j call, or at the root of an error pyspark already converted (say a
    ``StreamingQueryException`` from ``awaitTermination``, whose JVM error is its ``_origin``)."""
    try:
        yield
    except Py4JJavaError as e:
        raise _convert(e.java_exception, e) from None
    except CapturedException as e:
        converted = _convert(getattr(e, "_origin", None), e)
        if converted is e:
            raise
        raise converted from e


def _convert(t: Any, e: Exception) -> Exception:
    """The batchlog error among the causes of the JVM throwable ``t``, else ``e``."""
    while t is not None:
        if t.getClass().getName() == "io.batchlog.BatchLogException":
            return error_for_code(str(t.code()), str(t.getMessage()))
        t = t.getCause()
    return e
