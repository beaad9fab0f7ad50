#!/usr/bin/env python3
"""Builds haystack.txt, the natural prose that `kascade eval` fills its
long-context prompts with (RULER-style distractor text) and scores
long-document perplexity on. The output is committed, so evaluation needs no
network or apt at run time; rerun this only to change the corpus.

Sources (Debian bookworm packages; the script installs the missing ones):
  bible-kjv            the King James Bible, read through its `bible` program
                       (the data file of bible-kjv-text is in a binary format);
  python3-doc          the Python tutorial, HOWTOs and FAQ (reStructuredText
                       sources, markup stripped, code blocks dropped);
  debian-reference-en  the Debian Reference manual (plain-text edition,
                       prose paragraphs only: no tables, listings or commands).
The calibration dev set (data/devset) uses the Debian license texts and the
Python standard library's source code; none of those appear here, so the
evaluation never scores text the profile was calibrated on.

haystack.txt format: '#' comment lines, then documents, each opened by a line
'@@@ document: <source>', followed by one paragraph per line.
"""
import gzip
import pathlib
import re
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
HEADER = "@@@ document: "
PACKAGES = {"bible": "bible-kjv", "/usr/share/doc/python3.11/html/_sources": "python3-doc",
            "/usr/share/debian-reference/debian-reference.en.txt.gz": "debian-reference-en"}

# Books of narrative prose, with their last chapter:verse.
BIBLE_BOOKS = [("Genesis", "50:26"), ("Exodus", "40:38"), ("Ruth", "4:22"), ("1Samuel", "31:13"),
               ("2Samuel", "24:25"), ("1Kings", "22:53"), ("Esther", "10:3"), ("Luke", "24:53"),
               ("Acts", "28:31")]
PYTHON_DOCS = ["tutorial/appetite", "tutorial/interpreter", "tutorial/introduction", "tutorial/controlflow",
               "tutorial/datastructures", "tutorial/modules", "tutorial/inputoutput", "tutorial/errors",
               "tutorial/classes", "tutorial/stdlib", "tutorial/stdlib2", "tutorial/venv",
               "tutorial/floatingpoint", "howto/functional", "howto/unicode", "howto/regex", "howto/sockets",
               "howto/logging", "howto/descriptor", "howto/sorting", "howto/urllib2", "howto/curses",
               "howto/pyporting", "faq/general", "faq/programming", "faq/design", "faq/library"]
VERSES_PER_PARAGRAPH = 6


def install_missing() -> None:
    missing = [pkg for path, pkg in PACKAGES.items()
               if not (shutil.which(path) if "/" not in path else pathlib.Path(path).exists())]
    if missing:
        subprocess.run(["apt-get", "install", "-y", *missing], check=True)


def bible_book(book: str, last: str) -> list[str]:
    out = subprocess.run(["bible", "-l100000", f"{book}1:1-{last}"], check=True, capture_output=True,
                         text=True).stdout
    verses = [m.group(1).strip() for m in re.finditer(r"^\s*\d+ (.+)$", out, re.M)]
    if len(verses) < 50:
        sys.exit(f"bible printed only {len(verses)} verses for {book}")
    return [" ".join(verses[i:i + VERSES_PER_PARAGRAPH]) for i in range(0, len(verses), VERSES_PER_PARAGRAPH)]


ROLE = re.compile(r":[a-z:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")


def clean_rst_inline(text: str) -> str:
    text = ROLE.sub(r"\1", text)
    text = re.sub(r"``([^`]*)``", r"\1", text)
    text = re.sub(r"`([^`<]*?)(?:\s*<[^>]*>)?`_*", r"\1", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    text = re.sub(r"\*([^*\s][^*]*)\*", r"\1", text)
    text = re.sub(r"\[#[^\]]*\]_", "", text)
    return re.sub(r"\s+", " ", text).replace("::", ":").strip()


def looks_like_prose(paragraph: str, min_words: int) -> bool:
    words = paragraph.split()
    letters = sum(c.isalpha() or c.isspace() for c in paragraph)
    return (len(words) >= min_words and paragraph[-1] in ".?!:" and letters >= 0.85 * len(paragraph)
            and not paragraph.startswith(("$", "#", ">>>", "+", "|")))


def python_doc(name: str) -> list[str]:
    lines = (pathlib.Path("/usr/share/doc/python3.11/html/_sources") / f"{name}.rst.txt").read_text().splitlines()
    paragraphs, current = [], []
    for line in lines + [""]:
        # Only unindented text is prose: indented lines are code, directive bodies or quotes.
        if not line.strip() or line[0].isspace() or line.startswith(".."):
            if current:
                paragraphs.append(clean_rst_inline(" ".join(current)))
            current = []
        elif re.fullmatch(r"([=\-~*^#\"'+])\1+\s*", line):
            current = []  # the line before was a heading
        else:
            current.append(line)
    return [p for p in paragraphs if looks_like_prose(p, 12)]


def debian_reference() -> list[str]:
    # The plain-text edition indents some lines with no-break spaces.
    text = gzip.open("/usr/share/debian-reference/debian-reference.en.txt.gz", "rt").read().replace("\xa0", " ")
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        # Prose is indented by exactly four spaces; listings and tables are indented deeper.
        if not lines or not all(l.startswith("    ") and not l.startswith("     ") for l in lines):
            continue
        paragraph = " ".join(l.strip() for l in lines)
        if looks_like_prose(paragraph, 15) and "http" not in paragraph and "\u2502" not in paragraph:
            paragraphs.append(paragraph)
    return paragraphs


def main() -> int:
    install_missing()
    documents = [(f"bible-kjv: {book}", bible_book(book, last)) for book, last in BIBLE_BOOKS]
    documents += [(f"python3-doc: {name}", python_doc(name)) for name in PYTHON_DOCS]
    documents.append(("debian-reference-en", debian_reference()))
    out = ["# Haystack prose for `kascade eval`, built by build_haystack.py from Debian packages\n",
           "# (bible-kjv, python3-doc, debian-reference-en). One paragraph per line.\n"]
    for source, paragraphs in documents:
        if not paragraphs:
            sys.exit(f"no prose paragraphs extracted from {source}")
        out.append(f"{HEADER}{source}\n")
        out.extend(p + "\n" for p in paragraphs if not p.startswith(("@@@", "#")))
    (HERE / "haystack.txt").write_text("".join(out), encoding="utf-8")
    print(f"wrote {len(documents)} documents, {sum(len(p) for _, ps in documents for p in ps)} characters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
