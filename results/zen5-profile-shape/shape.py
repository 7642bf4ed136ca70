"""Each cost profile's C_v shape: raw medians at ℓ = 128 and the fitted curve at ℓ = 300, relative to a 5-node tree.
Usage: python results/zen5-profile-shape/shape.py PROFILE.json [...]"""
import json, sys
from caddtree.costmodel import load_cost_model
print("profile                busy sweeps | raw ℓ=128, ms relative to n=5: n=0 1 3 4 6 7 8 10 12 | fit ℓ=300 rel n=5: 0 3 8 10")
for p in sys.argv[1:]:
    d = json.load(open(p)); m = d["measurements"]
    ns = m["ns"]; v = m["verify_ms"][0]
    i5 = ns.index(5)
    rel = " ".join(f"{v[ns.index(n)] - v[i5]:+5.1f}" for n in (0, 1, 3, 4, 6, 7, 8, 10, 12))
    c = load_cost_model(p).verify_curve(300)
    fit = " ".join(f"{c[n] - c[5]:+5.1f}" for n in (0, 3, 8, 10))
    name = p.split('/')[-2] if p.endswith('/cost_model.json') else p.split('/')[-1].removesuffix('.json')
    load = f"{m['busy']:.2f}" if 'busy' in m else '  - '
    print(f"{name:22s} {load} {m.get('sweeps', '-'):>2} | {rel} | {fit}   (C5 raw {v[i5]:.1f})")
