"""NVIDIA Triton for the peer benchmark: `python pytriton_serve.py MODELS.json GRPC_PORT HTTP_PORT`.

The tritonserver binary inside the nvidia-pytriton wheel, serving each model as a Python model
(PyTriton's: Triton's dynamic batcher in front, the batch handed to this process, which runs it
with onnxruntime). It is what Triton can be here without its ONNX Runtime backend, which PyPI
does not carry: Triton's C++ gRPC front end and batcher, with a Python hop per batch. MODELS.json
as for mlserver_serve.py; `max_batch_time` (seconds) becomes the batcher's queue delay.
PEER_ORT_THREADS sets ONNX Runtime's intra-op threads (which do not spin, as Stowage's do not).
"""
import json
import os
import sys

import numpy as np
import onnxruntime as ort
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

DTYPES = {"FP32": np.float32, "FP16": np.float16, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32, "UINT8": np.uint8, "INT8": np.int8, "BOOL": np.bool_}

def infer_function(path: str):
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(os.environ.get("PEER_ORT_THREADS", "0"))
    # No spinning between runs, as Stowage: with many sessions, idle ones would spin on the cores.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]

    @batch
    def infer(**inputs):
        return dict(zip(names, session.run(None, inputs)))

    return infer


def tensors(specs):
    # PyTriton's shapes leave out the batch axis (the first); -1 stays for a symbolic axis.
    return [Tensor(name=t["name"], dtype=DTYPES[t["datatype"]], shape=tuple(t["shape"][1:]) or (-1,)) for t in specs]


def bind_model(triton: Triton, m: dict) -> None:
    """Bind one model of MODELS.json: after triton.run() this also loads it into the server."""
    triton.bind(
        model_name=m["name"],
        infer_func=infer_function(m["file"]),
        inputs=tensors(m["inputs"]),
        outputs=tensors(m["outputs"]),
        config=ModelConfig(max_batch_size=m["max_batch_size"], batcher=DynamicBatcher(max_queue_delay_microseconds=int(m["max_batch_time"] * 1e6))),
    )


def triton_config(grpc_port: int, http_port: int) -> tuple:
    # Restrictions off: perf_analyzer calls the statistics and shared-memory endpoints without a token.
    # PyTriton itself talks to the server over HTTP: it needs a real port.
    config = TritonConfig(grpc_port=grpc_port, grpc_address="127.0.0.1", http_port=http_port, http_address="127.0.0.1", allow_metrics=False)
    return config, TritonSecurityConfig(restricted_endpoints=[])


if __name__ == "__main__":
    models = json.load(open(sys.argv[1]))
    config, security = triton_config(int(sys.argv[2]), int(sys.argv[3]))
    with Triton(config=config, security_config=security) as triton:
        for m in models:
            bind_model(triton, m)
        print("serving", flush=True)
        triton.serve()
