"""Triton's cold load, for the density workload: `python pytriton_cold_load.py MODELS.json GRPC_PORT HTTP_PORT COUNT`.

What Triton must do when a model is not resident: load it. A PyTriton model cannot be unloaded
and loaded again through Triton's repository API (its Python stub is started by PyTriton, so
RepositoryModelLoad after an unload fails polling the repository), so a model's load here is
what PyTriton does for it once the server runs: bind() (which writes the model's repository
entry, has Triton load it and start its Python stub, and the stub opens the ONNX file with
onnxruntime), then the first inference through Triton's gRPC front end. Binds the first COUNT
models of MODELS.json one after another and prints one JSON line:
{"load_ms": [...], "first_infer_ms": [...]}.
"""
import json
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient
from pytriton.triton import Triton

from pytriton_serve import DTYPES, bind_model, triton_config

models_file, grpc_port, http_port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
models = json.load(open(models_file))[:count]
config, security = triton_config(grpc_port, http_port)
load_ms, first_ms = [], []
with Triton(config=config, security_config=security) as triton:
    triton.run()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    for m in models:
        t0 = time.perf_counter()
        bind_model(triton, m)
        t1 = time.perf_counter()
        inputs = []
        for t in m["inputs"]:
            shape = [1] + [d if d > 0 else 1 for d in t["shape"][1:]]
            i = grpcclient.InferInput(t["name"], shape, t["datatype"])
            i.set_data_from_numpy(np.zeros(shape, dtype=DTYPES[t["datatype"]]))
            inputs.append(i)
        client.infer(m["name"], inputs)
        t2 = time.perf_counter()
        load_ms.append((t1 - t0) * 1000)
        first_ms.append((t2 - t1) * 1000)
    client.close()
print(json.dumps({"load_ms": load_ms, "first_infer_ms": first_ms}), flush=True)
