"""The judge: the ranks that hold the run's secret, draw every input, run the problem's
reference with a real process group and compare a candidate's outputs, read as data. It never
imports candidate code, and a candidate's processes import nothing of it."""
