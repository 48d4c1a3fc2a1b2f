"""The reward service (pkb serve): intake, store, scheduler, lanes, the compile pool (docs/serve.md)."""
