"""Processes and what passes between them: the JSON-lines channel of commands and answers,
and sessions (signal, freeze, measure and kill a process tree by its session)."""
