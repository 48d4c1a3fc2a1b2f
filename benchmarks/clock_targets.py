#!/usr/bin/env python3
"""Issue 53's targets 6 and 7, read from records: the ruler against its own events, and a
backend's samples against their own events in the same jobs.

Usage::

    python3 benchmarks/clock_targets.py ruler EVENTS.txt RULER/records.jsonl
    python3 benchmarks/clock_targets.py samples SAMPLES/records.jsonl

``ruler``: ``EVENTS.txt`` is what ``benchmarks/ruler_events.py`` printed on the same machine in
the same call; each record is a ``benchmarks/ruler/1_allreduce_sleep_<cycles>.py`` job against
the reference (window mode). pkb's reading of a delay is the ruler's per-call time less the
reference's (``solution_ms - reference_ms``); it must lie within max(0.75 us, 3 %) of the delay's
own events.

``samples``: window-mode jobs. The window speedup is pkb's reading; the ratio of the sides' own
events is, where the jobs ran with ``PKB_CALL_EVENTS=on``, each group's events around its windowed
calls (``window_diagnostics.<side>.call_event_us``) less the harness batch's (its placing and
barrier without a call), both ranks' calls starting together at the gate; else latency mode's
``self_reported_ms`` (jobs run with ``--timing-mode window,latency``: each process's events around
each call behind a device hold, which on 2xH200 held a rank's wait for its peer: ratios of 0.26-6.9,
docs/benchmarks/2026-11-29-h200x2-clock-targets.md). pkb's speedup must lie within 10 % of it.
Beside it, ``beyond harness``: the record's ratio of what each side's calls add to pkb's harness
(``stats.modes.window.beyond_harness_speedup``, a diagnostic), counted against the same 10 %; and,
where the events are the groups' own, the difference the judge's windows read (the reference's
median window less the candidate's) against the events' difference, counted against the ruler's
max(0.75 us, 3 %).
"""
from __future__ import annotations

import json
import re
import sys

RULER_US, RULER_SHARE = 0.75, 0.03
SAMPLES_SHARE = 0.10


def own_events(path: str) -> dict[int, float]:
    """``cycles -> us`` from ruler_events.py's table."""
    found = {}
    for line in open(path):
        fields = line.split()
        if len(fields) == 4 and all(re.fullmatch(r"[0-9.]+", f) for f in fields):
            found[int(fields[0])] = float(fields[1])
    return found


def records(path: str):
    with open(path) as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def ruler(events_path: str, paths: list[str]) -> int:
    events = own_events(events_path)
    within = total = 0
    print(f"{'size':>10} {'cycles':>7} {'events us':>9} {'pkb us':>8} {'error':>8}  within")
    for path in paths:
        for record in records(path):
            match = re.search(r"sleep_(\d+)\.py$", record.get("solution") or "")
            if not match or record.get("verdict") != "pass" or int(match.group(1)) not in events:
                continue
            delay = events[int(match.group(1))]
            read = (record["solution_ms"] - record["reference_ms"]) * 1e3
            ok = abs(read - delay) <= max(RULER_US, RULER_SHARE * delay)
            within, total = within + ok, total + 1
            print(f"{record['size'].split(':')[-1]:>10} {match.group(1):>7} {delay:9.3f} {read:8.2f} "
                  f"{read - delay:+8.2f}  {'yes' if ok else 'no'}")
    print(f"within max({RULER_US} us, {RULER_SHARE:.0%}): {within} of {total}")
    return 0 if total else 1


def own_ratio(window: dict, latency: dict) -> float | None:
    """The reference's time a call over the candidate's by their own events (see the module's
    docstring), or None where the record has neither."""
    events = {side: d.get("call_event_us") for side, d in (window.get("window_diagnostics") or {}).items()}
    if all(isinstance(events.get(s), (int, float)) for s in ("reference", "candidate", "harness")):
        call = {s: events[s] - events["harness"] for s in ("reference", "candidate")}
        return call["reference"] / call["candidate"] if call["candidate"] > 0 < call["reference"] else None
    own = latency.get("self_reported_ms") or {}
    return own["reference"] / own["candidate"] if own.get("candidate") and own.get("reference") else None


def own_difference(window: dict) -> tuple[float, float] | None:
    """``(windows', events')`` difference of the reference's time a call less the candidate's (us),
    where the groups' own events are in the record (``PKB_CALL_EVENTS=on``); else None."""
    events = {side: d.get("call_event_us") for side, d in (window.get("window_diagnostics") or {}).items()}
    windows = window.get("windows_us") or {}
    if not all(isinstance(v.get(s), (int, float)) for v in (events, windows) for s in ("reference", "candidate")):
        return None
    return windows["reference"] - windows["candidate"], events["reference"] - events["candidate"]


def samples(paths: list[str]) -> int:
    counts = {"speedup": [0, 0], "beyond harness": [0, 0], "difference": [0, 0]}

    def count(name: str, ok: bool) -> str:
        counts[name][0] += ok
        counts[name][1] += 1
        return "yes" if ok else "no"

    print(f"{'problem':<18} {'size':>10} {'solution':<28} {'window':>7} {'own events':>10} {'ratio':>6}  within"
          f"  {'beyond harness':>14}  within  {'diff us':>8} {'events':>7}  within")
    for path in paths:
        for record in records(path):
            modes = (record.get("stats") or {}).get("modes", {})
            window = modes.get("window") or {}
            pkb = (window.get("speedup") or {}).get("value")
            theirs = own_ratio(window, modes.get("latency") or {})
            if record.get("verdict") != "pass" or pkb is None or not theirs:
                continue
            line = (f"{record['problem']:<18} {record['size'].split(':')[-1]:>10} "
                    f"{record['solution'].rsplit('/', 1)[-1]:<28} {pkb:7.3f} {theirs:10.3f} {pkb / theirs:6.2f}  "
                    f"{count('speedup', abs(pkb / theirs - 1) <= SAMPLES_SHARE):<6}")
            beyond = (window.get("beyond_harness_speedup") or {}).get("value")
            line += f"  {'-' if beyond is None else round(beyond, 3)!s:>14}  " + \
                (f"{'-':<6}" if beyond is None else f"{count('beyond harness', abs(beyond / theirs - 1) <= SAMPLES_SHARE):<6}")
            difference = own_difference(window)
            if difference is not None:
                read, events = difference
                ok = abs(read - events) <= max(RULER_US, RULER_SHARE * abs(events))
                line += f"  {read:+8.2f} {events:+7.2f}  {count('difference', ok)}"
            print(line)
    print(f"speedup within {SAMPLES_SHARE:.0%} of their own events' ratio: {counts['speedup'][0]} of "
          f"{counts['speedup'][1]}; the beyond-harness ratio: {counts['beyond harness'][0]} of "
          f"{counts['beyond harness'][1]}; the windows' difference within max({RULER_US} us, {RULER_SHARE:.0%}) "
          f"of the events': {counts['difference'][0]} of {counts['difference'][1]}")
    return 0 if counts["speedup"][1] else 1


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "ruler":
        return ruler(argv[1], argv[2:])
    if len(argv) >= 2 and argv[0] == "samples":
        return samples(argv[1:])
    print(__doc__.split("\n\n")[2].strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
