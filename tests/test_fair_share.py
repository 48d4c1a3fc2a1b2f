"""The scheduler's order of waiting jobs (pkb_core.serve.fair_share): a tenant cannot lift its jobs
above another tenant's, nor multiply its share by varying its client tags; the admin's (and a
single-token service's) priorities hold across everyone, as submitted."""
from pkb_core.serve.fair_share import account, order_key


def _job(job_id, *, client, owner=None, priority=0):
    return {"id": job_id, "client": client, "owner": owner, "priority": priority}


def _order(items, started=None):
    """The ids in the order the scheduler takes them, each start counted against its account."""
    started = dict(started or {})
    remaining, order = list(items), []
    while remaining:
        item = min(remaining, key=lambda w: order_key(w, lambda name: started.get(name, 0)))
        remaining.remove(item)
        order.append(item["id"])
        started[account(item)] = started.get(account(item), 0) + 1
    return order


def test_a_tenant_priority_orders_its_own_jobs_but_never_lifts_them_over_another_tenants():
    greedy = [_job(f"a{i}", client=f"tag{i}", owner="alice", priority=1000) for i in range(3)]
    low = _job("a-low", client="alice", owner="alice", priority=0)
    other = _job("b0", client="bob", owner="bob")
    order = _order([*greedy, low, other])
    # Alice's priority 1000 counts among her own jobs only; her tags are one account, so bob's job
    # goes second, after one of hers (the oldest of the first pick's equals), not after all four.
    assert order[:2] == ["a0", "b0"], order
    assert order.index("a-low") == 4, order  # her own lowest last
    # A tenant may still lower its jobs below everyone's.
    assert _order([_job("a", client="a", owner="alice", priority=-5), _job("b", client="b", owner="bob")]) == ["b", "a"]


def test_without_tenants_priority_is_global_and_client_tags_take_turns():
    items = [_job("t1", client="trainer"), _job("t2", client="trainer"), _job("e1", client="eval"),
             _job("urgent", client="late", priority=5)]
    assert _order(items) == ["urgent", "t1", "e1", "t2"]
    # The admin's priority (no owner) beats a tenant's, whose is at most 0 across tenants.
    assert _order([_job("tenant", client="x", owner="x", priority=9), _job("admin", client="y", priority=1)]) == \
        ["admin", "tenant"]
