#!/usr/bin/env python3
"""Checks the relative links of the project's Markdown: every link to a file in the repository
points to one that exists, and every `#anchor` names a heading of its Markdown file.

    python3 docs/check-links.py            # README.md, docs/*.md, ffi/*/README.md,
                                           # BENCHMARKS.md, CHANGELOG.md
    python3 docs/check-links.py FILE...    # only these

Links to other sites (anything with a scheme, such as https:) are not fetched. Anchors follow
GitHub's rules: a heading's text, Markdown removed, lowercased, every character that is not a
letter, a digit, a space, '-' or '_' dropped, spaces turned into '-'; a repeated heading gets
'-1', '-2', ... Python 3 standard library only. Exit status 1 when a link is broken.
"""

import glob
import os
import re
import sys
from urllib.parse import unquote

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = ["README.md", "docs/*.md", "ffi/*/README.md", "BENCHMARKS.md", "CHANGELOG.md"]

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target); the text may hold one level of brackets.
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)"
                    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']*)[\"']", re.I)
HTML_ID = re.compile(r"<[a-z]+\b[^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']*)[\"']", re.I)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def lines_outside_code(text):
    """(line number, line) for every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        found = FENCE.match(line)
        if fence is None:
            if found:
                fence = found.group(1)
                continue
            yield number, line
        elif found and found.group(1)[0] == fence[0] and len(found.group(1)) >= len(fence) \
                and not line.strip()[len(found.group(1)):].strip():
            fence = None


def slug(heading):
    """GitHub's anchor for a heading's Markdown text."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)     # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)                        # inline HTML
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    """The anchors a Markdown file defines: its headings' slugs and HTML ids."""
    if path not in _anchors:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        found, seen, previous = set(), {}, ""
        for _, line in lines_outside_code(text):
            heading = None
            atx = ATX.match(line)
            if atx:
                heading = atx.group(2)
            elif SETEXT.match(line) and previous.strip() and not previous.lstrip().startswith(
                    ("|", "-", "*", "+", ">")) and not ATX.match(previous):
                heading = previous.strip()
            if heading is not None:
                base = slug(heading)
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
            found.update(HTML_ID.findall(line))
            previous = line
        _anchors[path] = found
    return _anchors[path]


def targets(text):
    """(line number, link target) for every link outside code."""
    for number, line in lines_outside_code(text):
        if REFDEF.match(line):
            yield number, REFDEF.match(line).group(1)
            continue
        bare = CODE_SPAN.sub("", line)
        for found in INLINE.finditer(bare):
            yield number, found.group(1)
        for found in HTML.finditer(bare):
            yield number, found.group(1)


def check(path):
    """The broken links of one file, as messages."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    rel = os.path.relpath(path, ROOT)
    broken = []
    for number, target in targets(text):
        target = target.strip("<>")
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue
        file_part, _, anchor = target.partition("#")
        file_part = unquote(file_part)
        if file_part.startswith("/"):
            dest = os.path.join(ROOT, file_part.lstrip("/"))
        elif file_part:
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
        else:
            dest = path
        where = f"{rel}:{number}: {target}"
        if not os.path.exists(dest):
            broken.append(f"{where}: no such file {os.path.relpath(dest, ROOT)}")
            continue
        if anchor and dest.endswith(".md") and os.path.isfile(dest):
            if unquote(anchor).lower() not in anchors(dest):
                broken.append(f"{where}: no heading for #{anchor} in {os.path.relpath(dest, ROOT)}")
    return broken


def main(args):
    # The default set is relative to the repository's root, files named here to the current
    # directory.
    patterns = args or [os.path.join(ROOT, p) for p in DEFAULT]
    paths = []
    for pattern in patterns:
        matched = sorted(glob.glob(pattern))
        if not matched:
            print(f"check-links: no file matches {pattern}", file=sys.stderr)
            return 2
        paths += matched
    broken, links = [], 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            links += sum(1 for _ in targets(f.read()))
        broken += check(path)
    for line in broken:
        print(line)
    print(f"check-links: {len(paths)} files, {links} links, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
