"""The judge: reference runs, output comparison, timing from the launcher's clock and the conduct of one job between the judge and candidate rank groups."""
