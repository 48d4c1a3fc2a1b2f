"""The problem registry: problem packs -> problem specs, looked up by id, name or category.

Packs register files or directories through ``pkb_register_problems``; the
registry reads each file's metadata with :mod:`ast` (no torch import) and
refuses two problems with the same id or name.
"""
from __future__ import annotations

import sys
from pathlib import Path

from pkb_core.errors import NothingSelected, PkbError
from pkb_core.problem.contract import CATEGORIES, ProblemFileError, ProblemSpec, read_spec


class Registry:
    """All known problems, in id order."""

    def __init__(self):
        self._by_id: dict[int, ProblemSpec] = {}
        self._by_name: dict[str, ProblemSpec] = {}
        #: One line per problem file that breaks the contract (skipped, not fatal).
        self.errors: list[str] = []

    def register(self, path) -> None:
        """Add one problem file, or every ``<id>_<name>.py`` under a directory."""
        path = Path(path)
        files = sorted(path.rglob("[0-9]*_*.py")) if path.is_dir() else [path]
        for file in files:
            try:
                self.add(read_spec(file))
            except ProblemFileError as exc:
                self.errors.append(str(exc))

    def add(self, spec: ProblemSpec) -> None:
        for table, key in ((self._by_id, spec.id), (self._by_name, spec.name)):
            other = table.get(key)
            if other is not None and other.path != spec.path:
                raise PkbError(f"problem {key!r} is defined twice: {other.path} and {spec.path}")
        self._by_id[spec.id] = spec
        self._by_name[spec.name] = spec

    def __iter__(self):
        return iter(sorted(self._by_id.values(), key=lambda s: s.id))

    def __len__(self):
        return len(self._by_id)

    def get(self, key) -> ProblemSpec:
        """One problem by id (``"1"``), name (``"allreduce"``) or stem (``"1_allreduce"``)."""
        key = str(key).strip()
        if key.isdigit() and int(key) in self._by_id:
            return self._by_id[int(key)]
        if key in self._by_name:
            return self._by_name[key]
        head, _, tail = key.partition("_")
        if head.isdigit() and int(head) in self._by_id and self._by_id[int(head)].name == tail:
            return self._by_id[int(head)]
        require_problems(self)
        import difflib

        words = list(self._by_name) + [s.key for s in self] + list(CATEGORIES) \
            + [a for aliases in CATEGORIES.values() for a in aliases]
        close = difflib.get_close_matches(key, words, n=1, cutoff=0.75)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise PkbError(f"unknown problem {key!r} ({hint}see `pkb problems`)", about=("problems", "problem"))

    def select(self, query: str) -> list[ProblemSpec]:
        """Problems matching a comma-separated list of ids, names, categories,
        id ranges (``1-8``) or ``all``; in id order, without repeats."""
        chosen: dict[int, ProblemSpec] = {}
        for part in (p.strip() for p in str(query).split(",")):
            if not part:
                continue
            for spec in self._select_one(part):
                chosen[spec.id] = spec
        if not chosen:
            require_problems(self)
            raise NothingSelected(f"no problem matches {query!r} (see `pkb problems`)")
        return [chosen[i] for i in sorted(chosen)]

    def _select_one(self, part: str) -> list[ProblemSpec]:
        if part == "all":
            return list(self)
        category = category_key(part)
        if category:
            return [s for s in self if s.category == category]
        low, dash, high = part.partition("-")
        if dash and low.isdigit() and high.isdigit():
            return [s for s in self if int(low) <= s.id <= int(high)]
        return [self.get(part)]


def category_key(text: str) -> str | None:
    """The canonical category for a key or alias (``tp`` -> ``tensor-parallel``)."""
    text = text.lower().replace("_", "-")
    for key, aliases in CATEGORIES.items():
        if text == key or text in aliases:
            return key
    return None


#: What to do when no problem pack is installed (``pip install -e .`` installs pkb alone).
NO_PACK_HINT = ("no problem pack is installed: the built-in problems are the separate distribution "
                "pkb-problems (from a pkb checkout: pip install -e problems, or ./scripts/install)")


def require_problems(registry: Registry) -> Registry:
    """``registry``, or a one-line error saying how to install a problem pack when it is empty."""
    if not len(registry):
        raise PkbError(NO_PACK_HINT + (f"; skipped problem files: {'; '.join(registry.errors)}"
                                       if registry.errors else ""))
    return registry


def build_registry(pm) -> Registry:
    """Collect every problem pack's files through ``pkb_register_problems``."""
    registry = Registry()
    pm.hook.pkb_register_problems(register=registry.register)
    for error in registry.errors:
        print(f"warning: skipped problem file: {error}", file=sys.stderr)
    return registry
