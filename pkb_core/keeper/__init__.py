"""The store keeper: a candidate group's c10d store, a process of the group's own (docs/trust.md).
The launcher makes its socket (:mod:`~pkb_core.keeper.listener`), the group's rank 0 forks it
(:mod:`~pkb_core.keeper.process`), it serves pkb's counter protocol (:mod:`~pkb_core.keeper.server`)
or torch's TCPStore, and the group's ranks are its clients (:mod:`~pkb_core.keeper.client`)."""
