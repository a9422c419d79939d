"""The real server (`node main.js`) as a child process, for the Python suites (test/compat,
test/export). No client library is imported here: KServe's SDK and tritonclient each register
the same protos, so a module both suites load must import neither."""
import json
import pathlib
import shutil
import subprocess


ROOT = pathlib.Path(__file__).resolve().parents[2]


def serve(tmp, node_yaml):
    """Start `node main.js` on tmp/node.yaml; returns the process and its gRPC address once it serves."""
    proc, entry = serve_entry(tmp, node_yaml)
    return proc, entry["grpc"]


def serve_entry(tmp, node_yaml):
    """As serve, but returns the whole "serving" log line (its grpc, http and admin addresses)."""
    (tmp / "node.yaml").write_text(node_yaml)
    proc = subprocess.Popen(["node", str(ROOT / "main.js"), str(tmp / "node.yaml")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("msg") == "serving":
            return proc, entry
    proc.terminate()
    raise RuntimeError(f"server exited before serving: {proc.stderr.read()}")


def stop_server(proc, tmp):
    proc.terminate()
    proc.wait(timeout=30)
    shutil.rmtree(tmp, ignore_errors=True)
