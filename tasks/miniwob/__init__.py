"""MiniWoB++ (PyPI `miniwob` 1.1.0, MIT) on orchard's own Playwright: suite.py starts and reads an
episode, solvers.py holds scripted reference solutions for a few simple tasks."""
