"""Where Claw-Eval's runner finds the files a task names, and where it puts them: one rule for the
three places orchard needs it (whether the task can run: helper.py's load; the workspace:
family.py's setup and snapshot; the grader's own files: helper.py's grade). Standard library only:
helper.py, which runs in the checkout's environment, loads this file by its path; orchard
imports it. The paths themselves go through the guarded loader's rules (tasks/kit).

    sandbox_files,          the task folder, then the checkout root (a file another task keeps,
    sandbox_grader_files    named from the root: tasks/T021zh_.../fixtures/...); placed in the
                            workspace at the path as the task names it (SandboxRunner's
                            _inject_file_list)
    environment.fixtures    the same, placed only when sandbox_files is empty (its inject_files)
    prompt.attachments      the checkout root (the runner's working folder), then the task folder
                            (its media loader); orchard places them in the workspace
    local_grader_files      the task folder only (its grading reads task_dir / path)
"""

WORKSPACE, GRADER_WORKSPACE, ATTACHMENT, LOCAL_GRADER = "workspace", "grader_workspace", "attachment", "local_grader"


def roots(kind, folder, checkout):
    """The folders a file of `kind` is looked up in, in order."""
    if kind == LOCAL_GRADER:
        return (folder,)
    if kind == ATTACHMENT:
        return (checkout, folder)
    return (folder, checkout)


def named(definition):
    """(path, kind) of every file a task definition (a dict, as TaskDefinition dumps it) names
    that the runner reads: what goes in the workspace before the agent, after it, the prompt's
    attachments, the grader's local files."""
    environment = definition.get("environment") or {}
    placed = list(definition.get("sandbox_files") or ()) or list(environment.get("fixtures") or ())
    found = [(p, WORKSPACE) for p in placed]
    found += [(p, GRADER_WORKSPACE) for p in definition.get("sandbox_grader_files") or ()]
    found += [(p, ATTACHMENT) for p in (definition.get("prompt") or {}).get("attachments") or ()]
    found += [(p, LOCAL_GRADER) for p in definition.get("local_grader_files") or ()]
    return found
