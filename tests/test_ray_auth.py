"""The Ray actors' authentication, without a cluster: results sealed with the service's token
open only with it, and a group answers only calls that carry it (docs/trust.md)."""
import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'pkb[ray]')")

from pkb_core.ray.actor import GroupActor, opened, seal  # noqa: E402


def test_a_sealed_result_opens_only_with_its_token_and_unchanged():
    sealed = seal("service-token", {"result": {"job_id": "j1", "cancelled": False}})
    assert opened("service-token", sealed) == {"result": {"job_id": "j1", "cancelled": False}}
    assert opened("another-token", sealed) is None
    forged = dict(sealed, payload=sealed["payload"].replace("j1", "j2"))
    assert opened("service-token", forged) is None
    assert opened("service-token", {"payload": sealed["payload"]}) is None


def test_a_group_refuses_a_call_without_the_services_token():
    group = GroupActor.__new__(GroupActor)  # the check alone: no lane process
    group._token = "service-token"
    group._check("service-token")
    with pytest.raises(PermissionError, match="only the service that started it"):
        group._check("guessed")
