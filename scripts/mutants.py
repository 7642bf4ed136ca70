"""Planted bugs: does the test suite catch each one? A fixed list (`mutants.json`) of small, realistic mistakes in
the pure core (accept, tree, budget, costmodel), the engine's round (engine, verify) and the GGUF blocks' repacking
(gguf_weights, kernels), each applied to a scratch copy of the package, then the fast tests (or the mutant's own
"tests" list) run against that copy (stopping at the first failure). A mutant the tests pass
"survives": a behaviour nothing guards.

Usage (repository root, venv active): python scripts/mutants.py [-j JOBS] [NAME ...]   (`make mutants`)
Exit status 1 if any mutant survives.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ["tests/test_accept.py", "tests/test_tree.py", "tests/test_budget.py", "tests/test_costmodel.py",
         "tests/test_round.py", "tests/test_sampling.py", "tests/test_engine.py", "tests/test_drafter.py",
         "tests/test_target.py"]

# name -> (file, text, replacement, tests), from mutants.json; each text occurs exactly once in its file
MUTANTS = {m["name"]: (m["file"], m["text"], m["new"], m.get("tests", TESTS))
           for m in json.loads((Path(__file__).with_name("mutants.json")).read_text())}


def package_copy(prefix: str) -> Path:
    """A temp dir holding a copy of the package (the shipped drafters linked, not copied)."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    shutil.copytree(ROOT / "caddtree", tmp / "caddtree", ignore=shutil.ignore_patterns("drafters", "__pycache__"))
    (tmp / "caddtree" / "drafters").symlink_to(ROOT / "caddtree" / "drafters")
    return tmp


def copy_env(tmp: Path) -> dict:
    """The environment under which `python` imports the copy in tmp, not the installed package."""
    return {**os.environ, "PYTHONPATH": str(tmp), "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def scratch_copy(name: str, file: str, text: str, new: str) -> Path:
    """The package and tests copied into a temp dir, with one mutation applied."""
    tmp = package_copy(f"mutant-{name}-")
    shutil.copytree(ROOT / "tests", tmp / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    path = tmp / "caddtree" / file
    src = path.read_text()
    if src.count(text) != 1:
        raise SystemExit(f"mutant {name}: the text to replace occurs {src.count(text)} times in {file}, not once")
    path.write_text(src.replace(text, new))
    return tmp


def run_mutant(name: str) -> tuple[str, bool, float, str]:
    """-> (name, caught, seconds, the first failing test or '')."""
    file, text, new, tests = MUTANTS[name]
    tmp = scratch_copy(name, file, text, new)
    tests = [t for t in tests if (tmp / t).is_file()]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                          cwd=tmp, env=copy_env(tmp), capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    failed = next((line.split(" ")[1] for line in proc.stdout.splitlines() if line.startswith("FAILED ")), "")
    shutil.rmtree(tmp, ignore_errors=True)
    return name, proc.returncode != 0, seconds, failed


def check_the_copy_is_tested() -> None:
    """The tests must import the mutated copy, not the installed (editable) package: under `copy_env` the copy's
    caddtree is the one imported."""
    tmp = package_copy("mutant-none-")
    out = subprocess.run([sys.executable, "-c", "import caddtree; print(caddtree.__file__)"], cwd=tmp,
                         env=copy_env(tmp), capture_output=True, text=True).stdout
    shutil.rmtree(tmp, ignore_errors=True)
    if not out.startswith(str(tmp)):
        raise SystemExit(f"the scratch copy is not what the tests import ({out.strip()}): check PYTHONPATH handling")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"mutants to run (default: all {len(MUTANTS)})")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    unknown = [n for n in args.names if n not in MUTANTS]
    if unknown:
        raise SystemExit(f"unknown mutant(s): {', '.join(unknown)}; known: {', '.join(MUTANTS)}")
    check_the_copy_is_tested()
    names = args.names or list(MUTANTS)
    caught = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        for name, ok, seconds, failed in pool.map(run_mutant, names):
            caught += ok
            print(f"{'caught  ' if ok else 'SURVIVED'} {name:34s} {seconds:6.1f} s  {failed}", flush=True)
    print(f"mutation score: {caught}/{len(names)} planted bugs caught")
    return 0 if caught == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
