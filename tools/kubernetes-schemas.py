"""JSON schemas for kubeconform, derived offline from what the registries carry.

    python tools/kubernetes-schemas.py K8S_MODULE_DIR KSERVE_MODULE_DIR OUT_DIR [KEDA_MODULE_DIR]

K8S_MODULE_DIR is the k8s.io/kubernetes module (its api/openapi-spec/v3/*.json: one OpenAPI 3
document per group-version); KSERVE_MODULE_DIR the github.com/kserve/kserve module (its
config/crd/full/**.yaml CustomResourceDefinitions); KEDA_MODULE_DIR the
github.com/kedacore/keda/v2 module (config/crd/bases/*.yaml: ScaledObject and the rest). tools/validate-kubernetes.sh fetches both from
the Go module proxy. Writes one self-contained schema per kind and version, named as kubeconform's
`{{ .ResourceKind }}{{ .KindSuffix }}.json` template expects (statefulset-apps-v1.json,
service-v1.json, servingruntime-serving-v1alpha1.json), strict: an object that lists its
properties accepts no others, so a misspelt key fails (what `kubeconform -strict` relies on).
"""
import json
import pathlib
import sys

import yaml

REF = "#/components/schemas/"


def strict(node):
    """The schema with every object that lists its properties closed to others."""
    if isinstance(node, list):
        return [strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith(REF):
            out[key] = "#/definitions/" + value[len(REF):]
        elif key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: strict(v) for k, v in value.items()}
        else:
            out[key] = strict(value)
    if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def refs(node, found):
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF):
            found.add(ref[len(REF):])
        for v in node.values():
            refs(v, found)
    elif isinstance(node, list):
        for v in node:
            refs(v, found)


def suffix(group, version):
    """kubeconform's KindSuffix: the group's first label (none for the core group) and the version."""
    return f"-{group.split('.')[0].lower()}-{version.lower()}" if group else f"-{version.lower()}"


def kubernetes(module, out):
    count = 0
    for doc_file in sorted((module / "api" / "openapi-spec" / "v3").glob("*.json")):
        schemas = json.loads(doc_file.read_text()).get("components", {}).get("schemas", {})
        for name, schema in schemas.items():
            kinds = schema.get("x-kubernetes-group-version-kind", [])
            if len(kinds) != 1:
                continue  # not a resource, or one shared by every group (DeleteOptions, WatchEvent)
            for gvk in kinds:
                needed, todo = set(), [name]
                while todo:
                    found = set()
                    refs(schemas[todo.pop()], found)
                    todo += [f for f in found - needed if f in schemas]
                    needed |= found
                document = strict(schema)
                document["definitions"] = {d: strict(schemas[d]) for d in sorted(needed) if d in schemas}
                document["$schema"] = "http://json-schema.org/draft-07/schema#"
                target = out / f"{gvk['kind'].lower()}{suffix(gvk['group'], gvk['version'])}.json"
                target.write_text(json.dumps(document))
                count += 1
    return count


def crds(module, out):
    count = 0
    folder = module / "config" / "crd" / "full"
    if not folder.is_dir():
        folder = module / "config" / "crd" / "bases"  # KEDA's layout
    for crd_file in sorted(folder.rglob("*.yaml")):
        for crd in yaml.safe_load_all(crd_file.read_text()):
            spec = (crd or {}).get("spec", {})
            if crd.get("kind") != "CustomResourceDefinition" or "versions" not in spec:
                continue  # kustomize files and patches beside the CRDs
            for version in spec["versions"]:
                schema = version.get("schema", {}).get("openAPIV3Schema")
                if not schema:
                    continue
                document = strict(schema)
                # A CRD's schema leaves metadata open ({type: object}); it is the API server's to check.
                document["$schema"] = "http://json-schema.org/draft-07/schema#"
                target = out / f"{spec['names']['kind'].lower()}{suffix(spec['group'], version['name'])}.json"
                target.write_text(json.dumps(document))
                count += 1
    return count


def main(argv):
    if len(argv) not in (4, 5):
        sys.exit(__doc__)
    out = pathlib.Path(argv[3])
    out.mkdir(parents=True, exist_ok=True)
    k8s = kubernetes(pathlib.Path(argv[1]), out)
    kserve = crds(pathlib.Path(argv[2]), out)
    keda = crds(pathlib.Path(argv[4]), out) if len(argv) == 5 else 0
    print(f"{k8s} Kubernetes schemas, {kserve} KServe schemas, {keda} KEDA schemas in {out}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
