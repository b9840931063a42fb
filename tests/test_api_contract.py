"""The facts Python shares with the JVM agree: error codes, the commit-protocol key, and the
fields of every plan and report (``io.batchlog.ops`` case classes vs ``batchlog.reports``)."""

from __future__ import annotations

import dataclasses

import batchlog
import pytest
from batchlog import reports
from batchlog.errors import ERRORS_BY_CODE
from batchlog.reports import _camel
from pyspark.sql import SparkSession


def test_every_jvm_error_code_has_one_python_exception(spark: SparkSession) -> None:
    jvm = spark._jvm
    codes = list(
        jvm.scala.jdk.javaapi.CollectionConverters.asJava(  # type: ignore[union-attr]
            jvm.io.batchlog.BatchLogException.Codes()  # type: ignore[union-attr]
        )
    )
    assert sorted(ERRORS_BY_CODE) == sorted(codes)
    assert all(cls.code == code for code, cls in ERRORS_BY_CODE.items())


def test_commit_protocol_key_and_class_match_the_jvm(spark: SparkSession) -> None:
    conf = spark._jvm.io.batchlog.BatchLogConf  # type: ignore[union-attr]
    assert batchlog.COMMIT_PROTOCOL_KEY == conf.CommitProtocolKey()
    assert batchlog.COMMIT_PROTOCOL_CLASS == conf.CommitProtocolClass()


def test_extensions_key_and_class_match_the_jvm(spark: SparkSession) -> None:
    ext = spark._jvm.io.batchlog.sql.BatchLogExtensions  # type: ignore[union-attr]
    assert batchlog.EXTENSIONS_KEY == ext.Key()
    assert batchlog.EXTENSIONS_CLASS == ext.ClassName()
    assert batchlog.EXTENSIONS_CLASS in spark.conf.get(batchlog.EXTENSIONS_KEY, "")


REPORT_TYPES = [
    t
    for t in vars(reports).values()
    if isinstance(t, type) and issubclass(t, reports.Report) and t is not reports.Report
]


@pytest.mark.parametrize("cls", REPORT_TYPES, ids=lambda t: t.__name__)
def test_report_fields_match_the_jvm_case_class(spark: SparkSession, cls: type) -> None:
    # py4j finds the class through the class loader that holds the jar (spark.jars).
    jclass = getattr(spark._jvm.io.batchlog.ops, cls.__name__)._java_lang_class  # type: ignore[union-attr]
    # A case class's constructor parameters are its fields, in order.
    (ctor,) = [c for c in jclass.getConstructors()]
    jvm_fields = [p.getName() for p in ctor.getParameters()]
    if jvm_fields and jvm_fields[0] == "arg0":  # compiled without -parameters: use the fields
        jvm_fields = [
            f.getName()
            for f in jclass.getDeclaredFields()
            if not spark._jvm.java.lang.reflect.Modifier.isStatic(f.getModifiers())  # type: ignore[union-attr]
        ]
    assert [_camel(f.name) for f in dataclasses.fields(cls)] == jvm_fields


def test_reports_keep_read_access_by_json_key() -> None:
    r = reports.BatchFiles(batch_id=7, files=2, bytes=10)
    assert (r["batchId"], r.get("files"), r.get("nope", -1)) == (7, 2, -1)
    assert r.to_dict() == {"batchId": 7, "files": 2, "bytes": 10}
    with pytest.raises(KeyError):
        r["nope"]
    with pytest.raises(ValueError, match="different versions"):
        reports.from_dict(reports.BatchFiles, {"batchId": 7, "files": 2})


def test_every_public_name_has_a_docstring() -> None:
    """The Python reference (docs/reference/python.md) is generated from the docstrings: every
    public name of ``batchlog`` and ``batchlog.arrow``, and every public method of their classes,
    has one."""
    import inspect

    from batchlog import arrow

    missing = []
    for module, names in ((batchlog, batchlog.__all__), (arrow, arrow.__all__)):
        for name in names:
            obj = getattr(module, name)
            if isinstance(obj, str) or inspect.ismodule(obj):
                continue
            members = vars(obj).items() if inspect.isclass(obj) else ()
            for label, o in [(name, obj)] + [
                (f"{name}.{m}", v) for m, v in members if not m.startswith("_") and callable(v)
            ]:
                if not inspect.getdoc(o):
                    missing.append(f"{module.__name__}.{label}")
    assert missing == []
