"""Nsight Compute's `--csv` kernel list, read as launches per kernel name (shared by compare.py and compare_blas.py)."""
import collections, csv, io, os


def ncu_counts(path):
    """{Kernel Name: launches} from an `ncu --csv` log, skipping ncu's own lines before the table; None when the file
    or the table is missing."""
    if not os.path.exists(path):
        return None
    text = open(path, errors="replace").read()
    start = text.find('"ID","Process ID"')
    if start < 0:
        return None
    counts = collections.Counter()
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("ID", "").isdigit():
            counts[row["Kernel Name"]] += 1
    return counts
