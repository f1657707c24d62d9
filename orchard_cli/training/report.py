"""What a run leaves for people: progress on stderr, the loss curve and the model card."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from orchard_cli.training.trainer import StepLog


class ProgressLine:
    """A progress bar on stderr (loss, tokens/s, ETA); plain lines when stderr is not a terminal."""

    def __init__(self, total: int, start: int, enabled: bool = True) -> None:
        self.total, self.done = total, start
        self.enabled = enabled
        self.started = time.monotonic()
        self.first = start
        self.tokens = 0
        self.every = max(1, total // 20)
        self._bar: Any = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[info]}"), TimeRemainingColumn(),
                                 console=Console(stderr=True), transient=False)
            self._task = self._bar.add_task("train", total=total, completed=start, info="")
            self._bar.start()

    def update(self, log: StepLog) -> None:
        self.done = log.step
        self.tokens += log.tokens
        elapsed = time.monotonic() - self.started
        rate = self.tokens / elapsed if elapsed > 0 else 0.0
        per_step = elapsed / max(1, self.done - self.first)
        eta = per_step * (self.total - self.done)
        info = f"loss {log.loss:.4f}  {rate:,.0f} tok/s"
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, info=info)
        elif self.enabled and (log.step % self.every == 0 or log.step == self.total or log.step == self.first + 1):
            print(f"train step {log.step}/{self.total}  {info}  eta {_clock(eta)}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def read_log(path: Path) -> list[dict[str, Any]]:
    from orchard_cli.records import iter_jsonl

    return list(iter_jsonl(path))


def write_loss_png(log: list[dict[str, Any]], path: Path) -> bool:
    """The loss per step (and its running mean); False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        return False
    steps = [r["step"] for r in log]
    losses = [r["loss"] for r in log]
    window = max(1, len(losses) // 20)
    smooth = [sum(losses[max(0, i - window + 1):i + 1]) / len(losses[max(0, i - window + 1):i + 1])
              for i in range(len(losses))]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(steps, losses, color="#9bb7d4", linewidth=1, label="loss")
    if window > 1:
        ax.plot(steps, smooth, color="#1f4e79", linewidth=2, label=f"mean of {window}")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("answer-token loss")
    ax.set_title("orchard train")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def _table(rows: list[tuple[str, Any]]) -> str:
    lines = ["| | |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines)


def model_card(summary: dict[str, Any], config: dict[str, Any]) -> str:
    """README.md of the output folder: data, filters, hyper-parameters, results."""
    samples, load = summary["samples"], summary["data"]
    lora = config["lora"]
    kind = ("LoRA adapter merged into the base weights" if lora and config["merge"]
            else "LoRA adapter (load it with peft on the base model)" if lora else "full fine-tune")
    filters = config["filters"]
    val = summary.get("val_loss_after")
    result_rows = [("steps", f"{summary['steps']} of {summary['total_steps']}"),
                   ("first loss", summary.get("first_loss")), ("final loss", summary.get("final_loss")),
                   ("validation loss before / after", f"{summary.get('val_loss_before')} / {val}"
                    if val is not None else "not run (--val-fraction 0)"),
                   ("median tokens/s", summary.get("tokens_per_s")), ("training time (s)", summary.get("seconds")),
                   ("peak memory (MiB)", summary.get("peak_memory_mib")),
                   ("device / precision / threads",
                    f"{summary['device']} / {summary['precision']} / {summary.get('threads')}")]
    overlap = summary.get("overlap") or []
    return "\n".join([
        "---", "library_name: transformers", "tags: [orchard, sft, agent-trajectories]", "---", "",
        f"# {Path(config['out']).name}", "",
        f"A {kind} of **{summary['base_model']}** by `orchard train` on agent trajectories recorded by "
        "orchard's proxy (each model call of a harness, as the harness made it).", "",
        "## Data", "",
        _table([("trajectory files", ", ".join(f"`{p}`" for p in config["trajectories"])),
                ("episodes read / used", f"{load['episodes_read']} / {load['episodes_used']}"),
                ("dropped", json.dumps(load["filtered"]) if load["filtered"] else "none"),
                ("filters", f"only resolved: {filters['only_resolved']}; suites: {filters['suites'] or 'any'}; "
                            f"harnesses: {filters['harnesses'] or 'any'}; teachers: {filters['teachers'] or 'any'}"),
                ("builder", samples["builder"]), ("tool-call format", samples["format"]),
                ("samples / turns", f"{samples['samples']} / {samples['turns']}"),
                ("tokens / trained (assistant) tokens", f"{samples['tokens']} / {samples['trainable_tokens']}"),
                ("masked share", samples["masked_share"]),
                ("merge breaks / length breaks", f"{samples['merge_breaks']} / {samples['length_breaks']}"),
                ("truncated / dropped too long", f"{samples['truncated']} / {samples['dropped_too_long']}"),
                ("recorded token ids used / rejected", f"{samples['token_ids_used']} / {samples['token_ids_rejected']}"),
                ("eval suite checked for overlap", config.get("eval_suite") or "none"),
                ("overlapping task ids (allowed)", ", ".join(overlap) if overlap else "none")]), "",
        "## Hyper-parameters", "",
        _table([("epochs / max steps", f"{config['epochs']} / {config['max_steps']}"),
                ("peak learning rate", summary["lr"]), ("schedule", f"warm-up {config['warmup_ratio']}, cosine to 0"),
                ("max sequence length", config["max_seq_len"]), ("packing", config["packing"]),
                ("batch size x grad accum", f"{config['batch_size']} x {config['grad_accum']}"),
                ("weight decay / grad clip", f"{config['weight_decay']} / {config['max_grad_norm']}"),
                ("LoRA", f"r={config['lora_r']} alpha={config['lora_alpha']} dropout={config['lora_dropout']}"
                         if lora else "no"),
                ("seed", config["seed"])]), "",
        "## Results", "", _table(result_rows), "",
        "`training_log.jsonl` has one line per optimizer step; `loss.png` plots it. Loss is the mean "
        "cross-entropy of the assistant tokens only (no system, user or tool token is trained).", "",
        "## Use", "",
        "A plain transformers checkpoint: `AutoModelForCausalLM.from_pretrained(DIR)`, vLLM or SGLang "
        "(`vllm serve DIR`), or `orchard serve --model DIR`." if not lora or config["merge"] else
        "`PeftModel.from_pretrained(base, DIR)`, or vLLM with `--enable-lora --lora-modules name=DIR`.", "",
    ])
