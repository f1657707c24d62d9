"""The SWE task family: SWE-bench instances, their environments, and SWE-bench's grading.

Instances are SWE-bench rows (`instance_id, repo, base_commit, patch, test_patch,
problem_statement, created_at, version, FAIL_TO_PASS, PASS_TO_PASS, environment_setup_commit`,
and optionally `eval_script`, `log_parser`, `image`), read from .parquet / .jsonl / .json files or
a hub dataset. FAIL_TO_PASS / PASS_TO_PASS may be JSON-encoded lists.

Environments come from the official swebench 4.1.0 spec of the instance's repo/version, or from
the instance's own optional `environment` field (an object, or a JSON string in a parquet
column), which takes precedence:

    {"python": "3.11",                       # a pyenv interpreter of this version is copied
     "packages": ["pytest==8.3.3"],          # installed with uv, --exclude-newer the era date
     "requirements_files": [], "conda_files": [],  # repo files whose requirements are installed
     "pre_install": [],                      # shell lines run in /testbed before install
     "install": ["python -m pip install -e ."],  # run at build time, removed from eval scripts
     "eval_commands": [],                    # lines run before the tests
     "test_cmd": "pytest -rA tests/test_x.py",   # used when there is no eval_script
     "log_parser": "pytest",                 # an official parser: pytest, django, sympy, ...
     "exclude_newer": "2024-05-01"}          # optional; default: see below

Only `python` is required. Unpinned requirements resolve as of the era date (`--exclude-newer`):
`exclude_newer` when given, else the day of the environment's setup commit (the instances of a
version share its environment), never before the recipe's Python came out. Eval scripts (given, or built from `test_cmd`) are written for
/testbed and `source /opt/miniconda3/bin/activate; conda activate testbed`; on the local backend
the environment is mounted where they expect it (see environment.py).
"""

from orchard_cli.tasks.swe.environment import EnvironmentUnavailable
from orchard_cli.tasks.swe.family import SWEFamily
from orchard_cli.tasks.swe.instance import EnvironmentRecipe

__all__ = ["EnvironmentRecipe", "EnvironmentUnavailable", "SWEFamily"]
