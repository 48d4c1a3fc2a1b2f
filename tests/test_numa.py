"""Where the judge's timekeeper runs and keeps its memory (pkb_core.machine.numa)."""
import mmap
import subprocess
import sys

from pkb_core.machine import numa


def test_kernel_lists_parse_to_their_numbers():
    assert numa.parse_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert numa.parse_list("5") == [5]
    assert numa.parse_list("") == []


def test_a_touched_page_is_on_one_of_the_machines_nodes_and_an_untouched_one_nowhere():
    touched, untouched = mmap.mmap(-1, 8192), mmap.mmap(-1, 8192)
    touched[0] = 1
    assert numa.page_node(touched) in numa.online_nodes()
    assert numa.page_node(untouched) is None
    touched.close()  # page_node keeps no export of the buffer: it can still be closed
    untouched.close()


def test_one_node_machine_is_left_as_it_is():
    assert numa.settle_on(None)["pinned"] is (len(numa.online_nodes()) > 1)


def test_settling_pins_the_process_to_the_nodes_cpus_and_prefers_its_memory():
    """On a machine of two nodes (this one's node 0 as the first): the process runs only on
    node 0's CPUs and its new mappings prefer node 0 (the kernel's own account, numa_maps)."""
    code = """
import os
from pkb_core.machine import numa
numa.online_nodes = lambda: [0, 1]
done = numa.settle_on(0)
assert done == {"nodes": 2, "node": 0, "pinned": True}, done
assert os.sched_getaffinity(0) <= set(numa.node_cpus(0)), os.sched_getaffinity(0)
with open("/proc/self/numa_maps") as maps:
    assert all(line.split()[1] == "prefer:0" for line in maps), "a mapping without node 0's preference"
print("settled")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "settled" in done.stdout, done.stderr
