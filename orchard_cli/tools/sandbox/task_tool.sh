#!/usr/bin/env bash
# `task-tool NAME ['JSON' | -]`, `task-tool --list`: orchard's task tools from the shell, run INSIDE
# the sandbox. Exactly task_tool.py's command line, output and exit codes; without a process per
# call where it can: with ORCHARD_TASK_TOOL_PORT set (orchard's bash agent runs task_tool.py's
# Helper for its commands), the call goes to that helper over bash's /dev/tcp (task_tool.py
# documents the protocol). Otherwise, or when the helper cannot be reached, task_tool.py runs.
if [ -n "${ORCHARD_TASK_TOOL_PORT:-}" ] && [ "$#" -ge 1 ] && [ "$#" -le 2 ] && [ -n "$1" ] \
        && [ "$1" != -h ] && [ "$1" != --help ] && { [ "$1" != --list ] || [ "$#" -eq 1 ]; } \
        && { exec 3<>"/dev/tcp/127.0.0.1/$ORCHARD_TASK_TOOL_PORT"; } 2>/dev/null; then
    LC_ALL=C                           # lengths in bytes, not characters
    if [ "$#" -eq 1 ]; then
        __args= __size=-1
    else
        if [ "$2" = - ]; then __args=$(</dev/stdin); else __args=$2; fi
        __size=${#__args}
    fi
    printf '%d %d %s\n%s%s' "${#1}" "$__size" "${ORCHARD_TOOLS_TOKEN:-}" "$1" "$__args" >&3
    if ! IFS= read -r __code <&3 || [ -z "$__code" ]; then
        echo "task_tool.py: the task-tool helper on port $ORCHARD_TASK_TOOL_PORT gave no answer" >&2
        exit 1
    fi
    if [ "$__code" = 0 ]; then cat <&3; else cat <&3 >&2; fi
    exit "$__code"
fi
exec python3 "${BASH_SOURCE[0]%/*}/task_tool.py" "$@"
