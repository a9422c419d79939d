"""Helpers shared by the compatibility suites."""
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException


def expect_error(call, status, *fragments):
    """`call` must fail with tritonclient's InferenceServerException of `status`, its message naming each fragment."""
    with pytest.raises(InferenceServerException) as info:
        call()
    assert info.value.status() == status, info.value
    for f in fragments:
        assert f in info.value.message(), info.value.message()


def images_input(images):
    """Digit images (8x8, pixel values 0..16) as the `image` input of bundles/digits."""
    x = np.asarray(images, dtype=np.float32).reshape(-1, 8, 8)
    inp = grpcclient.InferInput("image", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return inp
