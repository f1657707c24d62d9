"""Claw-Eval from a checkout the user names: see family.py and docs/claw_eval.md."""
