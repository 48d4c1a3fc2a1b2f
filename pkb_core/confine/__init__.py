"""The confinement every process below the launcher may apply to itself: the lockdown (seccomp,
capabilities, non-dumpable processes), the sandbox (a user of its own, a read-only file system)
and a listening socket's shut door. A candidate locks itself down with it, and so do a builder,
the keeper, the judge's ranks, the zygotes and the launcher (the parts that fit each); it
imports nothing of any of them (docs/trust.md)."""
