"""``pkb run --junitxml PATH``: the run's records as a JUnit XML report for CI systems.

One ``<testcase>`` per job, named like pytest names its tests (``classname``:
``<backend>.<problem>``; ``name``: ``<solution>[W<n>-<size>-<dtype>]``; ``time``:
the job's seconds), with a child element by verdict:

=============================================  ===========================================
verdict                                        element
=============================================  ===========================================
``pass``                                       none
``fail``, ``flagged``                          ``<failure type="VERDICT" message="REASON">``
``error``, ``compile-error``, ``timeout``,      ``<error type="VERDICT" message="REASON">``
``crash``
``unsupported``, ``cancelled``                 ``<skipped type="VERDICT" message="REASON">``
=============================================  ===========================================

Timed jobs carry ``<properties>``: ``reference_ms``, ``solution_ms``, ``speedup``.
"""
from __future__ import annotations

import datetime as _dt
import platform
import xml.etree.ElementTree as ET
from pathlib import Path

from pkb_core.contracts.record import Record
from pkb_core.plugin.hookspecs import hookimpl
from pkb_core.contracts.verdict import Verdict

FAILURES = (Verdict.FAIL, Verdict.FLAGGED)
ERRORS = (Verdict.ERROR, Verdict.COMPILE_ERROR, Verdict.TIMEOUT, Verdict.CRASH)
SKIPPED = (Verdict.UNSUPPORTED, Verdict.CANCELLED, Verdict.UNCHECKED)


def testcase_name(record: dict) -> str:
    return f"{record.solution}[W{record.world_size}-{record.size}-{record.dtype}]"


def junit_xml(records: list[Record], suite: str = "pkb", seconds: float | None = None) -> ET.ElementTree:
    """The XML tree of ``records`` (one testsuite)."""
    counts = {"failures": 0, "errors": 0, "skipped": 0}
    cases = []
    for record in records:
        case = ET.Element("testcase", classname=f"{record.backend}.{record.problem}",
                          name=testcase_name(record), time=f"{record.seconds or 0:.3f}")
        timed = {k: getattr(record, k) for k in ("reference_ms", "solution_ms", "speedup") if getattr(record, k) is not None}
        if timed:
            props = ET.SubElement(case, "properties")
            for key, value in timed.items():
                ET.SubElement(props, "property", name=key, value=f"{value:.6g}")
        verdict, reason = record.verdict.value, record.reason
        for tag, verdicts, count in (("failure", FAILURES, "failures"), ("error", ERRORS, "errors"),
                                     ("skipped", SKIPPED, "skipped")):
            if verdict in verdicts:
                child = ET.SubElement(case, tag, type=verdict, message=f"{verdict}: {reason}" if reason else verdict)
                if reason and tag != "skipped":
                    child.text = reason
                counts[count] += 1
        cases.append(case)
    total = sum(record.seconds or 0 for record in records) if seconds is None else seconds
    root = ET.Element("testsuites")
    suite_el = ET.SubElement(root, "testsuite", name=suite, tests=str(len(cases)),
                             **{k: str(v) for k, v in counts.items()}, time=f"{total:.3f}",
                             timestamp=_dt.datetime.now().isoformat(timespec="seconds"), hostname=platform.node())
    suite_el.extend(cases)
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(path, records: list[Record], suite: str = "pkb", seconds: float | None = None) -> Path:
    """Write the report to ``path`` (its folder is created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    junit_xml(records, suite, seconds).write(path, encoding="utf-8", xml_declaration=True)
    return path


class JunitReport:
    """``pkb run --junitxml``: an observer of the run (``pkb_report_job``) that collects
    its records and writes the report at the end, after the records of the jobs an
    earlier run recorded (``earlier``)."""

    def __init__(self, path, suite: str = "pkb", earlier=()):
        self.path, self.suite, self.records = Path(path), suite, list(earlier)

    @hookimpl
    def pkb_report_job(self, record: Record) -> None:
        self.records.append(record)

    def write(self, seconds: float | None = None) -> Path:
        return write_junit(self.path, self.records, self.suite, seconds)
