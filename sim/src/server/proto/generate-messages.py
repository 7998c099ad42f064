#!/usr/bin/env python3
"""Writes messages.txt: the protobuf field numbers of the built-in kinds the emulator decodes.

Usage: generate-messages.py KUBECTL_BINARY > messages.txt

Go binaries built with gogo/protobuf carry every generated.proto of k8s.io/api as a gzipped
FileDescriptorProto, so the table is read from the very kubectl the tests run, not re-typed.
Each output line is a message and its fields, `number:jsonName:type`, where the type is
`s` string, `y` bytes, `b` bool, `i` integer, `f` float, `q` Quantity, `o` IntOrString,
`t` Time, `d` Duration, `r` raw JSON (RawExtension, FieldsV1) or a message name; a leading `[`
marks a repeated field and a leading `{` a map from string. The JSON name `*` marks an embedded
Go struct (`json:",inline"`), whose fields belong to the enclosing object.
"""
import sys
import zlib

ROOTS = [
    "core.v1." + k
    for k in "ConfigMap Secret Namespace ServiceAccount Service Pod ResourceQuota".split()
] + [
    "apps.v1.Deployment", "apps.v1.ReplicaSet", "apps.v1.StatefulSet", "apps.v1.DaemonSet",
    "batch.v1.Job", "batch.v1.CronJob", "rbac.v1.Role", "rbac.v1.ClusterRole",
    "rbac.v1.RoleBinding", "rbac.v1.ClusterRoleBinding", "scheduling.v1.PriorityClass",
    "policy.v1.PodDisruptionBudget", "networking.v1.Ingress", "authentication.v1.TokenRequest",
]
SPECIAL = {
    "resource.Quantity": "q", "intstr.IntOrString": "o", "meta.v1.Time": "t",
    "meta.v1.MicroTime": "t", "meta.v1.Duration": "d", "runtime.RawExtension": "r",
    "meta.v1.FieldsV1": "r",
}
SCALAR = {9: "s", 12: "y", 8: "b", 1: "f", 2: "f", 3: "i", 4: "i", 5: "i", 13: "i"}
# Where the proto name is not the JSON name.
RENAMED = {"uID": "uid", "aPIGroup": "apiGroup"}
# Embedded structs (`json:",inline"`), by field name and message.
INLINE = {
    ("volumeSource", "core.v1.VolumeSource"), ("handler", "core.v1.ProbeHandler"),
    ("ephemeralContainerCommon", "core.v1.EphemeralContainerCommon"),
    ("localObjectReference", "core.v1.LocalObjectReference"),
    ("ingressRuleValue", "networking.v1.IngressRuleValue"),
}


def varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if not c & 0x80:
            return v, i


def fields(b):
    i, out = 0, []
    while i < len(b):
        k, i = varint(b, i)
        t = k & 7
        if t == 0:
            v, i = varint(b, i)
        elif t == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        elif t in (1, 5):
            n = 8 if t == 1 else 4
            v, i = b[i:i + n], i + n
        else:
            raise ValueError(t)
        out.append((k >> 3, v))
    return out


def short(name):
    for p in ("k8s.io.api.", "k8s.io.apimachinery.pkg.apis.", "k8s.io.apimachinery.pkg.api.",
              "k8s.io.apimachinery.pkg.util.", "k8s.io.apimachinery.pkg."):
        if name.startswith(p):
            return name[len(p):]
    return name


def messages(binary):
    out = {}

    def walk(b, prefix):
        fs = fields(b)
        name = prefix + next(v for f, v in fs if f == 1).decode()
        entry = any(f == 7 and any(o == 7 and v for o, v in fields(v)) for f, v in fs)
        out[name] = (entry, [dict(fields(v)) for f, v in fs if f == 2])
        for f, v in fs:
            if f == 3:
                walk(v, name + ".")

    pos = 0
    while (pos := binary.find(b"\x1f\x8b\x08\x00\x00\x00\x00\x00", pos)) >= 0:
        try:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(binary[pos:pos + 4_000_000])
            fs = fields(d)
            if next(v for f, v in fs if f == 1).startswith(b"k8s.io/"):
                pkg = short(next(v for f, v in fs if f == 2).decode())
                for f, v in fs:
                    if f == 4:
                        walk(v, pkg + ".")
        except (zlib.error, ValueError, IndexError, StopIteration):
            pass
        pos += 1
    return out


def main():
    msgs = messages(open(sys.argv[1], "rb").read())

    def type_of(f, todo):
        if f[5] != 11:
            return SCALAR[f[5]]
        name = short(f[6].decode().lstrip("."))
        if name in SPECIAL:
            return SPECIAL[name]
        entry, value = msgs[name]
        if entry:
            return "{" + type_of(next(v for v in value if v[3] == 2), todo)
        todo.append(name)
        return name

    done, todo = [], list(ROOTS)
    while todo:
        name = todo.pop(0)
        if name in done:
            continue
        done.append(name)
        cols = []
        for f in msgs[name][1]:
            json_name = f[1].decode()
            if name in ROOTS and json_name == "status":
                continue
            t = type_of(f, todo)
            rep = "[" if f[4] == 3 and not t.startswith("{") else ""
            json_name = "*" if (json_name, t) in INLINE else RENAMED.get(json_name, json_name)
            cols.append(f"{f[3]}:{json_name}:{rep}{t}")
        print(name, " ".join(cols))


main()
