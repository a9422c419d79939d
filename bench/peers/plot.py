"""The peer benchmark's pictures: `python plot.py RESULTS.json OUTDIR` (bench/peers/run.js runs it).

One PNG per workload (and per shared-memory variant): median latency against throughput (both
axes logarithmic: the servers and the compute limit differ by orders of magnitude), a line per
server through its concurrency points, the raw onnxruntime limit as a dashed vertical line at its
highest throughput. Titles carry the date and the machine.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

results = json.load(open(sys.argv[1]))
outdir = sys.argv[2]
rows = results["rows"]
groups = sorted({(r["workload"], r["sharedMemory"]) for r in rows}, key=lambda g: (list(dict.fromkeys(r["workload"] for r in rows)).index(g[0]), g[1]))
for workload, shm in groups:
    here = [r for r in rows if r["workload"] == workload and r["sharedMemory"] == shm and "error" not in r]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for server in dict.fromkeys(r["server"] for r in here):
        points = sorted((r for r in here if r["server"] == server), key=lambda r: r["concurrency"])
        if server == "raw onnxruntime":
            ax.axvline(max(p["rps"] for p in points), linestyle="--", color="grey", label="raw onnxruntime (compute limit)")
            continue
        xs = [p["rps"] for p in points]
        ys = [p["p50"] / 1000 for p in points]
        ax.plot(xs, ys, marker="o", label=server)
        for p, x, y in zip(points, xs, ys):
            ax.annotate(f"c{p['concurrency']}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel("requests/s")
    ax.set_ylabel("p50 latency (ms)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title(f"{workload}{', system shared memory' if shm else ''} - {results['date']}\n{results['machine']}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, f"{results['date']}-{workload}{'-shm' if shm else ''}.png"), dpi=110)
    plt.close(fig)
