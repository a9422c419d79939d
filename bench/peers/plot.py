"""The peer benchmark's pictures: `python plot.py RESULTS.json OUTDIR` (bench/peers/run.js runs it).

One PNG per workload (and per shared-memory variant): median latency against throughput (both
axes logarithmic: the servers and the compute limit differ by orders of magnitude), a line per
server through its concurrency points, the raw onnxruntime limit as a dashed vertical line at its
highest throughput. And, when the run has the density workload, <date>-density.png: p99 latency
against the device budget (a fraction of the catalog's weights): Stowage's measured line, the
peers' all-resident points, and the peers' computed lower bound under the same budget (their
fastest cold load, where 1% or more of the requests miss an LRU of that size). Titles carry the
date and the machine, and a footnote the versions.
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
versions = ", ".join(f"{k} {v}" for k, v in results["versions"].items())


def save(fig, ax, name, xlabel, ylabel, title):
    """Both axes logarithmic, the title over the date and the machine, the versions under the plot
    (a picture passed around alone still says what was measured); written to OUTDIR/name."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title(f"{title} - {results['date']}\n{results['machine']}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, versions, fontsize=6, color="grey")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(os.path.join(outdir, name), dpi=110)
    plt.close(fig)


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
    save(fig, ax, f"{results['date']}-{workload}{'-shm' if shm else ''}.png", "requests/s", "p50 latency (ms)", f"{workload}{', system shared memory' if shm else ''}")

density = results.get("density")
if density:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = {"mlserver": "MLServer", "triton": "Triton (PyTriton)"}
    points = sorted((r for r in density["stowage"] if "error" not in r), key=lambda r: r["fraction"])
    ax.plot([r["fraction"] for r in points], [r["p99"] / 1000 for r in points], marker="o", label="Stowage (measured)")
    for name, peer in density["peers"].items():
        resident = peer.get("resident")
        if resident and "error" not in resident:
            ax.plot([1], [resident["p99"] / 1000], marker="s", linestyle="none", label=f"{names[name]}, all resident (measured)")
        cold = peer.get("coldLoad") or {}
        if cold.get("loadMs"):
            fastest = min(a + b for a, b in zip(cold["loadMs"], cold["firstInferMs"]))
            bound = [r["fraction"] for r in density["lru"] if r["missRate"] >= 0.01]
            if bound:
                ax.plot(bound, [fastest] * len(bound), marker="^", linestyle="--", label=f"{names[name]}, load on a miss (p99 at least; computed)")
    save(fig, ax, f"{results['date']}-density.png", "device budget (fraction of the catalog's weights)", "p99 latency (ms)", f"density: {density['models']} models, Zipf(1.0), {density['rate']} req/s")
