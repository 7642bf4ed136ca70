import json, sys, numpy as np
a = {(r["dataset"], str(r["id"])): r for r in json.load(open(sys.argv[1]))}
b = {(r["dataset"], str(r["id"])): r for r in json.load(open(sys.argv[2]))}
for ds in dict.fromkeys(k[0] for k in a):
    ks = [k for k in a if k[0] == ds and k in b]
    q = np.array([b[k]["pred_ms_per_token"] / a[k]["pred_ms_per_token"] for k in ks])
    print(ds, len(ks), "B/A geo %.3f median %.3f, B better on %d; tau %.2f vs %.2f, nodes %.1f vs %.1f" % (
        np.exp(np.log(q).mean()), np.median(q), (q < 1).sum(), np.mean([a[k]["tau"] for k in ks]),
        np.mean([b[k]["tau"] for k in ks]), np.mean([a[k]["nodes"] for k in ks]), np.mean([b[k]["nodes"] for k in ks])))
