"""The run folder's one owner: what an `orchard eval` run writes, under which names, and how it
is read back (`RunFolder`), and SWE-bench's predictions format (`runs.predictions`).

    config.json           what decides the results (compared on --resume)
    tasks.jsonl           the tasks as run (family, prompt, record): regrade, the judges and the
                          value model read them instead of loading the suite again
    results.jsonl         one line per finished episode (appended; the latest line of an attempt wins)
    predictions.jsonl     families graded on a patch: SWE-bench's format (predictions-attempt-K.jsonl
                          for attempts after the first)
    trajectories.jsonl    agent runs: every model call, the conversation, the evidence, the verdict
                          (its images in trajectories.images/)
    scorecard.json/.md/.html
    logs/<task>/attempt-<k>/   evidence.json, patch.diff, test output, eval.sh, outcome.json,
                          the harness's output

A run made by rerank (best of N) has the same names, without tasks.jsonl and trajectories.
"""

from orchard_cli.runs.folder import RunFolder, safe_name

__all__ = ["RunFolder", "safe_name"]
