"""Packages, found rather than listed: `orchard_cli` and the three top-level folders the user
asked for (`commands/`, `tasks/`, `harnesses/`), installed under `orchard_cli` so that imports read
`from orchard_cli.tasks import ...` and no generic top-level name lands in site-packages. A new
package under any of them (a task family, say) is in the wheel without editing a list.
Everything else about the project is in pyproject.toml."""

from setuptools import find_packages, setup

MAPPED = {"orchard_cli.commands": "commands", "orchard_cli.tasks": "tasks", "orchard_cli.harnesses": "harnesses"}

packages = find_packages(include=["orchard_cli", "orchard_cli.*"])
package_dir = {"orchard_cli": "orchard_cli"}
for name, folder in MAPPED.items():
    found = [name] + [f"{name}.{sub}" for sub in find_packages(folder)]
    packages += found
    package_dir.update({pkg: pkg.replace(name, folder, 1).replace(".", "/") for pkg in found})

setup(packages=packages, package_dir=package_dir)
