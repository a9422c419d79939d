"""MLServer for the peer benchmark: `python mlserver_serve.py MODELS.json WORKDIR GRPC_PORT HTTP_PORT`.

MODELS.json lists each model: name, ONNX file, inputs and outputs ({name, datatype, shape} with
-1 for the batch axis), adaptive batching (max_batch_size, max_batch_time seconds) and
`model_config`: a serialized inference.ModelConfigResponse (base64). MLServer does not implement
Triton's ModelConfig RPC, which perf_analyzer calls once before it measures; this process answers
it with those bytes (a generic gRPC handler beside MLServer's own), and nothing else is changed:
every ModelInfer is MLServer's.
"""
import base64
import json
import os
import sys

import grpc
from mlserver.cli.main import main
from mlserver.grpc import server as grpc_server

configs: dict = {}


def _model_config(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    # inference.ModelConfigRequest: field 1 is the model's name (length-delimited).
    name = request[2 : 2 + request[1]].decode() if request[:1] == b"\x0a" else ""
    if name not in configs:
        context.abort(grpc.StatusCode.NOT_FOUND, f"no model {name!r}")
    return configs[name]


_handler = grpc.method_handlers_generic_handler(
    "inference.GRPCInferenceService",
    {"ModelConfig": grpc.unary_unary_rpc_method_handler(_model_config)},
)
_create_server = grpc_server.GRPCServer._create_server


def _create_server_with_model_config(self):
    server = _create_server(self)
    server.add_generic_rpc_handlers((_handler,))
    return server


def serve(models_file: str, workdir: str, grpc_port: int, http_port: int) -> None:
    models = json.load(open(models_file))
    configs.update({m["name"]: base64.b64decode(m["model_config"]) for m in models})
    grpc_server.GRPCServer._create_server = _create_server_with_model_config
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "settings.json"), "w") as f:
        # Messages up to 2 GiB, as Stowage and Triton take them (MLServer's default is 4 MiB).
        json.dump({"host": "127.0.0.1", "grpc_port": grpc_port, "http_port": http_port, "metrics_endpoint": None, "debug": False, "grpc_max_message_length": 2**31 - 1}, f)
    for m in models:
        folder = os.path.join(workdir, m["name"])
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "model-settings.json"), "w") as f:
            json.dump({
                "name": m["name"],
                "implementation": "mlserver_onnx.OnnxModel",
                "parameters": {"uri": m["file"]},
                "max_batch_size": m["max_batch_size"],
                "max_batch_time": m["max_batch_time"],
                "inputs": m["inputs"],
                "outputs": m["outputs"],
            }, f)
    sys.argv = ["mlserver", "start", workdir]
    main()


# MLServer's inference workers are spawned processes, which import this file again as __mp_main__.
if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
