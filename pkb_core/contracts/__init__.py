"""The typed contracts between pkb's processes: the job, a batch of jobs with its launch
settings, a job's timing, its record and the machine's calibration.

Each is a frozen attrs class with one JSON form (:mod:`pkb_core.contracts.serial`):
what the launcher sends its workers and other nodes, what run directories and
the calibration cache hold. Modules here import nothing of pkb but each other
and :mod:`pkb_core.errors`, so every process can read them cheaply.
"""
