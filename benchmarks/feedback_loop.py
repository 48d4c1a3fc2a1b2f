"""What one round of ``pkb generate --rounds`` costs pkb, without the model's time: through the
reward service and through one ``pkb run`` launch per round.

    python3 benchmarks/feedback_loop.py OUT_DIR [--rounds 3] [--problems 1-8] [--backend triton]
                                        [--devices 2] [--trials 5] [--measure-perf]

An instant in-process model answers every request at once with the backend's sample for
the problem: a wrong variant (serve_stream.py's, which scales the output) in rounds
before the last, the sample itself in the last, each with a comment of its own so every
round's files are new files and new builds (as a model's revisions are). The real loop
(:class:`pkb_core.generate.loop.Refiner`: prompts, revision messages with the rendered
feedback, round files, records) runs ``--rounds`` rounds twice, checking through
:class:`LocalEvaluator` (one launch per round) and through :class:`ServiceEvaluator`
(a ``pkb serve`` started here with ``--devices``). Prints, per round and path, the
seconds pkb took to check the round's files and the loop's whole round (the model's
instant answers included), from each loop's ``loop.json``.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from serve_stream import WRONG, start_service  # noqa: E402 - the stream benchmark's wrong variant and service


class InstantModel:
    """Answers at once: the sample (wrong before the last round), a comment naming the round."""

    def __init__(self, samples: Path, rounds: int):
        self.samples, self.rounds = samples, rounds

    def complete(self, messages, settings):
        from pkb_core.generate.providers import Completion

        key = re.search(r"problem (\d+_\w+) of pkb", messages[1]["content"]).group(1)
        k = 1 if len(messages) == 2 else int(re.search(r"This is round (\d+)", messages[-1]["content"]).group(1))
        source = (self.samples / f"{key}.py").read_text() + f"\n# round {k}, {time.time_ns()}\n"
        if k < self.rounds:
            source += WRONG
        return Completion(text=f"```python\n{source}```\n", model="instant", usage={"total_tokens": 0})


def run_loop(out: Path, evaluator, args) -> dict:
    from pkb_core.generate.loop import Budget, Refiner, build_prompts
    from pkb_core.generate.prompt_builder import PromptBuilder, PromptRequest
    from pkb_core.generate.providers import ModelSettings
    from pkb_core.plugin.manager import get_backend_info, get_plugin_manager
    from pkb_core.problem.registry import build_registry

    pm = get_plugin_manager()
    registry = build_registry(pm)
    builder = PromptBuilder(pm, registry, PromptRequest(backend=args.backend, hardware="h200_2", nproc=2))
    prompts = build_prompts(builder, registry.select(args.problems))
    model = InstantModel(Path(get_backend_info(pm, args.backend).samples), args.rounds)
    refiner = Refiner(model, "instant", builder.template, ModelSettings(model="instant"), evaluator, out,
                      Budget(rounds=args.rounds))
    started = time.monotonic()
    result = refiner.run(prompts)
    wall = time.monotonic() - started
    verdicts = {loop.key: [r.record.verdict.value for r in loop.rounds if r.record] for loop in result.problems}
    return {"wall": wall, "rounds": json.loads((out / "loop.json").read_text())["seconds_by_round"],
            "verdicts": verdicts}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--problems", default="1-8")
    parser.add_argument("--backend", default="triton")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--measure-perf", action="store_true", help="time every passing file (and the feedback's speedup)")
    args = parser.parse_args()
    from pkb_core.generate.evaluators import EvalOptions, LocalEvaluator, ServiceEvaluator
    from pkb_core.plugin.manager import get_plugin_manager

    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    options = EvalOptions(backend=args.backend, world_size=2, trials=args.trials, measure_perf=args.measure_perf)
    results = {"local": run_loop(args.out / "local", LocalEvaluator(get_plugin_manager(), options,
                                                                     args.out / "local" / "runs"), args)}
    server, url = start_service(args.out, "--devices", str(args.devices), command=(sys.executable, "-m", "pkb_core"))
    try:
        evaluator = ServiceEvaluator(url, options)
        try:
            results["service"] = run_loop(args.out / "service", evaluator, args)
        finally:
            evaluator.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
    for path, result in results.items():
        print(f"{path}: whole loop {result['wall']:.1f} s")
        for k, seconds in sorted(result["rounds"].items(), key=lambda item: int(item[0])):
            print(f"  round {k}: {seconds.get('files')} files checked in {seconds.get('pkb', 0):.1f} s "
                  f"(model, instant: {seconds.get('model', 0):.2f} s)")
        print(f"  verdicts by round: {result['verdicts']}")
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
