#!/usr/bin/env python3
"""A stock grpcio (Python, gRPC C-core) CRI client with default channel
options, for tests/authority.rs: generates the stubs of the named API's
api.proto with grpc_tools.protoc into a temp dir, then on one channel to
unix:SOCKET calls Version, RunPodSandbox, StopPodSandbox and
RemovePodSandbox, and prints one JSON object with what it got.

usage: grpcio_cri.py PROTO_DIR PACKAGE SOCKET POD_NAME LOG_DIR
  PACKAGE is runtime.v1 or runtime.v1alpha2; PROTO_DIR holds its api.proto.
"""
import importlib
import json
import sys
import tempfile

from grpc_tools import protoc
import grpc


def main():
    proto_dir, package, socket, pod_name, log_dir = sys.argv[1:6]
    out = tempfile.mkdtemp(prefix="nidus-grpcio-")
    del package  # the stubs name their package; kept in the call for the log
    if protoc.main(["protoc", f"-I{proto_dir}", f"--python_out={out}", f"--grpc_python_out={out}", "api.proto"]) != 0:
        sys.exit("protoc failed")
    sys.path.insert(0, out)
    pb = importlib.import_module("api_pb2")
    stubs = importlib.import_module("api_pb2_grpc")
    result = {}
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        runtime = stubs.RuntimeServiceStub(channel)
        version = runtime.Version(pb.VersionRequest(version="v1"), timeout=30)
        result["runtime_name"] = version.runtime_name
        result["runtime_api_version"] = version.runtime_api_version
        config = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=pod_name, uid=f"uid-{pod_name}", namespace="default", attempt=0),
            hostname=pod_name,
            log_directory=log_dir,
        )
        pod = runtime.RunPodSandbox(pb.RunPodSandboxRequest(config=config), timeout=60)
        result["pod_id"] = pod.pod_sandbox_id
        status = runtime.PodSandboxStatus(pb.PodSandboxStatusRequest(pod_sandbox_id=pod.pod_sandbox_id), timeout=30)
        result["pod_state"] = pb.PodSandboxState.Name(status.status.state)
        runtime.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=pod.pod_sandbox_id), timeout=60)
        runtime.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=pod.pod_sandbox_id), timeout=60)
        pods = runtime.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=30)
        result["pods_left"] = len(pods.items)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
