"""Tables of results/gate-reset/: the realised gain of stage 2 per band (all rounds, and per prompt), and the gain
per round that two estimators of the gate would have collected on those rounds (pure Python, no model).

    python results/gate-reset/analyse.py > results/gate-reset/analysis.txt

The policy simulation walks each prompt's rounds in order; where the gate skips, it sees nothing (a real skip would
also change the later rounds, so this is an approximation). "ema" is the estimator up to 78c5c9f (an EMA started at
the first observation: after a 3-round warm-up the first gain weighs 0.81); "weighted mean" the one since (weights
memory ** age over their sum).
"""
import collections
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from caddtree.budget import DraftGate  # noqa: E402

HERE = Path(__file__).parent


class EmaGate(DraftGate):
    def observe(self, band, theta1, theta2):
        g = theta2 - theta1
        self.gain[band] = g if self.seen[band] == 0 else self.memory * self.gain[band] + (1 - self.memory) * g
        self.seen[band] += 1


def simulate(rows, make):
    by_prompt = collections.defaultdict(list)
    for r in rows:
        by_prompt[r["prompt"]].append(r)
    total, runs = 0.0, 0
    for rs in by_prompt.values():
        gate = make()
        for r in rs:
            if gate.run_rest(r["band"]):
                gate.observe(r["band"], r["t1"], r["t2"])
                total, runs = total + r["t2"] - r["t1"], runs + 1
    return total / len(rows), runs / len(rows)


for name in ["mbpp_headline_profile", "livecodebench_headline_profile", "mbpp_loaded_profile",
             "livecodebench_loaded_profile"]:
    rows = json.load(open(HERE / f"gains_{name}.json"))
    print(f"## {name}: {len(rows)} rounds, gain = θ2 - θ1 in tokens/s")
    per_band = collections.defaultdict(list)
    per_prompt = collections.defaultdict(list)
    for r in rows:
        per_band[r["band"]].append(r["t2"] - r["t1"])
        per_prompt[(r["band"], r["prompt"])].append(r["t2"] - r["t1"])
    for b in sorted(per_band):
        g = np.array(per_band[b])
        means = sorted(np.mean(v) for (bb, _), v in per_prompt.items() if bb == b and len(v) >= 3)
        print(f"band {b}: {len(g)} rounds, mean {g.mean():+.2f}, median {np.median(g):+.2f}, P(gain > 0) "
              f"{np.mean(g > 0):.2f}; per-prompt means (>= 3 rounds) {' '.join(f'{m:+.1f}' for m in means)}")
    best = sum(max(0.0, sum(v)) for v in per_prompt.values()) / len(rows)
    print(f"gain per round: stage 2 always {np.mean([r['t2'] - r['t1'] for r in rows]):+.2f}, "
          f"best per (prompt, band) in hindsight {best:+.2f}")
    for label, make in [("ema (to 78c5c9f)", EmaGate), ("weighted mean", DraftGate)]:
        gain, frac = simulate(rows, make)
        print(f"gate, {label}: {gain:+.2f} per round, stage 2 in {frac:.0%} of rounds")
    print()
