"""The hyperparameters of one drafter training run.

Defaults here are those of a Python caller (`train_drafter(target, out, TrainConfig(...))`); the command line has its
own defaults (`command.add_train_parser`, e.g. --draft-vocab 8192) and passes every option it has (`from_args`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path


@dataclass
class TrainConfig:
    # model (a new drafter; a resumed checkpoint or --init-from keeps its own)
    block_size: int = 8  # B: the root + B-1 drafted positions per block
    layers: int = 2  # draft layers
    num_target_layers: int = 3  # m: target layers read as context
    draft_vocab: int = 0  # K most frequent response tokens the drafter predicts; 0 = the full target vocabulary
    init: str = "random"  # "random": draft layers from scratch (DFlash); "target": copied from the target's last layers
    init_from: str | Path | None = None  # an exported drafter to continue (when out/ holds no checkpoint)
    # optimisation
    steps: int = 100000  # max optimizer steps
    max_minutes: float = 60.0  # wall-clock budget; the cosine follows steps or minutes, whichever ends first
    lr: float = 1e-3  # peak learning rate
    warmup: int = 40  # linear warm-up steps
    anchors: int = 64  # blocks per sequence per step
    seqs_per_step: int = 4  # sequences per optimizer step
    max_seq: int = 512  # sequence cap (tokens)
    gamma: float | None = None  # loss decay over block positions; None: 4 for B <= 8, 7 for B >= 16, else 5
    seed: int = 0
    restart_schedule: int = 0  # on resume, start phase N: a new warm-up + cosine (once per phase number)
    # bookkeeping
    ckpt_minutes: float = 5.0  # checkpoint (+ snapshot + validation) interval
    log_every: int = 10  # steps per "train" log line
    export: str | Path | None = None  # after training, export the drafter to this directory

    @classmethod
    def from_args(cls, args) -> TrainConfig:
        """The fields the parsed command line has (every one but log_every)."""
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)})
