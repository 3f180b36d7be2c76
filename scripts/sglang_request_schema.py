"""Read the request classes of SGLang's HTTP API from a sglang wheel's source and write their
fields as JSON: what slime-sglang's client is checked against (its test
``test_sglang_wire_format.py``) without installing SGLang, which needs CUDA and whose
``io_struct`` module imports the whole server.

    python scripts/sglang_request_schema.py sglang-0.5.23-*.whl \\
        > packages/slime-sglang/tests/data/sglang_requests.json

(the wheel: ``pip download --no-deps sglang==VERSION``). Fields declared without a default
are required. Every class also has the fields of ``BaseReq``, its base.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile

IO_STRUCT = "sglang/srt/managers/io_struct.py"
CLASSES = (
    "GenerateReqInput",
    "AbortReq",
    "PauseGenerationReqInput",
    "ContinueGenerationReqInput",
    "FlushCacheReqInput",
    "UpdateWeightFromDiskReqInput",
    "UpdateWeightsFromTensorReqInput",
    "InitWeightsUpdateGroupReqInput",
    "UpdateWeightsFromDistributedReqInput",
    "DestroyWeightsUpdateGroupReqInput",
    "ReleaseMemoryOccupationReqInput",
    "ResumeMemoryOccupationReqInput",
)


def fields(node: ast.ClassDef) -> dict[str, bool]:
    """Field name -> required, from a class body's annotated assignments."""
    return {
        item.target.id: item.value is None
        for item in node.body
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
    }


def schema(source: str) -> dict[str, dict[str, bool]]:
    classes = {node.name: node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)}
    base = fields(classes["BaseReq"])
    return {name: {**base, **fields(classes[name])} for name in CLASSES}


def main(wheel: str) -> None:
    version = re.search(r"sglang-([^-]+)-", wheel).group(1)
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read(IO_STRUCT).decode()
    json.dump({"sglang": version, "source": IO_STRUCT, "classes": schema(source)}, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main(sys.argv[1])
