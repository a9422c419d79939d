"""KServe's own Python SDK (its V2 gRPC client, InferenceGRPCClient), unchanged, against the real server."""
import asyncio

import numpy as np
from kserve import InferenceGRPCClient, InferInput, InferRequest


def run(coro):
    return asyncio.run(coro)


def test_kserve_grpc_client_health_metadata_and_infer(server, heldout):
    async def scenario():
        client = InferenceGRPCClient(url=server)
        try:
            assert await client.is_server_live()
            assert await client.is_server_ready()
            assert await client.is_model_ready("digits")
            images = np.array(heldout["images"][:16], dtype=np.float32).reshape(16, 8, 8)
            image = InferInput(name="image", shape=list(images.shape), datatype="FP32")
            image.set_data_from_numpy(images)
            result = await client.infer(InferRequest(model_name="digits", infer_inputs=[image], request_id="ks-1"))
            return result
        finally:
            await client.close()

    result = run(scenario())
    assert result.id == "ks-1"
    outputs = {o.name: o for o in result.outputs}
    assert sorted(outputs) == ["label", "logits", "probabilities"]
    labels = outputs["label"].as_numpy()
    assert labels.shape == (16,)
    assert (labels == np.array(heldout["labels"][:16])).mean() >= 0.9
    np.testing.assert_allclose(outputs["probabilities"].as_numpy().sum(axis=1), 1.0, rtol=1e-5)
