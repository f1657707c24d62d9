"""Machinery task families share (STYLE.md: a kit both import, never one family from another).

    taskfiles   the guarded loader: the one way a family reads task data it did not make
    paths       its rules, in the standard library alone (Claw-Eval's helper loads it by path)
    archives    archives checked entry by entry before anything is written
"""
