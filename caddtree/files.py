"""Where caddtree keeps and finds things on disk, and what it reads about the machine: the per-user cache, the prompt
data directory, atomic file writes, the CPU's name and flags. One home for each, used by every other module.

Invariant of every write here: a reader sees the old file or the new one, never a half-written file (an interrupted
run or two processes writing the same profile at once leave no corrupt file behind).
"""
from __future__ import annotations

import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from caddtree.errors import CaddtreeError

DATA_ENV = "CADDTREE_DATA"
CACHE_ENV = "CADDTREE_CACHE"
_REPO = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """Per-user cache (dequantised weights, cost profiles, built kernels); $CADDTREE_CACHE overrides."""
    root = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "caddtree")
    return Path(root)


def find_data_dir(path=None) -> Path:
    """The prompt data dir: the argument (--data-dir), else $CADDTREE_DATA, else <repo>/../shared/data, else
    ./../shared/data."""
    if path is None:
        path = os.environ.get(DATA_ENV) or None
    if path is not None:
        p = Path(path).expanduser()
        if not p.is_dir():
            raise CaddtreeError(f"data dir {p} does not exist: pass --data-dir or set {DATA_ENV}")
        return p
    for p in (_REPO.parent / "shared" / "data", Path.cwd() / ".." / "shared" / "data"):
        if p.is_dir():
            return p.resolve()
    raise CaddtreeError(f"no data dir found (looked for ../shared/data): pass --data-dir or set {DATA_ENV}")


def atomic_write(path, write: Callable[[Path], object]) -> Path:
    """write(tmp) into a per-process temporary file beside `path`, then rename it onto `path` (atomic)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # per process: parallel runs may write the same path
    try:
        write(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_text(path, text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def publish_dir_once(dest: Path, build: Callable[[Path], object]) -> None:
    """build(tmp) into a private temp dir next to dest, then move it to dest atomically. Two processes may build at
    once (one job per core on a fresh machine): the first to publish wins and the other drops its identical copy.
    dest counts as published once it holds config.json."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        build(tmp)
        tmp.rename(dest)
    except OSError:
        if not (dest / "config.json").is_file():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _cpuinfo_lines() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return f.readlines()
    except OSError:
        return []


def cpu_name() -> str:
    """The CPU's model name (for figures and cost-profile provenance)."""
    for line in _cpuinfo_lines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_tag() -> str:
    """Architecture + model name + feature flags: the key of code built with -march=native, so a shared cache never
    runs code built for another CPU."""
    return platform.machine() + "".join(
        line for line in _cpuinfo_lines() if line.startswith(("model name", "flags", "Features")))
