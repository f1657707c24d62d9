"""`orchard judge`: a vision model judges web episodes from their screenshots, as the live-web
suites are scored (WebVoyager's auto-eval, Online-Mind2Web's WebJudge), and `orchard judge export`
writes a run in Online-Mind2Web's `result.json` layout so that their own scripts can read it.

    episodes.py   a run folder's graded attempts as a judge reads them: the task, the actions, the
                  final answer, the screenshot after each action (step-NNN.png in the episode's logs)
    methods.py    the judging methods (their prompts are hashed into the scorecard)
    run.py        judging a run folder: judged.jsonl and scorecard.json under RUN/judge-METHOD/
    mind2web.py   the export
"""
