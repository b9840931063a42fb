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
from pyspark.sql.streaming.query import StreamingQuery

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
    found = _batchlog_cause(t)
    return error_for_code(*found) if found else e


def _batchlog_cause(t: Any) -> tuple[str, str] | None:
    """The code and message of the first ``BatchLogException`` in JVM throwable ``t``'s causes."""
    while t is not None:
        if t.getClass().getName() == "io.batchlog.BatchLogException":
            return str(t.code()), str(t.getMessage())
        t = t.getCause()
    return None


_QUERY_ERRORS: dict[tuple[type, type], type[BaseException]] = {}


def query_error(e: BaseException) -> BaseException:
    """A streaming query's failure ``e`` as the named batchlog error it carries.

    A query stopped by a ``BatchLogException`` (e.g. a ``batchlog`` source whose upstream was
    rewound) fails with pyspark's ``StreamingQueryException``, whose JVM cause chain holds the
    batchlog error. The exception returned is of a class derived from both the batchlog class of
    that code and ``type(e)`` (e.g. ``UpstreamRewoundError`` and ``StreamingQueryException``), with
    ``e``'s state: code catching either still catches it. Any other exception is returned as is.
    """
    from pyspark.errors import StreamingQueryException

    if not isinstance(e, StreamingQueryException) or isinstance(e, BatchLogError):
        return e
    # awaitTermination's exception holds the JVM throwable; query.exception()'s does not (use
    # query_exception(query) instead)
    found = _batchlog_cause(getattr(e, "_origin", None))
    if found is None:
        return e
    named = type(error_for_code(*found))
    key = (named, type(e))
    if key not in _QUERY_ERRORS:
        _QUERY_ERRORS[key] = type(named.__name__, key, {"__module__": named.__module__})
    both = _QUERY_ERRORS[key]
    converted: BaseException = both.__new__(both)
    converted.__dict__.update(e.__dict__)
    converted.args = e.args
    return converted


def query_exception(query: StreamingQuery) -> BaseException | None:
    """``query.exception()``, as the named batchlog error it carries (see :func:`query_error`).

    pyspark's ``query.exception()`` keeps only the text of the JVM error's causes, so the error is
    built here from the query's JVM exception (a Spark Connect query: its ``exception()``).
    """
    jsq = getattr(query, "_jsq", None)
    if jsq is None:
        return query.exception()
    je = jsq.exception()
    if not je.isDefined():
        return None
    from pyspark.errors.exceptions.captured import StreamingQueryException as Captured

    return query_error(Captured(origin=je.get()))


def await_query(query: StreamingQuery, timeout: int | None = None) -> bool | None:
    """``query.awaitTermination(timeout)``, raising a failure as its named batchlog error.

    See :func:`query_error`: an ``UPSTREAM_REWOUND`` failure is raised as an exception that is both
    an ``UpstreamRewoundError`` and a ``StreamingQueryException``.
    """
    from pyspark.errors import StreamingQueryException

    try:
        if timeout is None:
            return query.awaitTermination()
        return query.awaitTermination(timeout)
    except StreamingQueryException as e:
        raise query_error(e) from None
