"""Synthesized SWE tasks: real packages' sdists, procedural bugs, SWE-bench instances.

`orchard tasks synth --package NAME==VERSION --n N --out SUITE.jsonl` (see synth.py). Modules:
source (sdist -> deterministic repository, and its rebuild), mutate (AST mutations), tests_run
(reliable tests through the SWE family's environment), statement (problem statements),
records (the instance format), validate (gold resolves, the bug does not), synth (the pipeline).
"""
