"""tools/golden_io.py: file helpers shared by the golden generators and consumer checks (standard library only)."""
import hashlib
import json
import struct


def sha256_file(path):
    """The hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sort_metadata(path):
    """The reference writer keeps __metadata__ in a hash map (a different order each run): rewrite the header in
    place with the metadata sorted by key, same length, so that regenerating gives the same bytes."""
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        raw = f.read(n)
        header = json.loads(raw)
        header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
        new = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
        assert len(new) <= n and json.loads(new) == json.loads(raw), "header rewrite changed its content"
        f.seek(8)
        f.write(new + b" " * (n - len(new)))
