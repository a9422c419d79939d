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


def test_kserve_rest_client_v2_health_and_infer_json_and_binary(rest, server, heldout):
    # KServe's REST client (InferenceRESTClient, protocol v2): what KServe's own components and
    # users' code call, against the REST port; the answers are the gRPC client's.
    from kserve import InferenceRESTClient, RESTConfig

    images = np.array(heldout["images"][:8], dtype=np.float32).reshape(8, 8, 8)

    async def scenario():
        client = InferenceRESTClient(RESTConfig(protocol="v2"))
        base = f"http://{rest}"
        try:
            assert await client.is_server_live(base)
            assert await client.is_server_ready(base)
            assert await client.is_model_ready(base, "digits")
            answers = []
            for binary in (False, True):
                image = InferInput(name="image", shape=list(images.shape), datatype="FP32")
                image.set_data_from_numpy(images, binary_data=binary)
                answers.append(await client.infer(base, InferRequest(model_name="digits", infer_inputs=[image], request_id=f"rest-{binary}"), model_name="digits"))
            return answers
        finally:
            await client.close()

    async def over_grpc():
        client = InferenceGRPCClient(url=server)
        try:
            image = InferInput(name="image", shape=list(images.shape), datatype="FP32")
            image.set_data_from_numpy(images)
            return await client.infer(InferRequest(model_name="digits", infer_inputs=[image]))
        finally:
            await client.close()

    answers = run(scenario())
    want = {o.name: o.as_numpy() for o in run(over_grpc()).outputs}
    for answer in answers:
        got = {o.name: o.as_numpy() for o in answer.outputs}
        assert sorted(got) == ["label", "logits", "probabilities"]
        for name in got:
            np.testing.assert_array_equal(np.asarray(got[name]).reshape(want[name].shape), want[name], err_msg=name)
