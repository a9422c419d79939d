"""A health Watch held by grpcio, the client gRPC services use for client-side health checking:
at SIGTERM it hears NOT_SERVING and its stream ends, and the process exits well within its grace,
whatever the client does with its stream (reads on, or keeps its channel open and asks again)."""
import json
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import grpc

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from server_process import ROOT, serve_entry  # noqa: E402

# Far longer than a shutdown takes (about a second): a process the Watch held until its grace
# would still be running when the wait below gives up, so no timing of a busy machine decides it.
GRACE_SECONDS = 120
SERVING, NOT_SERVING = b"\x08\x01", b"\x08\x02"  # HealthCheckResponse { status }


def _serve():
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="stowage-watch-"))
    shutil.copytree(ROOT / "bundles" / "digits", tmp / "repo" / "digits")
    proc, entry = serve_entry(tmp, f"model_repo: {tmp / 'repo'}\ncache_dir: {tmp / 'cache'}\n"
                                   f"global:\n  endpoints:\n    grpc_port: 0\n    http_port: 0\n    admin_port: 0\n"
                                   f"    shutdown_grace_seconds: {GRACE_SECONDS}\n")
    # Its later log lines read as they come, so that a full pipe never holds it.
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    return proc, entry, tmp


def _watch(channel):
    call = channel.unary_stream("/grpc.health.v1.Health/Watch", request_serializer=lambda m: m, response_deserializer=lambda m: m)
    return call(b"")  # HealthCheckRequest { service: "" }: the server; the request is sent whole


def test_a_grpcio_watch_hears_not_serving_and_does_not_hold_shutdown():
    for config in (None, {"healthCheckConfig": {"serviceName": ""}, "loadBalancingConfig": [{"round_robin": {}}]}):
        proc, entry, tmp = _serve()
        options = [("grpc.service_config", json.dumps(config))] if config else []
        channel = grpc.insecure_channel(entry["grpc"], options=options)
        try:
            stream = _watch(channel)
            assert next(stream) == SERVING
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            heard = []
            try:
                for message in stream:
                    heard.append(message)
            except grpc.RpcError:
                pass  # the stream cut as the port closes: a client may see either
            assert heard[:1] == [NOT_SERVING], f"config {config}: heard {heard}"
            # The Watch holds nothing: the process ends as one with no client does, not at its grace.
            try:
                proc.wait(timeout=GRACE_SECONDS / 2)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"config {config}: still running {time.monotonic() - started:.0f} s after SIGTERM (grace {GRACE_SECONDS} s): the Watch holds shutdown") from None
            assert proc.returncode == 0
        finally:
            channel.close()
            if proc.poll() is None:
                proc.kill()
            shutil.rmtree(tmp, ignore_errors=True)
