"""Prompt loaders for the eight benchmarks of the paper, read from the local data dir (see shared/data/MANIFEST.md).

Data dir: `data_dir` argument (CLI `--data-dir`), else env CADDTREE_DATA, else `shared/data` beside the repository
(`<repo>/../shared/data`), else `../shared/data` relative to the working directory. If a benchmark's file is missing
and the `datasets` package is installed with a reachable hub, its Hugging Face dataset is tried as a fallback.

Prompt formats (the text is then put through the target's chat template as one user turn):
- math (math500, gsm8k, aime25): problem + "\\nPlease reason step by step, and put your final answer within \\boxed{}."
- code: HumanEval "Complete the following Python function:" + the code stub; MBPP the task text + its tests (the
  usual MBPP prompt); LiveCodeBench its own generation prompt, as shipped.
- chat: MT-Bench the first turn (both turns with turns=2: the bench answers turn 1 itself first); AlpacaEval the
  instruction.
`load_prompts(name, n)` returns the first n records, in file order, as dicts {id, prompt} (+ `turns` for MT-Bench).
`load_prompt_file(path)` reads a user's own set: JSON lines (or a JSON array, or gzipped lines), each with a `prompt`
string (one user turn through the chat template) or a `messages` list of {role, content} (the whole chat), and an
optional `id`.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from caddtree.errors import CaddtreeError
from caddtree.files import DATA_ENV, find_data_dir

MATH_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."
DATASETS = ("math500", "gsm8k", "aime25", "humaneval", "mbpp", "livecodebench", "mt_bench", "alpaca")
KIND = {"math500": "math", "gsm8k": "math", "aime25": "math", "humaneval": "code", "mbpp": "code",
        "livecodebench": "code", "mt_bench": "chat", "alpaca": "chat"}
FILES = {"math500": "math500/test.jsonl", "gsm8k": "gsm8k/test.jsonl", "aime25": "aime2025/aime25.jsonl",
         "humaneval": "humaneval/HumanEval.jsonl.gz", "mbpp": "mbpp/mbpp.jsonl",
         "livecodebench": "livecodebench/livecodebench_v5.jsonl", "mt_bench": "mt_bench/question.jsonl",
         "alpaca": "alpaca_eval/text_davinci_003/model_outputs.json"}
HF_IDS = {  # fallback only: (dataset id, config, split)
    "math500": ("HuggingFaceH4/MATH-500", None, "test"), "gsm8k": ("openai/gsm8k", "main", "test"),
    "aime25": ("math-ai/aime25", None, "test"), "humaneval": ("openai/openai_humaneval", None, "test"),
    "mbpp": ("google-research-datasets/mbpp", "full", "test"),
    "livecodebench": ("livecodebench/code_generation_lite", None, "test"),
    "mt_bench": ("HuggingFaceH4/mt_bench_prompts", None, "train"), "alpaca": ("tatsu-lab/alpaca_eval", None, "eval"),
}


def read_records(path: Path) -> list[dict]:
    """A data file (JSON array, JSON lines, or gzipped JSON lines) -> its records; one-line CaddtreeError naming
    the file and line when it cannot be read as such (a truncated copy, the wrong file)."""
    line = 0
    try:
        if path.suffix == ".json":
            recs = json.loads(path.read_text(encoding="utf-8"))
        else:
            opener = gzip.open if path.suffix == ".gz" else open
            recs = []
            with opener(path, "rt", encoding="utf-8") as f:
                for line, text in enumerate(f, 1):
                    if text.strip():
                        recs.append(json.loads(text))
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
        where = f" line {line}" if line else ""
        raise CaddtreeError(f"{path}{where} cannot be read ({type(e).__name__}: {str(e).splitlines()[0]}): copy it "
                            f"again as shared/data/MANIFEST.md describes") from None
    if not isinstance(recs, list) or not all(isinstance(r, dict) for r in recs):
        raise CaddtreeError(f"{path} does not hold a list of records: copy it again as shared/data/MANIFEST.md "
                            f"describes")
    return recs


def _math(problem: str) -> str:
    return problem.strip() + MATH_SUFFIX


def _format(name: str, recs: list[dict]) -> list[dict]:
    out = []
    for i, r in enumerate(recs):
        if name == "math500":
            out.append({"id": r.get("unique_id", i), "prompt": _math(r["problem"])})
        elif name == "gsm8k":
            out.append({"id": i, "prompt": _math(r["question"])})
        elif name == "aime25":  # QwQ's copy: problem + "\nPlease reason step by step, ... \boxed{}" (clean LaTeX)
            text = r.get("prompt") or r["problem"]
            cut = text.find("\nPlease reason step by step")
            out.append({"id": i, "prompt": _math(text[:cut] if cut >= 0 else text)})
        elif name == "humaneval":
            out.append({"id": r["task_id"], "prompt": "Complete the following Python function:\n\n```python\n"
                                                      + r["prompt"] + "```"})
        elif name == "mbpp":
            tid = int(r["task_id"])
            if 11 <= tid <= 510:  # the test split
                tests = "\n".join(r.get("test_list") or [])
                out.append({"id": tid, "prompt": f"{r['text'].strip()} Your code should pass these tests:\n\n"
                                                 f"{tests}"})
        elif name == "livecodebench":
            out.append({"id": r.get("question_id", i), "prompt": r.get("prompt") or r["question_content"]})
        elif name == "mt_bench":
            turns = r.get("turns") or [r.get("prompt")]
            out.append({"id": r.get("question_id", i), "prompt": turns[0], "turns": list(turns)})
        elif name == "alpaca":
            out.append({"id": i, "prompt": r["instruction"]})
    return out


def _from_hub(name: str) -> list[dict]:
    try:
        import datasets
    except ImportError:
        raise CaddtreeError(f"{name}: no local file and the `datasets` package is not installed: pass --data-dir "
                            f"or set {DATA_ENV}") from None
    hid, cfg, split = HF_IDS[name]
    try:
        return list(datasets.load_dataset(hid, cfg, split=split))
    except Exception as e:  # noqa: BLE001  no hub access, renamed dataset ...
        raise CaddtreeError(f"{name}: no local file and the hub dataset {hid} failed to load "
                            f"({type(e).__name__}): pass --data-dir or set {DATA_ENV}") from None


def load_prompts(name: str, n: int | None = None, data_dir=None) -> list[dict]:
    """First n prompts of a benchmark as [{id, prompt}] (MT-Bench also has `turns`), in file order."""
    if name not in FILES:
        raise CaddtreeError(f"unknown dataset '{name}': choose from {', '.join(DATASETS)}")
    root, err = None, None
    try:
        root = find_data_dir(data_dir)
    except CaddtreeError as e:
        err = e
    path = root / FILES[name] if root is not None else None
    if path is not None and path.is_file():
        recs = read_records(path)
    else:
        try:
            recs = _from_hub(name)
        except CaddtreeError:
            if err is not None:
                raise err from None
            raise CaddtreeError(f"{name}: {path} is missing: pass --data-dir (or set {DATA_ENV}) to a dir laid out as "
                                f"shared/data (see its MANIFEST.md)") from None
    try:
        prompts = _format(name, recs)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CaddtreeError(f"{name}: a record of {path or 'the hub copy'} lacks a usable field "
                            f"({type(e).__name__}: {e}): is this the {name} file of shared/data/MANIFEST.md?") from None
    return prompts if n is None else prompts[:n]


def load_prompt_file(path) -> list[dict]:
    """A user's prompt file -> [{id, prompt} or {id, messages}] in file order (`id` defaults to the record's index);
    one-line CaddtreeError naming the file and the record for anything else."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise CaddtreeError(f"--prompts {path}: no such file (JSON lines with a 'prompt' or 'messages' per line)")
    out = []
    for i, r in enumerate(read_records(path)):
        msgs = r.get("messages")
        if isinstance(r.get("prompt"), str) and r["prompt"]:
            out.append({"id": r.get("id", i), "prompt": r["prompt"]})
        elif isinstance(msgs, list) and msgs and all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                                     and isinstance(m.get("content"), str) for m in msgs):
            out.append({"id": r.get("id", i), "messages": [{"role": m["role"], "content": m["content"]} for m in msgs]})
        else:
            raise CaddtreeError(f"{path} record {i + 1}: needs a non-empty 'prompt' string or a 'messages' list of "
                                f"{{role, content}} strings")
    if not out:
        raise CaddtreeError(f"{path} holds no prompts")
    ids = [str(x["id"]) for x in out]
    if len(set(ids)) != len(ids):
        raise CaddtreeError(f"{path}: ids repeat (e.g. {next(i for i in ids if ids.count(i) > 1)!r}): make them "
                            f"unique or leave them out")
    return out
