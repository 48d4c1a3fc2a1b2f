"""Launch folders in shared memory whose maker is gone are swept by the next launch of the same
user (pkb_core.launch.scratch.sweep_stale): a maker that is a zombie (killed, not yet reaped, as a
service's lane killed with SIGKILL is for a moment) is gone, and one that runs is not."""
import os
import secrets
import time

from pkb_core.launch import scratch


def _folder_of(pid: int, started: str) -> str:
    folder = os.path.join(scratch.shm_root(), f"pkb-test-{secrets.token_hex(4)}")
    os.mkdir(folder, 0o711)
    with open(os.path.join(folder, scratch.OWNER_FILE), "w") as owner:
        owner.write(f"{pid} {started}\n")
    return folder


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def test_a_folder_whose_maker_is_a_zombie_is_swept_and_a_living_makers_is_not(monkeypatch):
    child = os.fork()
    if child == 0:
        time.sleep(0.3)
        os._exit(0)
    try:
        dead = _folder_of(child, scratch._start_time(child))
        alive = _folder_of(os.getpid(), scratch._start_time(os.getpid()))
        deadline = time.monotonic() + 10
        while _state(child) != "Z":  # exited, not reaped: /proc still has it
            assert time.monotonic() < deadline
            time.sleep(0.05)
        monkeypatch.setattr(scratch, "_SWEPT", [])
        scratch.sweep_stale()
        assert not os.path.exists(dead)
        assert os.path.exists(alive)
    finally:
        os.waitpid(child, 0)
        for folder in (dead, alive):
            if os.path.exists(folder):
                os.remove(os.path.join(folder, scratch.OWNER_FILE))
                os.rmdir(folder)
