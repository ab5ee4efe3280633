#!/usr/bin/env python3
"""check_layers.py: the folders are layers and includes only point down.

A header include/za/za_X.h belongs to the folder that holds za_X.c (or to the
folder named in OWNERS). A source or header may include headers of its own
folder and of lower layers only; two folders on one layer do not include each
other. Beyond that, through every header a file pulls in:
  - core/ and kernels/ know no ZeroMQ, CZMQ, msgpack or jansson;
  - broker/ never reaches kernels/, train/ or actors/;
  - within a folder, the files (a source and its header are one file here)
    include each other in no circle: a.c including b.h while b.c includes
    a.h (or a longer round) is two halves of one thing, or a missing third.
Prints every broken rule and exits 1, or prints a summary and exits 0.
Usage: tests/check_layers.py [SOURCE_DIR]
"""
import os
import re
import sys

LAYERS = {"core": 0, "kernels": 1, "io": 2, "net": 3, "train": 3, "actors": 4,
          "broker": 4, "runtime": 5, "tools": 6}
#  Headers without a .c of their own name.
OWNERS = {"za_kernels.h": "kernels", "za_role_private.h": "actors", "za_program.h": "runtime"}
#  Headers of a source with another name (its private half, for its folder).
MODULE_OF = {"za_role_private.h": "za_role"}
NO_MESSAGING = {"czmq.h", "zmq.h", "msgpack.h", "jansson.h"}
NEVER = {"broker": {"kernels", "train", "actors"}}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    owner = dict(OWNERS)
    files = []
    for folder in LAYERS:
        path = os.path.join(root, folder)
        if not os.path.isdir(path):
            continue
        for name in sorted(os.listdir(path)):
            if name.endswith((".c", ".h", ".cu")):
                files.append(os.path.join(folder, name))
                if name.endswith(".c"):
                    owner.setdefault(name[:-2] + ".h", folder)
    headers = {}
    for name in os.listdir(os.path.join(root, "include", "za")):
        headers[name] = os.path.join("include", "za", name)

    def includes(relpath):
        with open(os.path.join(root, relpath), encoding="utf-8") as f:
            text = f.read()
        found = []
        for kind, target in INCLUDE.findall(text):
            base = os.path.basename(target)
            if target.startswith("za/") or (kind == '"' and base in owner):
                found.append(("za", base))
            else:
                found.append(("system", base))
        return found

    def closure(relpath):
        seen, system, todo = set(), set(), [relpath]
        while todo:
            for kind, base in includes(todo.pop()):
                if kind == "system":
                    system.add(base)
                elif base not in seen:
                    seen.add(base)
                    where = headers.get(base) or os.path.join(owner.get(base, ""), base)
                    if os.path.exists(os.path.join(root, where)):
                        todo.append(where)
        return seen, system

    broken = []
    for relpath in files:
        folder = relpath.split("/")[0]
        for kind, base in includes(relpath):
            if kind != "za":
                continue
            if base not in owner:
                broken.append("%s includes %s, which belongs to no folder (add its .c or "
                              "an entry in OWNERS)" % (relpath, base))
                continue
            target = owner[base]
            if target != folder and LAYERS[target] >= LAYERS[folder]:
                broken.append("%s (%s, layer %d) includes %s of %s/ (layer %d): arrows "
                              "point down only" % (relpath, folder, LAYERS[folder], base,
                                                   target, LAYERS[target]))
        seen, system = closure(relpath)
        if folder in ("core", "kernels") and system & NO_MESSAGING:
            broken.append("%s reaches %s: %s/ knows no messaging" %
                          (relpath, ", ".join(sorted(system & NO_MESSAGING)), folder))
        for base in sorted(seen):
            if owner.get(base) in NEVER.get(folder, ()):
                broken.append("%s reaches %s of %s/, which %s/ must never include" %
                              (relpath, base, owner[base], folder))
    broken += circles(files, includes, owner)
    for line in broken:
        print("layers: " + line)
    if broken:
        return 1
    print("layers: %d files in %d folders, every include points down" %
          (len(files), len({f.split("/")[0] for f in files})))
    return 0


def circles(files, includes, owner):
    """Every circle of includes between the modules (za_X.c with za_X.h) of
    one folder, once each, as 'folder: a -> b -> a'."""
    edges = {}
    for relpath in files:
        folder, name = relpath.split("/")
        module = MODULE_OF.get(name, os.path.splitext(name)[0])
        for kind, base in includes(relpath):
            other = MODULE_OF.get(base, os.path.splitext(base)[0])
            if kind == "za" and owner.get(base) == folder and other != module:
                edges.setdefault((folder, module), set()).add((folder, other))
    found, seen = [], set()

    def visit(node, path, on_path):
        for nxt in sorted(edges.get(node, ())):
            if nxt in on_path:
                loop = path[path.index(nxt):]
                key = frozenset(loop)
                if key not in seen:
                    seen.add(key)
                    found.append("%s/: %s include each other in a circle" %
                                 (node[0], " -> ".join(m for _, m in loop + [nxt])))
            elif nxt not in done:
                visit(nxt, path + [nxt], on_path | {nxt})
        done.add(node)

    done = set()
    for node in sorted(edges):
        if node not in done:
            visit(node, [node], {node})
    return found


if __name__ == "__main__":
    sys.exit(main())
