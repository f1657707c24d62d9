"""MiniWoB++ (PyPI `miniwob` 1.1.0, MIT) on orchard's own browser: suite.py starts and reads an
episode, family.py runs the suite, gold.py holds reference steps (through the action tools) for a
few simple tasks."""
