#!/usr/bin/env python3
"""Independent oracle for the scan tests: lists the clang offload bundles of an ELF's .hip_fatbin (or of a
bare bundle/CCOB file) straight from the layout in clang's ClangOffloadBundler documentation and LLVM's
OffloadBundle.h, sharing no code with backscope. CCOB payloads are decompressed with the `zstd` CLI or zlib.

Usage: offload.py FILE [EXTRACT_DIR]
Prints one JSON object: {"section": [offset, size] | null, "bundles": [{"offset", "ccob": {...} | null,
"entries": [{"id", "offset", "size", "e_flags"}]}]}. With EXTRACT_DIR, writes each device code object there
as <bundle-index>-<entry-index>.co and each uncompressed bundle as <bundle-index>.bundle.
"""
import json, os, struct, subprocess, sys, zlib

MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"

def hip_fatbin(data):
    if bytes(data[:4]) != b"\x7fELF":
        return None, data
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = hdrs[shstrndx][4]
    for h in hdrs:
        name = bytes(data[strtab + h[0]: strtab + h[0] + 64]).split(b"\0")[0]
        if name == b".hip_fatbin":
            return (h[4], h[5]), data[h[4]: h[4] + h[5]]
    return None, b""

def entries(b):
    n, = struct.unpack_from("<Q", b, 24)
    pos, out = 32, []
    for _ in range(n):
        off, size, idlen = struct.unpack_from("<QQQ", b, pos)
        out.append((bytes(b[pos + 24: pos + 24 + idlen]).decode(), off, size))
        pos += 24 + idlen
    return out

def main():
    data = memoryview(open(sys.argv[1], "rb").read())
    extract = sys.argv[2] if len(sys.argv) > 2 else None
    section, sec = hip_fatbin(data)
    base = section[0] if section else 0
    bundles, pos = [], 0
    while pos < len(sec):
        if sec[pos] == 0:
            pos += 1
            continue
        ccob = None
        if bytes(sec[pos:pos + 4]) == b"CCOB":
            version, method = struct.unpack_from("<HH", sec, pos + 4)
            if version == 2:
                total, usize = struct.unpack_from("<II", sec, pos + 8); hsz = 24
            elif version == 3:
                total, usize = struct.unpack_from("<QQ", sec, pos + 8); hsz = 32
            else:
                raise SystemExit("oracle handles CCOB v2/v3 only")
            payload = sec[pos + hsz: pos + total]
            if method == 1:
                body = subprocess.run(["zstd", "-d", "-c"], input=bytes(payload), capture_output=True, check=True).stdout
            else:
                body = zlib.decompress(bytes(payload))
            ccob = {"version": version, "method": method, "total": total, "uncompressed": usize, "decompressed_len": len(body)}
            end = pos + total
        elif bytes(sec[pos:pos + 24]) == MAGIC:
            body = sec[pos:]
            es = entries(body)
            end = pos + max(o + s for _, o, s in es)
            body = sec[pos:end]
        else:
            raise SystemExit(f"unexpected bytes at section offset {pos:#x}")
        es = entries(body)
        rec = {"offset": base + pos, "ccob": ccob, "entries": []}
        for j, (ident, off, size) in enumerate(es):
            co = body[off: off + size]
            e_flags = struct.unpack_from("<I", co, 0x30)[0] if bytes(co[:4]) == b"\x7fELF" else None
            rec["entries"].append({"id": ident, "offset": off, "size": size, "e_flags": e_flags})
            if extract and size and not ident.startswith("host"):
                open(os.path.join(extract, f"{len(bundles)}-{j}.co"), "wb").write(co)
        if extract and ccob is None:
            open(os.path.join(extract, f"{len(bundles)}.bundle"), "wb").write(body)
        bundles.append(rec)
        pos = end
    print(json.dumps({"section": section, "bundles": bundles}))

main()
