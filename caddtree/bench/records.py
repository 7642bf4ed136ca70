"""Bench records on disk: one JSON object per (dataset, method, prompt, config), appended as each finishes, in
`records*.jsonl` (or gzipped, `records*.jsonl.gz`, as committed under results/).
"""
from __future__ import annotations

import datetime
import gzip
import json
from pathlib import Path


def utc_timestamp() -> str:
    """Now, UTC, to the second: when a record or a run was made."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def config_key(target_name: str, max_new_tokens: int, sampling, turns: int, seed: int) -> str:
    return (f"target={target_name}|T={sampling.temperature}|top_k={sampling.top_k}|top_p={sampling.top_p}"
            f"|max_new={max_new_tokens}|turns={turns}|seed={seed}")


def record_key(r: dict) -> tuple:
    return (r["dataset"], r["method"], str(r["prompt_id"]), r["config"])


def record_files(run_dir) -> list[Path]:
    """A run directory's record files: every records*.jsonl (the parts of a split run) and records*.jsonl.gz."""
    run_dir = Path(run_dir)
    return sorted([*run_dir.glob("records*.jsonl"), *run_dir.glob("records*.jsonl.gz")])


def load_records(path) -> list[dict]:
    """Records of one file (.jsonl or .jsonl.gz), or of every record file in a directory (`record_files`)."""
    path = Path(path)
    if path.is_dir():
        return [r for p in record_files(path) for r in load_records(p)]
    if not path.is_file():
        return []
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a kill mid-write: that prompt is simply redone
            pass
    return out


def identical_to_plain(records: list[dict], plain_run) -> int:
    """How many of `records` (a run without `ar`) have the same output tokens as plain decoding of the same prompt
    and settings in the run directory `plain_run`. Raises KeyError where that run lacks a prompt."""
    config = records[0]["config"]
    plain = {(r["dataset"], r["prompt_id"]): r["tokens"] for r in load_records(plain_run)
             if r["method"] == "ar" and r["config"] == config}
    return sum(r["tokens"] == plain[(r["dataset"], r["prompt_id"])] for r in records)
