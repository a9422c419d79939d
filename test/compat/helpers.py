"""Helpers shared by the compatibility suites."""
import pytest
from tritonclient.utils import InferenceServerException


def expect_error(call, status, *fragments):
    """`call` must fail with tritonclient's InferenceServerException of `status`, its message naming each fragment."""
    with pytest.raises(InferenceServerException) as info:
        call()
    assert info.value.status() == status, info.value
    for f in fragments:
        assert f in info.value.message(), info.value.message()
