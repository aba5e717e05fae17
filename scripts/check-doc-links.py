#!/usr/bin/env python3
"""Checks that every relative link in the repository's Markdown files resolves.

For each link [text](target), image ![alt](target) and reference definition
[id]: target outside code spans and fences (``` or ~~~) in README.md,
docs/*.md and the other *.md files of the tree (build directories left out):
the file or folder must exist, and a #fragment must name a heading of the
target Markdown file, slugged as GitHub does (the rendered text in lower case,
punctuation but '-' and '_' dropped, spaces to '-', repeats numbered -1, -2...).
External links (http:, https:, mailto:) are not fetched. Prints one line per
broken link naming file, line, link and what is missing, and exits 1.

Usage: check-doc-links.py [REPO_ROOT]
"""
import os
import re
import sys
from urllib.parse import unquote

LINK = re.compile(r"\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?")
SKIP_DIRS = {".git", "node_modules"}


def markdown_files(root):
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("build")]
        for name in files:
            if name.endswith(".md"):
                yield os.path.join(folder, name)


def prose_lines(path):
    """(number, line) for each line outside fenced code blocks (``` or ~~~,
    indented up to three spaces; a fence closes on a run as long as its own)."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = re.match(r" {0,3}(`{3,}|~{3,})", line)
            if fence is None and m:
                fence = m.group(1)
            elif fence is not None:
                if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                        and not line.strip().strip(fence[0]):
                    fence = None
            else:
                yield number, line


def slug(heading):
    # GitHub renders the heading, then slugs its text: code spans keep their
    # characters (underscores included), emphasis markers and link targets go.
    text = re.sub(r"\s+#+\s*$", "", heading.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    parts = re.split(r"(`[^`]*`)", text)
    text = "".join(part[1:-1] if part.startswith("`") and len(part) > 1
                   else re.sub(r"\*+|(?<!\w)_+|_+(?!\w)", "", part)
                   for part in parts)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        found = set()
        for _, line in prose_lines(path):
            m = re.match(r" {0,3}#{1,6}\s+(.*)", line)
            if not m:
                continue
            base = slug(m.group(1))
            n = seen.get(base, 0)
            found.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
        cache[path] = found
    return cache[path]


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    broken = []
    checked = 0
    for path in sorted(markdown_files(root)):
        for number, line in prose_lines(path):
            prose = re.sub(r"`[^`]*`", "", line)
            for target in LINK.findall(prose) + REFERENCE.findall(prose):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                checked += 1
                file_part, _, fragment = target.partition("#")
                dest = (os.path.normpath(os.path.join(os.path.dirname(path), unquote(file_part)))
                        if file_part else path)
                where = f"{os.path.relpath(path, root)}:{number}: link ({target})"
                if not os.path.exists(dest):
                    broken.append(f"{where}: {os.path.relpath(dest, root)} does not exist")
                elif fragment and dest.endswith(".md") and fragment not in anchors(dest):
                    broken.append(f"{where}: no heading #{fragment} in "
                                  f"{os.path.relpath(dest, root)}")
    for b in broken:
        print(b, file=sys.stderr)
    print(f"{checked} relative links checked, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
