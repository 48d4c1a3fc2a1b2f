"""The confinement every process below the launcher may apply to itself: the lockdown (seccomp,
capabilities, non-dumpable processes), the sandbox (a user of its own, a read-only file system),
the views of shared places (a ``/tmp`` and a ``/proc`` of its own), a builder's layer over pkb's
cache, and a listening socket's shut door. A candidate locks itself down with it, and so do a builder,
the keeper, the judge's ranks, the zygotes and the launcher (the parts that fit each); it
imports nothing of any of them (docs/trust.md)."""
