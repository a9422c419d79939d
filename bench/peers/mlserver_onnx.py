"""An MLServer runtime that serves an ONNX file with onnxruntime (MLServer 1.7 ships none).

Loaded by MLServer from a model-settings.json whose `implementation` names this class and whose
`parameters.uri` is the .onnx file; PEER_ORT_THREADS sets ONNX Runtime's intra-op threads (which do not spin, as Stowage's do not), so
every server in the benchmark computes with the same number of threads.
"""
import os

import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OnnxModel(MLModel):
    async def load(self) -> bool:
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(os.environ.get("PEER_ORT_THREADS", "0"))
        # No spinning between runs, as Stowage: with many sessions, idle ones would spin on the cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(self.settings.parameters.uri, options, providers=["CPUExecutionProvider"])
        self._outputs = [o.name for o in self._session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
        values = self._session.run(None, feeds)
        return InferenceResponse(
            model_name=self.name,
            outputs=[NumpyCodec.encode_output(name, value) for name, value in zip(self._outputs, values)],
        )
