"""Our proto/ files must agree field by field with the descriptors that NVIDIA's
tritonclient ships (its generated service_pb2 / model_config_pb2): every message
and field we declare exists there with the same number, type and label."""
import pathlib
import subprocess
import sys
import tempfile

from google.protobuf import descriptor_pb2
from tritonclient.grpc import model_config_pb2, service_pb2

PROTO_DIR = pathlib.Path(__file__).resolve().parents[2] / "proto"


def _messages(fd, prefix):
    out = {}

    def walk(m, path):
        name = f"{path}.{m.name}"
        out[name] = {f.name: (f.number, f.type, f.label, f.type_name) for f in m.field}
        for n in m.nested_type:
            walk(n, name)

    for m in fd.message_type:
        walk(m, prefix)
    return out


def _ours():
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "set.pb"
        subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_DIR}",
             f"--descriptor_set_out={out}", "grpc_service.proto", "model_config.proto"],
            check=True)
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    result = {}
    for fd in fds.file:
        result.update(_messages(fd, "." + fd.package))
    return result, {s.name: s for fd in fds.file for s in fd.service}


def _theirs():
    result = {}
    for mod in (service_pb2, model_config_pb2):
        fd = descriptor_pb2.FileDescriptorProto()
        mod.DESCRIPTOR.CopyToProto(fd)
        result.update(_messages(fd, "." + fd.package))
    return result


def test_every_field_matches_tritonclient():
    ours, _ = _ours()
    theirs = _theirs()
    checked = 0
    for msg, fields in ours.items():
        assert msg in theirs, f"{msg} is not a message of Triton's protos"
        for name, spec in fields.items():
            assert name in theirs[msg], f"{msg}.{name} is not in Triton's {msg}"
            assert spec == theirs[msg][name], f"{msg}.{name}: ours {spec}, Triton's {theirs[msg][name]}"
            checked += 1
    assert checked > 200


def test_service_declares_every_triton_rpc():
    _, services = _ours()
    ours = {m.name: (m.input_type, m.output_type, m.client_streaming, m.server_streaming)
            for m in services["GRPCInferenceService"].method}
    fd = descriptor_pb2.FileDescriptorProto()
    service_pb2.DESCRIPTOR.CopyToProto(fd)
    theirs = {m.name: (m.input_type, m.output_type, m.client_streaming, m.server_streaming)
              for m in fd.service[0].method}
    assert ours == theirs
