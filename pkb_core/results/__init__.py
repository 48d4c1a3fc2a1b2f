"""Results: the record of a job, the run directory, reports (text, HTML, plots) and comparisons between runs."""
