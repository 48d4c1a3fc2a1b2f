"""A host barrier through a c10d store, the same code for the judge's ranks and a candidate's.

Both sides of a timed round align their calls with it (:mod:`pkb_core.harness.timing`),
so neither side's numbers carry a different barrier's cost; a custom-kernel
candidate's ``dist.barrier()`` is one too (:mod:`pkb_core.candidate.sealed`).
"""
from __future__ import annotations


class StoreBarrier:
    """A barrier among ``world_size`` ranks over ``store``.

    Each barrier is a generation: every rank adds 1 to the generation's
    counter and waits until it reaches the group's size. A custom-kernel
    candidate's store (:class:`pkb_core.keeper.client.KeeperStore`)
    serves no keys after the lockdown: there the keeper counts the generations
    itself (``arrive``, with the namespace ``prefix``). Subgroups (a group
    argument of the barrier) count under their own key. On CUDA the rank's
    device work is finished first, the ordering NCCL's barrier gives.

    :param on_call: called after every completed barrier (the launcher counts
        a solution's barriers).
    """

    def __init__(self, store, world_size: int, device=None, on_call=None, prefix: str = "pkb-barrier"):
        self.store = store
        self.world_size = world_size
        self.device = device
        self.on_call = on_call
        self.prefix = prefix
        self._generations: dict = {}

    def __call__(self, group=None, async_op=False, device_ids=None):
        import torch.distributed as dist

        if self.device is not None and self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)
        if group is None or group is dist.group.WORLD:
            name, size = "world", self.world_size
        elif not isinstance(group, dist.ProcessGroup):
            return None  # dist.GroupMember.NON_GROUP_MEMBER: not a member, nothing to wait for
        else:
            name, size = "g" + "_".join(map(str, dist.get_process_group_ranks(group))), group.size()
        arrive = getattr(self.store, "arrive", None)
        if arrive is not None:
            ranks = range(size) if name == "world" else dist.get_process_group_ranks(group)
            arrive(self.prefix, ranks)
            if self.on_call:
                self.on_call()
            return None
        generation = self._generations.get(name, 0) + 1
        self._generations[name] = generation
        key = f"{self.prefix}/{name}/{generation}"
        # The last rank to arrive opens the barrier; the others wait on the
        # store's notification (no polling, so no polling jitter in timings).
        if self.store.add(key, 1) == size:
            self.store.set(key + "/open", b"1")
        else:
            self.store.wait([key + "/open"])
        if self.on_call:
            self.on_call()
        return None
