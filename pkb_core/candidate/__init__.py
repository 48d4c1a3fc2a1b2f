"""The candidate's side: the locked-down process that loads a solution and runs it on the inputs the judge sends, and nothing else (see docs/trust.md)."""
