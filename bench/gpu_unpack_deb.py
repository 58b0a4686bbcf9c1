# gpu_unpack_deb.py DEB PREFIX — what `dpkg-deb -x DEB PREFIX` does, for a
# machine without dpkg (bench/gpu_check.sh): a .deb is an ar archive whose
# data.tar.{xz,gz,bz2} member holds the files. (zstd members need dpkg.)
import io
import sys
import tarfile


def members(blob):
    if blob[:8] != b"!<arch>\n":
        raise SystemExit(f"{sys.argv[1]}: not a .deb (ar) archive")
    at = 8
    while at + 60 <= len(blob):
        head = blob[at:at + 60]
        name = head[:16].decode().strip().rstrip("/")
        size = int(head[48:58].decode().strip())
        yield name, blob[at + 60:at + 60 + size]
        at += 60 + size + (size & 1)


deb, prefix = sys.argv[1], sys.argv[2]
with open(deb, "rb") as f:
    blob = f.read()
for name, data in members(blob):
    if name.startswith("data.tar"):
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            t.extractall(prefix)
        break
else:
    raise SystemExit(f"{deb}: no data.tar member")
