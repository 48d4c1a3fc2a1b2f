"""A record's feedback in words, for the model (the ``${feedback}`` of the template's ``revision``).

Renders :class:`pkb_core.contracts.feedback.Feedback` as short Markdown: the verdict and
trials, then what applies: the compiler's lines in a fence; for a wrong answer the rank,
the output, the trial, how many elements differ and a table of the first ones (index,
got, expected) with the tolerance; a flag's rule with its numbers; what was running
when a job hung or died; a timed pass's medians, speedup with its 95 % interval, and
the speed-of-light floor with each side's fraction of it, so the model can aim at the
bound. Records written before feedback existed are rendered from their reason
(:func:`pkb_core.results.feedback.feedback_of`).
"""
from __future__ import annotations

from pkb_core.contracts.feedback import Feedback, Mismatch, Perf
from pkb_core.contracts.record import Record
from pkb_core.contracts.verdict import Verdict

_VERDICT_WORDS = {
    Verdict.PASS: "pass: correct on every rank",
    Verdict.FAIL: "fail: a wrong answer",
    Verdict.ERROR: "error: the solution raised, or a rank ended otherwise than asked",
    Verdict.COMPILE_ERROR: "compile-error: the file could not be built or imported",
    Verdict.TIMEOUT: "timeout: no answer by the job's deadline",
    Verdict.CRASH: "crash: a rank's process died",
    Verdict.UNSUPPORTED: "unsupported",
    Verdict.FLAGGED: "flagged: a rule of the harness was broken (never a win, even if the answer is right)",
    Verdict.CANCELLED: "cancelled: stopped before it ended (nothing was found about the file)",
    Verdict.UNCHECKED: "unchecked: ran without a check (--mode dryrun)",
}


def record_feedback(record: Record) -> Feedback:
    """The record's feedback, or one made from its reason (records from before feedback)."""
    if record.feedback is not None:
        return record.feedback
    from pkb_core.results.feedback import feedback_of

    return feedback_of(record)


def render_feedback(feedback: Feedback) -> str:
    """``feedback`` as Markdown for a model."""
    asked = feedback.extra.get("trials_asked")
    trials = f" ({feedback.trials} of {asked} checked trials passed)" if asked and feedback.trials is not None else ""
    out = [f"Verdict: **{_VERDICT_WORDS.get(feedback.verdict, feedback.verdict.value)}**{trials}."]
    if feedback.compiler:
        out += ["", "The build's error lines:", "", "```", *feedback.compiler, "```"]
    elif feedback.mismatch is not None:
        out += ["", *_mismatch(feedback.mismatch)]
    elif feedback.rule:
        out += ["", f"The rule and the numbers: {feedback.rule}"]
    elif feedback.verdict != Verdict.PASS and feedback.summary:
        out += ["", f"What pkb saw: {feedback.summary}"]
    if feedback.running:
        out.append(f"What was running: {feedback.running}.")
    if feedback.perf is not None:
        out += ["", *_perf(feedback.perf)]
    elif feedback.verdict == Verdict.PASS:
        out.append("It was not timed (run without --measure-perf).")
    return "\n".join(out)


def _mismatch(m: Mismatch) -> list[str]:
    where = ", ".join(part for part in (
        f"rank {m.rank}" if m.rank is not None else "", f"output `{m.output}`" if m.output else "",
        f"trial {m.trial}" if m.trial is not None else "", m.call or "") if part)
    lines = [f"Where: {where or 'see below'}."]
    if m.count is not None:
        shape = f" of shape {tuple(m.shape)}" if m.shape is not None else ""
        worst = f"; largest absolute error {m.max_abs_err}" if m.max_abs_err else ""
        lines.append(f"{m.count} of {m.numel} elements{shape} are out of tolerance{worst}.")
    if m.elements:
        lines += ["", "| index | got | expected |", "|---|---|---|"]
        lines += [f"| {tuple(e.index)} | {e.got} | {e.expected} |" for e in m.elements]
        lines.append("")
        lines.append("(the first differing elements in memory order, then the one with the largest error)")
    if m.tolerance:
        lines.append(f"Tolerance: {m.tolerance}.")
    return lines


def _perf(p: Perf) -> list[str]:
    mode = f" ({p.timing_mode} mode)" if p.timing_mode else ""
    lines = [f"Times{mode}, median of the slowest rank: reference {p.reference_ms:.4g} ms, yours {p.solution_ms:.4g} ms."]
    if p.speedup is not None:
        interval = f", 95 % interval [{p.speedup_ci[0]:.3f}, {p.speedup_ci[1]:.3f}]" if p.speedup_ci else ""
        reading = f": {p.difference}" if p.difference else ""
        lines.append(f"Speedup {p.speedup:.3f}x{interval}{reading}.")
    else:
        lines.append("Speedup: too few rounds to tell.")
    if p.floor_ms:
        yours = f"; yours reaches {100 * p.solution_sol_fraction:.3g} % of it" if p.solution_sol_fraction else ""
        ref = f", the reference {100 * p.reference_sol_fraction:.3g} %" if p.reference_sol_fraction else ""
        lines.append(f"Speed of light (the traffic bound, {p.bound}-bound): {p.floor_ms:.4g} ms{yours}{ref}.")
    if p.clock == "host":
        lines.append("These are host timings (CPU mode): they show that timing works, not how fast a GPU kernel is.")
    return lines
