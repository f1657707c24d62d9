"""Harbor-format tasks (Terminal-Bench 2.0 and the field's other suites): task.toml, instruction.md,
environment/, tests/, solution/ (docs/harbor.md)."""
