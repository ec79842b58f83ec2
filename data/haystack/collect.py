#!/usr/bin/env python3
"""Collects the haystack corpus of issue 20: real English text that ships on a Debian machine
(licences, manual pages, package documentation, the prose comments of C headers), written as one
JSON line per document to data/haystack/corpus.jsonl, with a manifest of what was taken (path,
Debian package and version, SHA-256 of the source file, characters kept) in MANIFEST.tsv.

The committed corpus is the snapshot every task is built from; rerunning this script on a
machine with the same package versions rebuilds it byte for byte (the manifest says which
versions). Sources that are missing are listed in the manifest as "missing" and skipped, so the
script runs anywhere, but only the committed file is the reference.

Documents are assigned to a split by a hash of their id (about one in four goes to "test"); the
task generator draws training tasks only from "train" documents and test tasks only from "test".

Usage: python3 data/haystack/collect.py [--out DIR]   (standard library only; needs `man`)
"""
import argparse
import glob
import gzip
import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

# Manual pages of commands from packages every Debian system has or this project installs.
MAN_PAGES = [
    "1 ls", "1 cp", "1 mv", "1 rm", "1 ln", "1 chmod", "1 chown", "1 cat", "1 sort", "1 uniq", "1 cut",
    "1 tr", "1 head", "1 tail", "1 wc", "1 du", "1 df", "1 date", "1 stat", "1 touch", "1 mkdir",
    "1 install", "1 dd", "1 split", "1 tee", "1 env", "1 printf", "1 test", "1 timeout", "1 nice",
    "1 tar", "1 grep", "1 sed", "1 find", "1 xargs", "1 gzip", "1 diff", "1 patch", "1 less",
    "1 man", "1 apropos", "1 dpkg", "1 dpkg-query", "1 dpkg-deb", "8 apt-get", "8 apt-cache",
    "5 sources.list", "5 apt.conf", "1 bash", "1 make", "1 git", "1 ssh", "1 curl", "1 wget",
    "1 gpg", "1 python3", "1 perl", "1 awk", "1 ps", "1 top", "1 kill", "8 mount",
    "1 login", "5 passwd", "1 ccache", "1 cmake", "1 ninja",
    "1 valgrind", "1 strace", "1 zip", "1 unzip", "1 xz", "1 zstd", "1 file",
]
DOC_FILES = [
    "/usr/share/doc/dpkg/spec/*.txt",
    "/usr/share/doc/man-db/man-db-manual.txt.gz",
    "/usr/share/doc/man-db/README.md.gz",
    "/usr/share/doc/man-db/NEWS.md.gz",
    "/usr/share/doc/gzip/README.gz",
    "/usr/share/doc/gzip/NEWS.gz",
    "/usr/share/doc/zstd/README.md.gz",
    "/usr/share/doc/apt/NEWS.Debian.gz",
    "/usr/share/doc/bash/README.gz",
    "/usr/share/doc/coreutils/README.gz",
    "/usr/share/doc/coreutils/NEWS.gz",
    "/usr/share/doc/tar/NEWS.gz",
    "/usr/share/doc/sed/NEWS.gz",
    "/usr/share/doc/grep/NEWS.gz",
    "/usr/share/doc/make/NEWS.gz",
    "/usr/share/doc/git/RelNotes/2.39.0.txt",
]
HEADERS = [
    "/usr/include/zlib.h", "/usr/include/png.h", "/usr/include/sqlite3.h", "/usr/include/jpeglib.h",
    "/usr/include/expat.h", "/usr/include/openssl/ssl.h", "/usr/include/ncurses.h",
    "/usr/include/readline/readline.h", "/usr/include/libxml2/libxml/tree.h", "/usr/include/lzma.h",
]
MAX_CHARS = 160_000  # per document: a few long ones must not be the whole corpus


def read_text(path: str) -> str:
    raw = Path(path).read_bytes()
    if path.endswith(".gz"):
        raw = gzip.decompress(raw)
    return raw.decode("utf-8", errors="replace")


def package_of(path: str) -> tuple[str, str]:
    try:
        out = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True, check=True).stdout
        pkg = out.split(":")[0].strip()
        ver = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True,
                             check=True).stdout.strip()
        return pkg, ver
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "", ""


def tidy(text: str) -> str:
    """Plain paragraphs: no control characters, no trailing spaces, at most one blank line."""
    text = text.replace("\r\n", "\n").replace("\t", "    ")
    text = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "", text)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", text).strip("\n")
    return text[:MAX_CHARS].rsplit("\n", 1)[0] if len(text) > MAX_CHARS else text


def man_text(section: str, name: str) -> tuple[str, str]:
    """The page rendered at 80 columns, overstrikes removed; and the source file it came from."""
    env = dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0", LC_ALL="C.UTF-8")
    where = subprocess.run(["man", "-w", section, name], capture_output=True, text=True, env=env)
    if where.returncode != 0:
        return "", ""
    # --nj --nh: ragged right, no hyphenation (no words split over lines); indentation dropped.
    page = subprocess.run(["man", "--nj", "--nh", "-P", "cat", section, name], capture_output=True, env=env).stdout
    plain = subprocess.run(["col", "-bx"], input=page, capture_output=True).stdout.decode("utf-8", "replace")
    return "\n".join(line.strip() for line in plain.split("\n")), where.stdout.strip()


def header_comments(path: str) -> str:
    """The prose of a header's block comments (at least 200 characters each), one paragraph each."""
    src = read_text(path)
    blocks = []
    for m in re.finditer(r"/\*(.*?)\*/", src, flags=re.S):
        body = "\n".join(re.sub(r"^\s*\*? ?", "", line) for line in m.group(1).split("\n")).strip()
        if len(body) >= 200 and sum(c.isalpha() for c in body) > 0.6 * len(body):
            blocks.append(body)
    return "\n\n".join(blocks)


def split_of(doc_id: str) -> str:
    return "test" if hashlib.sha256(doc_id.encode()).digest()[0] % 4 == 0 else "train"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent))
    out = Path(ap.parse_args().out)
    docs, manifest = [], []

    def add(doc_id: str, kind: str, source: str, text: str) -> None:
        text = tidy(text)
        pkg, ver = package_of(source)
        digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()
        docs.append({"id": doc_id, "kind": kind, "split": split_of(doc_id), "source": source, "package": pkg,
                     "version": ver, "text": text})
        manifest.append([doc_id, kind, split_of(doc_id), source, pkg, ver, digest, str(len(text))])

    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path) and not os.path.islink(path):
            add("license/" + os.path.basename(path), "license", path, read_text(path))
    for entry in MAN_PAGES:
        section, name = entry.split()
        text, source = man_text(section, name)
        if not text:
            manifest.append([f"man/{name}.{section}", "man", "", "", "", "", "missing", "0"])
            continue
        add(f"man/{name}.{section}", "man", source, text)
    for pattern in DOC_FILES:
        paths = sorted(glob.glob(pattern))
        if not paths:
            manifest.append(["doc/" + pattern, "doc", "", pattern, "", "", "missing", "0"])
        for path in paths:
            add("doc/" + path.removeprefix("/usr/share/doc/"), "doc", path, read_text(path))
    for path in HEADERS:
        if not os.path.exists(path):
            manifest.append(["comments/" + os.path.basename(path), "comment", "", path, "", "", "missing", "0"])
            continue
        add("comments/" + path.removeprefix("/usr/include/"), "comment", path, header_comments(path))

    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    with open(out / "MANIFEST.tsv", "w", encoding="utf-8") as f:
        f.write("id\tkind\tsplit\tsource\tpackage\tversion\tsha256\tchars\n")
        for row in manifest:
            f.write("\t".join(row) + "\n")
    chars = sum(len(d["text"]) for d in docs)
    test = sum(len(d["text"]) for d in docs if d["split"] == "test")
    print(f"{len(docs)} documents, {chars:,} characters ({test:,} in test) -> {out / 'corpus.jsonl'}")


if __name__ == "__main__":
    main()
