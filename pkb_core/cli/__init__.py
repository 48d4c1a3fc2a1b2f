"""The command line: one module per ``pkb`` command, plus the console, progress lines, tables and the configuration file."""
