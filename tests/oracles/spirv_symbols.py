#!/usr/bin/env python3
"""Independent oracle for `backscope scan` on a ggml-vulkan library: every `NAME_data` symbol of the ELF symbol
table (.symtab, as GNU readelf prints it) that has a `NAME_len` beside it and whose bytes start with the SPIR-V
magic 0x07230203, with the file offset of those bytes (symbol value - section address + section offset, from
readelf's section headers). Prints {"NAME": offset, ...} as JSON."""
import json
import re
import subprocess
import sys

lib = sys.argv[1]
sections = {}
for line in subprocess.run(["readelf", "-SW", lib], capture_output=True, text=True, check=True).stdout.splitlines():
    m = re.match(r"\s*\[\s*(\d+)\]\s+(\S+)\s+(\S+)\s+([0-9a-f]{8,})\s+([0-9a-f]{6,})\s+([0-9a-f]+)", line)
    if m:
        sections[int(m.group(1))] = (m.group(3), int(m.group(4), 16), int(m.group(5), 16))

symbols = {}
table = None
for line in subprocess.run(["readelf", "-sW", lib], capture_output=True, text=True, check=True).stdout.splitlines():
    t = re.match(r"Symbol table '([^']+)'", line)
    if t:
        table = t.group(1)
        continue
    if table != ".symtab":
        continue
    f = line.split()
    if len(f) >= 8 and f[0].endswith(":") and f[6].isdigit():
        symbols[f[7]] = (int(f[1], 16), int(f[6]))

out = {}
with open(lib, "rb") as fh:
    for name, (value, ndx) in symbols.items():
        if not name.endswith("_data") or name[:-5] + "_len" not in symbols or ndx not in sections:
            continue
        kind, addr, off = sections[ndx]
        if kind == "NOBITS":
            continue
        at = value - addr + off
        fh.seek(at)
        if fh.read(4) == b"\x03\x02\x23\x07":
            out[name[:-5]] = at
print(json.dumps(out))
