#!/usr/bin/env python3
"""Builds devset.txt, the built-in Kascade calibration development set, from
the texts that sources.txt lists (files Debian packages install). The output
is committed, so calibration is reproducible on machines without these
packages; rerun this only to change the set.

Each document is the start of one source file, cut at the last line break at
or before the listed number of characters. devset.txt format: '#' comment
lines, then documents, each opened by a line '@@@ document: <source>'.
"""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
HEADER = "@@@ document: "


def main() -> int:
    documents = []
    for number, line in enumerate((HERE / "sources.txt").read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        path, max_chars = line.split()
        text = pathlib.Path(path).read_text(encoding="utf-8")
        if len(text) > int(max_chars):
            cut = text.rfind("\n", 0, int(max_chars) + 1)
            text = text[: cut + 1]
        if HEADER.strip() in text:
            sys.exit(f"sources.txt line {number}: {path} contains the document marker")
        documents.append((path, text if text.endswith("\n") else text + "\n"))

    out = ["# Kascade calibration development set, built by build_devset.py from the\n",
           "# files listed in sources.txt (Debian license texts and Python 3.11 stdlib).\n"]
    for path, text in documents:
        out.append(f"{HEADER}{path}\n")
        out.append(text)
    (HERE / "devset.txt").write_text("".join(out), encoding="utf-8")
    print(f"wrote {len(documents)} documents, {sum(len(t) for _, t in documents)} characters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
