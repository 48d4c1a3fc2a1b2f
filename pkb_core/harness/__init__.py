"""The harness both sides run: the same code in the judge's processes and in a candidate's
(trees as parcels, the timed batches, the barriers that align them, profiling), so neither
side's numbers carry the other's costs. It holds no judgement: nothing here compares, and
nothing imports candidate code."""
