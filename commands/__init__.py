"""One module per command group; `register` attaches them all to the root app.

Command modules import only typer/rich at top level; the core is imported inside each command.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from orchard_cli.commands import doctor, env
    from orchard_cli.commands import eval as eval_

    app.add_typer(env.app, name="env")
    app.command("doctor")(doctor.doctor)
    app.add_typer(eval_.app, name="eval")
    from orchard_cli.commands import tasks as tasks_
    app.add_typer(tasks_.app, name="tasks")
    from orchard_cli.commands import proxy as proxy_
    app.command("proxy")(proxy_.proxy)
    from orchard_cli.commands import distill as distill_
    app.add_typer(distill_.app, name="distill")
    from orchard_cli.commands import view as view_
    app.command("view")(view_.view)
    from orchard_cli.commands import serve as serve_
    app.command("serve")(serve_.serve)
    from orchard_cli.commands import rerank as rerank_
    app.add_typer(rerank_.app, name="rerank")
    from orchard_cli.commands import train as train_
    app.command("train")(train_.train)
    from orchard_cli.commands import rl as rl_
    app.command("rollout")(rl_.rollout)
    app.command("rl")(rl_.rl)
    from orchard_cli.commands import judge as judge_
    app.add_typer(judge_.app, name="judge")
    from orchard_cli.commands import recipe as recipe_
    app.command("recipe")(recipe_.recipe)
