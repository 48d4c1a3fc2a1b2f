"""The judge: reference runs, output comparison, timing, the cross-check clock and the conduct of one job between the judge and candidate rank groups."""
