"""Charts of a run directory (matplotlib, PNG and SVG of each).

* ``speedup``: speedup of every correct, timed solution, grouped and coloured by
  category, log scale, a line at 1x; each bar carries its 95 % interval (the
  record's ``speedup_ci``) as an error bar, and a bar whose interval contains 1.0
  (``no measurable difference``, as ``pkb run`` reads it) is grey and hatched, so
  it never looks like a win or a loss; a bar whose speedup a launcher clock read (a record
  headed by ``latency`` or ``graph``: a diagnostic, never claimed, docs/trust.md) is hollow with
  a dashed edge, and the legend says so;
* ``sol``: % of the speed-of-light floor reached by the reference and the
  solution, per problem (log scale, a line at 100 %);
* ``rounds``: for a refinement loop (``pkb generate --rounds``), pass rate and fast_p
  after each round (:mod:`pkb_core.results.rounds`); the speedup and SOL charts then
  show each problem's best round;
* ``sweep-<problem>`` (``-W<n>-<dtype>`` added when a run swept it several
  ways): for ``pkb bench`` runs (size ``sweep:<bytes>``), time, busbw and the
  speedup over the reference against message size, one line per solution (the
  symm_mem baselines among them) and, for time and busbw, for the reference (named
  by its library: NCCL on GPU, gloo in CPU mode); solid for eager (latency mode),
  dashed for CUDA-graph mode, dash-dotted for window mode (the judge's device
  clock); each speedup with its 95 % interval, a line at 1x, those of the launcher-clock
  modes faint and labelled as that clock's (diagnostics: :func:`pkb_core.contracts.modes.claimable`).

Figures of CPU-mode records (``clock: host``) say ``host timing (CPU mode)`` in
their title: those times are the host's, not GPU kernels'.

matplotlib is optional: it is imported inside :func:`write_plots`, which
raises one clear :class:`PkbError` when it is missing.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from pkb_core.contracts.modes import claimable
from pkb_core.contracts.timing import FASTER, SLOWER
from pkb_core.errors import PkbError
from pkb_core.results.report import host_timed, is_correct, is_sweep, launcher_timed, solution_name, sweep_bytes
from pkb_core.results.rounds import by_round, final_states, is_loop

#: Timing mode -> legend word and line style.
MODE_STYLE = {"window": ("window", "-."), "latency": ("eager", "-"), "graph": ("graph", "--"),
              "back-to-back": ("back-to-back", ":")}
FORMATS = ("png", "svg")
#: The title's mark on a figure of host timings.
HOST_LABEL = "host timing (CPU mode)"
#: How a speedup whose 95 % interval contains 1.0 is drawn (and its legend entry).
SAME_STYLE = {"color": "0.82", "hatch": "//", "edgecolor": "0.45"}
SAME_LABEL = "no measurable difference (95 % interval holds 1.0)"
#: How a speedup read by a launcher clock is drawn (and its legend entry, and its sweep lines' words).
LAUNCHER_STYLE = {"fill": False, "linestyle": "--", "linewidth": 1.2}
LAUNCHER_LABEL = "launcher clock: a diagnostic, never claimed"
LAUNCHER_WORDS = "launcher clock, not claimed"


def write_plots(records, out_dir) -> list[Path]:
    """Write every chart that the records support; return the files written."""
    try:
        import matplotlib
    except ImportError:
        raise PkbError("plots need matplotlib: pip install matplotlib") from None
    matplotlib.use("Agg")  # files only; never open a window
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = {}
    presets = [r for r in records if not is_sweep(r)]
    if is_loop(records):  # a refinement loop: the curve by round, and each problem's best round
        figures["rounds"] = _rounds_figure(plt, by_round(records))
        presets = final_states(presets)
    speedup_rows = [r for r in presets if is_correct(r) and r.speedup]
    if speedup_rows:
        figures["speedup"] = _speedup_figure(plt, speedup_rows)
    sol_rows = [r for r in presets if is_correct(r) and r.sol and r.sol.solution_fraction]
    if sol_rows:
        figures["sol"] = _sol_figure(plt, sol_rows)
    sweeps: dict[tuple, list[dict]] = {}
    for r in records:
        if is_sweep(r) and r.stats:
            sweeps.setdefault((r.problem, r.world_size, r.dtype), []).append(r)
    problems = [key[0] for key in sweeps]
    for (problem, world_size, dtype), rows in sorted(sweeps.items(), key=lambda item: tuple(map(str, item[0]))):
        # One chart per problem; runs that swept it at several world sizes or dtypes get one per combination.
        name = f"sweep-{problem}" if problems.count(problem) == 1 else f"sweep-{problem}-W{world_size}-{dtype}"
        figures[name] = _sweep_figure(plt, problem, rows)
    if not figures:
        raise PkbError("nothing to plot: no correct, timed records (run with --measure-perf)")
    written = []
    for name, fig in figures.items():
        for fmt in FORMATS:
            path = out_dir / f"{name}.{fmt}"
            fig.savefig(path, format=fmt, dpi=120, bbox_inches="tight")
            written.append(path)
        plt.close(fig)
    return written


def _labels(rows) -> list[str]:
    """Bar labels: the problem, plus the solution when a problem has several bars."""
    per_problem: dict[str, int] = {}
    for r in rows:
        per_problem[r.problem] = per_problem.get(r.problem, 0) + 1
    sizes = {(r.size, r.world_size) for r in rows}
    labels = []
    for r in rows:
        label = r.problem
        if per_problem[r.problem] > 1:
            label += f"\n{solution_name(r)}"
        if len(sizes) > 1:
            label += f"\n{r.size} W{r.world_size}"
        labels.append(label)
    return labels


def _ordered(rows):
    return sorted(rows, key=lambda r: (str(r.category), r.problem_id or 0, solution_name(r),
                                       str(r.size), r.world_size or 0))


def _category_colours(plt, rows) -> dict:
    cmap = plt.get_cmap("tab10")
    names = sorted({str(r.category) for r in rows})
    return {name: cmap(i % 10) for i, name in enumerate(names)}


def _bar_axes(plt, count, title, ylabel):
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * count + 2), 4.8))
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.set_yscale("log")
    ax.grid(axis="y", which="both", alpha=0.3)
    return fig, ax


def _speedup_figure(plt, rows):
    """Bars of the speedups with their 95 % intervals; a bar that reads no measurable difference is grey."""
    rows = _ordered(rows)
    colours = _category_colours(plt, rows)
    fig, ax = _bar_axes(plt, len(rows), _titled("Speedup over the reference (correct solutions)", rows),
                        "speedup (x, log scale, 95 % interval)")
    measured = [_measured(r) for r in rows]
    for x, (r, clear) in enumerate(zip(rows, measured)):
        if launcher_timed(r):  # hollow: seen, never mistaken for the judge's reading
            style, name = {**LAUNCHER_STYLE, "edgecolor": colours[str(r.category)]}, "speedup-bar-launcher-clock"
        elif clear:
            style, name = {"color": colours[str(r.category)]}, "speedup-bar"
        else:
            style, name = SAME_STYLE, "speedup-bar-no-measurable-difference"
        bar = ax.bar([x], [r.speedup], **style)
        _gid(bar, name)
        ax.bar_label(bar, labels=[f"{r.speedup:.2f}x"], fontsize=7, padding=2)
        if r.speedup_ci:
            low, high = r.speedup_ci
            # From the interval's low end to its high end (the ratio of medians may sit outside it).
            _gid(ax.errorbar([x], [low], yerr=[[0.0], [high - low]], fmt="none", ecolor="black", capsize=3,
                             linewidth=1), "speedup-interval")
    ax.axhline(1.0, color="black", linewidth=1)
    _log_labels(ax, "{:g}x")
    _set_ticks(ax, rows)
    _category_legend(plt, ax, colours, same=not all(measured), launcher=any(launcher_timed(r) for r in rows))
    return fig


def _gid(container, name: str) -> None:
    """Name every artist of ``container`` (the SVG's ``id``): what a reader or a test can find."""
    for artist in container.get_children():
        artist.set_gid(name)


def _measured(record) -> bool:
    """Whether the speedup's 95 % interval excludes 1.0 (``faster`` or ``slower``); records from
    before intervals count by their point value, as in the report."""
    if record.difference:
        return record.difference in (FASTER, SLOWER)
    return True


def _titled(title: str, rows) -> str:
    """``title``, marked when the figure holds host timings (CPU mode)."""
    return f"{title}\n{HOST_LABEL}: not GPU kernel times" if any(host_timed(r) for r in rows) else title


def _rounds_figure(plt, rounds):
    """Pass rate and fast_p after each round of a refinement loop (results/rounds.py)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [r["round"] for r in rounds]
    ax.plot(xs, [100 * (r["pass_rate"] or 0) for r in rounds], marker="o", color="black", label="pass (fast_0)")
    for p, style in (("1", "--"), ("1.5", "-."), ("2", ":")):
        values = [r["fast_p"][p] for r in rounds]
        if any(v is not None for v in values):
            ax.plot(xs, [100 * (v or 0) for v in values], marker=".", linestyle=style, label=f"fast_{p}")
    ax.set_xlabel("round")
    ax.set_ylabel("% of problems (best round so far)")
    ax.set_title("Refinement loop: pass and fast_p after each round")
    ax.set_xticks(xs)
    ax.set_ylim(0, 105)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _sol_figure(plt, rows):
    rows = _ordered(rows)
    colours = _category_colours(plt, rows)
    fig, ax = _bar_axes(plt, len(rows), _titled("Share of the speed-of-light floor reached", rows),
                        "% of SOL (log scale)")
    width = 0.4
    ref = [100 * (r.sol.reference_fraction or 0) for r in rows]
    sol = [100 * r.sol.solution_fraction for r in rows]
    ax.bar([i - width / 2 for i in range(len(rows))], ref, width, color="0.75", label="reference")
    ax.bar([i + width / 2 for i in range(len(rows))], sol, width, label="solution",
           color=[colours[str(r.category)] for r in rows])
    ax.axhline(100.0, color="black", linewidth=1, linestyle="--")
    ax.annotate("speed of light", (0, 100.0), xycoords=("axes fraction", "data"), xytext=(4, 3),
                textcoords="offset points", fontsize=8)
    _log_labels(ax, "{:g}%")
    _set_ticks(ax, rows)
    _category_legend(plt, ax, colours, extra=[("reference", "0.75")], prefix="solution: ")
    return fig


def _set_ticks(ax, rows):
    """Problem labels under the bars, and a dotted line between categories."""
    for i in range(1, len(rows)):
        if rows[i].category != rows[i - 1].category:
            ax.axvline(i - 0.5, color="0.5", linestyle=":", linewidth=1)
    ax.set_xticks(list(range(len(rows))))
    ax.set_xticklabels(_labels(rows), rotation=45, ha="right", fontsize=8)


def _category_legend(plt, ax, colours, extra=(), prefix="", same=False, launcher=False):
    from matplotlib.patches import Patch

    handles = [Patch(color=colour, label=label) for label, colour in extra]
    handles += [Patch(color=colour, label=prefix + name) for name, colour in colours.items()]
    if same:
        handles.append(Patch(facecolor=SAME_STYLE["color"], hatch=SAME_STYLE["hatch"],
                             edgecolor=SAME_STYLE["edgecolor"], label=SAME_LABEL))
    if launcher:
        handles.append(Patch(**LAUNCHER_STYLE, edgecolor="black", label=LAUNCHER_LABEL))
    ax.legend(handles=handles, fontsize=8, loc="best")


def _log_labels(ax, template):
    """Plain numbers (``2x``, ``10%``) on a log axis instead of powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: template.format(v)))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def _human_bytes(value, _=None) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if value >= size:
            return f"{value / size:g}{unit}"
    return f"{value:g}"


def _sweep_figure(plt, problem, rows):
    """Time (us), busbw (GB/s) and speedup over the reference against per-rank message size."""
    # Constrained layout makes room for the figure's title above the panels' own titles (its
    # second line, on host timings, would otherwise sit on them).
    fig, (ax_time, ax_bw, ax_speedup) = plt.subplots(1, 3, figsize=(18, 4.8), layout="constrained")
    fig.suptitle(_titled(f"{problem}: message-size sweep (W={rows[0].world_size}, {rows[0].dtype})", rows))
    series = _sweep_series(rows)
    reference = reference_library(rows)
    palette = plt.get_cmap("tab10")
    solutions = [label for label in dict.fromkeys(label for label, _, _ in series) if label != reference]
    colours = {reference: "black", **{label: palette(i % 10) for i, label in enumerate(solutions)}}
    for label, mode, points in series:
        word, style = MODE_STYLE.get(mode, (mode, "-."))
        sizes = [p[0] for p in points]
        colour = colours[label]
        ax_time.plot(sizes, [p[1] * 1e3 for p in points], style, marker="o", markersize=3, color=colour,
                     label=f"{label} ({word})")
        bw = [(p[0], p[2]) for p in points if p[2] is not None]
        if bw:
            ax_bw.plot([b[0] for b in bw], [b[1] for b in bw], style, marker="o", markersize=3, color=colour,
                       label=f"{label} ({word})")
    for label, mode, points in _sweep_speedups(rows):
        word, style = MODE_STYLE.get(mode, (mode, "-."))
        values = [p[1] for p in points]
        # An interval drawn where the record has one; a point alone where it has not.
        below = [v - lo if lo is not None else 0.0 for v, lo in zip(values, (p[2] for p in points))]
        above = [hi - v if hi is not None else 0.0 for v, hi in zip(values, (p[3] for p in points))]
        # A launcher clock's speedups faint and named so: a diagnostic beside the judge's reading.
        judged = claimable(mode)
        ax_speedup.errorbar([p[0] for p in points], values, yerr=[below, above], fmt=style, marker="o",
                            markersize=3, capsize=2, color=colours.get(label, "grey"), alpha=1.0 if judged else 0.45,
                            label=f"{label} ({word})" if judged else f"{label} ({word}; {LAUNCHER_WORDS})")
    ax_speedup.axhline(1.0, color="black", linewidth=0.8)
    ax_speedup.set(yscale="log", xlabel="message size per rank (bytes)", ylabel=f"speedup over {reference}",
                   title=f"speedup over {reference}")
    _log_labels(ax_speedup, "{:g}x")
    low, high = ax_speedup.get_ylim()
    if high / low < 4:  # a narrow span (an A/A, a close race) would show 1x alone between 1x, 2x and 5x
        from matplotlib.ticker import MaxNLocator

        ax_speedup.yaxis.set_major_locator(MaxNLocator(nbins=6))
    ax_time.set(xscale="log", yscale="log", xlabel="message size per rank (bytes)", ylabel="median time (us)",
                title="time")
    _log_labels(ax_time, "{:g}")
    ax_bw.set(xscale="log", xlabel="message size per rank (bytes)", ylabel="busbw (GB/s)", title="bus bandwidth")
    from matplotlib.ticker import FuncFormatter

    for ax in (ax_time, ax_bw, ax_speedup):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(_human_bytes))
        ax.grid(which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    return fig


def reference_library(rows) -> str:
    """What the reference's line is called: its library, ``NCCL`` on GPU, ``gloo`` in CPU mode
    (as ``pkb bench`` names it)."""
    return "gloo" if any(host_timed(r) for r in rows) else "NCCL"


def _sweep_speedups(rows):
    """``[(label, mode, [(bytes, speedup, low or None, high or None)])]``: each correct
    solution's speedup over the reference at each size, in each mode: the record's own, with its
    95 % interval, or the ratio of the two sides' medians in records that kept none. Several
    records of a solution at one size (runs merged) give their median and no interval."""
    series: dict[tuple, dict[int, list]] = {}
    for r in rows:
        if not is_correct(r):
            continue
        for mode, sides in r.stats.modes.items():
            point = _speedup_point(sides)
            if point is not None:
                series.setdefault((solution_name(r), mode), {}).setdefault(sweep_bytes(r), []).append(point)
    out = []
    for (label, mode), by_size in sorted(series.items(), key=lambda item: (item[0][0], _mode_rank(item[0][1]))):
        points = []
        for nbytes in sorted(by_size):
            found = by_size[nbytes]
            points.append((nbytes, *found[0]) if len(found) == 1 else
                          (nbytes, statistics.median(f[0] for f in found), None, None))
        out.append((label, mode, points))
    return out


def _speedup_point(sides) -> tuple | None:
    """``(speedup, low, high)`` of one mode of one record (:meth:`ModeTiming.speedup_value`, the
    record's own rule), or None where it has no speedup."""
    value = sides.speedup_value()
    if not value:
        return None
    kept = sides.speedup
    return (value, kept.low, kept.high) if kept else (value, None, None)


def _mode_rank(mode: str) -> int:
    return list(MODE_STYLE).index(mode) if mode in MODE_STYLE else len(MODE_STYLE)


def _sweep_series(rows):
    """``[(label, mode, [(bytes, median ms, busbw GB/s or None)])]``: each solution, and the
    reference (labelled by :func:`reference_library`).

    Every record times the reference beside its solution; the reference's point at a size
    is the median of those measurements.
    """
    reference = reference_library(rows)
    series: dict[tuple, dict[int, list]] = {}
    for r in rows:
        for mode, sides in r.stats.modes.items():
            for side, label in (("candidate", solution_name(r)), ("reference", reference)):
                if side == "candidate" and not is_correct(r):
                    continue
                stats = getattr(sides, side)
                if stats:
                    series.setdefault((label, mode), {}).setdefault(sweep_bytes(r), []).append(stats.median)
    out = []
    for (label, mode), by_size in sorted(series.items(), key=lambda item: (
            item[0][0] != reference, item[0][0], _mode_rank(item[0][1]))):
        points = []
        for nbytes in sorted(by_size):
            ms = statistics.median(by_size[nbytes])
            bus = next((r.stats.bus for r in rows if sweep_bytes(r) == nbytes and r.stats.bus), None)
            busbw = bus["bytes"] / (ms * 1e-3) * bus["factor"] / 1e9 if bus and ms > 0 else None
            points.append((nbytes, ms, busbw))
        out.append((label, mode, points))
    return out
