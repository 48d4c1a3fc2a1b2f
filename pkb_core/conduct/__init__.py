"""The launcher's conduct of one job: the trials and the timed rounds between the judge's
ranks and a candidate's, the verdict the ranks' findings combine into, how many rounds to
time and what their times mean (intervals, the reading). Runs in the launcher's process only."""
