"""What CaDDTree's per-round policy costs on the CPU: the tree-size choice and the tree builder's early stop, at the
sizes a round really has. A benchmark, not a test (the suite only checks what the policy chooses; how fast it
chooses depends on the machine and its load).

Per draft sharpness (flat .. peaky marginals, [positions, vocab]), the median over rounds of:
- choose_tree_size: the θ-argmax over the full best-first tree's weights (`max_nodes` nodes at most);
- TreeStop: the stop rule alone, fed the same weights one node at a time until it stops (what `build_tree` calls);
- build+stop / build: `build_tree` with TreeStop (what the engine runs per round) and the full build without it.

Usage (repository root, venv active):
    python scripts/bench_policy_cost.py [--profile COST.json] [--vocab 49152] [--positions 16] [--rounds 200]
Without --profile, a cost model fitted to a reference profile (127 nodes, like the shipped ones) is used.
"""
import argparse
import statistics
import time

import torch

from caddtree.budget import TreeStop, choose_tree_size
from caddtree.costfile import load_cost_model
from caddtree.costmodel import fit_cost_model
from caddtree.tree import build_tree

REFERENCE = {"ns": [0, 1, 3, 7, 15, 31, 63, 127], "ctxs": [128, 512, 2048],
             "verify_ms": [[31, 35, 49, 58, 64, 82, 123, 190], [35, 40, 56, 67, 74, 92, 138, 209],
                           [47, 60, 77, 93, 105, 131, 194, 307]],
             "draft_ms": [2.0, 2.5, 4.0], "overhead_ms": 0.5}


def median_us(fn, rounds: int) -> float:
    fn()  # warm
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e6 * statistics.median(times)


def feed(stop: TreeStop, weights: list[float]) -> int:
    for m, w in enumerate(weights, 1):
        if stop(w):
            return m
    return len(weights)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", help="a cost model JSON (`caddtree profile`); default: the reference fit")
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--positions", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cost = load_cost_model(args.profile) if args.profile else fit_cost_model(REFERENCE)
    budget = cost.max_nodes
    gen = torch.Generator().manual_seed(0)
    print(f"max_nodes {budget}, ctx {args.ctx}, marginals [{args.positions}, {args.vocab}], "
          f"median of {args.rounds} rounds, µs")
    print(f"{'sharpness':>9} {'nodes':>5} {'chosen':>6} {'built':>5} {'choose_tree_size':>16} {'TreeStop':>8} "
          f"{'build+stop':>10} {'build':>8}")
    for sharpness in (0.5, 3.0, 8.0, 20.0):
        lp = torch.log_softmax(sharpness * torch.randn(args.positions, args.vocab, generator=gen), dim=-1)
        full = build_tree(lp, budget)
        lw = full.log_weights
        weights = lw.tolist()
        choice = choose_tree_size(lw, cost, args.ctx)
        built = feed(TreeStop(cost, args.ctx), weights)
        few = max(args.rounds // 4, 5)  # a build takes ~10x longer
        t_choose = median_us(lambda lw=lw: choose_tree_size(lw, cost, args.ctx), args.rounds)
        t_stop = median_us(lambda w=weights: feed(TreeStop(cost, args.ctx), w), args.rounds)
        t_build_stop = median_us(lambda lp=lp: build_tree(lp, budget, TreeStop(cost, args.ctx)), few)
        t_build = median_us(lambda lp=lp: build_tree(lp, budget), few)
        print(f"{sharpness:>9.1f} {len(full):>5} {choice.n:>6} {built:>5} {t_choose:>16.1f} {t_stop:>8.1f} "
              f"{t_build_stop:>10.1f} {t_build:>8.1f}")


if __name__ == "__main__":
    main()
