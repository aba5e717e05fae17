#!/usr/bin/env python3
"""Checks that every relative link in the repository's Markdown files resolves.

For each [text](target) outside code fences in README.md, docs/*.md and the
other *.md files of the tree (build directories left out): the file or
folder must exist, and a #fragment must name a heading of the target file
(GitHub's slugs: lower case, punctuation dropped, spaces to '-', repeats
numbered -1, -2...). External links (http:, https:, mailto:) are not
fetched. Exits 1 naming file, line and link for each broken one.

Usage: check-doc-links.py [REPO_ROOT]
"""
import os
import re
import sys

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SKIP_DIRS = {".git", "node_modules"}


def markdown_files(root):
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("build")]
        for name in files:
            if name.endswith(".md"):
                yield os.path.join(folder, name)


def slug(heading):
    text = re.sub(r"`|\*|_(?=\w)|(?<=\w)_", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        found = set()
        fence = False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("```"):
                    fence = not fence
                    continue
                m = None if fence else re.match(r"#{1,6}\s+(.*)", line)
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
        fence = False
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.startswith("```"):
                    fence = not fence
                    continue
                if fence:
                    continue
                for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                    if re.match(r"[a-z]+:", target):
                        continue
                    checked += 1
                    file_part, _, fragment = target.partition("#")
                    dest = (os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                            if file_part else path)
                    where = f"{os.path.relpath(path, root)}:{number}: [{target}]"
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
