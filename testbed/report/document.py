"""A report as plain data (sections of text, tables and images), rendered to Markdown or to one
self-contained HTML file (images embedded as data URIs)."""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class TableData:
    header: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[TableData] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)
    bullets: list[str] = field(default_factory=list)


@dataclass
class Document:
    title: str
    sections: list[Section] = field(default_factory=list)

    def markdown(self, base: Path) -> str:
        out = [f"# {self.title}", ""]
        for s in self.sections:
            out += [f"## {s.title}", ""]
            for p in s.paragraphs:
                out += [p, ""]
            for b in s.bullets:
                out.append(f"- {b}")
            if s.bullets:
                out.append("")
            for t in s.tables:
                if t.caption:
                    out += [f"*{t.caption}*", ""]
                out.append("| " + " | ".join(t.header) + " |")
                out.append("|" + "---|" * len(t.header))
                out += ["| " + " | ".join(r) + " |" for r in t.rows]
                out.append("")
            for img in s.images:
                out += [f"![{img.stem}]({img.relative_to(base)})", ""]
        return "\n".join(out)

    def html(self) -> str:
        parts = [
            "<!doctype html><html><head><meta charset='utf-8'>",
            f"<title>{html.escape(self.title)}</title><style>",
            "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}",
            "table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.9em}",
            "th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}",
            "th{background:#f0f0f0}td:first-child,th:first-child,td.text{text-align:left}",
            "img{max-width:100%;border:1px solid #eee;margin:0.5em 0}",
            ".pass{color:#1a7f37;font-weight:bold}.fail{color:#c62828;font-weight:bold}"
            ".undecided{color:#9a6700;font-weight:bold}",
            "caption{caption-side:top;text-align:left;font-style:italic;padding:4px 0}",
            "</style></head><body>",
            f"<h1>{html.escape(self.title)}</h1>",
        ]
        for s in self.sections:
            parts.append(f"<h2>{html.escape(s.title)}</h2>")
            parts += [f"<p>{_inline(p)}</p>" for p in s.paragraphs]
            if s.bullets:
                parts.append("<ul>" + "".join(f"<li>{_inline(b)}</li>" for b in s.bullets)
                             + "</ul>")
            for t in s.tables:
                parts.append("<table>")
                if t.caption:
                    parts.append(f"<caption>{html.escape(t.caption)}</caption>")
                parts.append("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in t.header)
                             + "</tr>")
                for r in t.rows:
                    parts.append("<tr>" + "".join(_td(c) for c in r) + "</tr>")
                parts.append("</table>")
            for img in s.images:
                data = base64.b64encode(img.read_bytes()).decode()
                parts.append(f"<img alt='{html.escape(img.stem)}' "
                             f"src='data:image/png;base64,{data}'>")
        parts.append("</body></html>")
        return "\n".join(parts)


# a number, a range or a share (1, -0.0214, 2.2%, 60–80) or none (–): right-aligned; words left
_NUMBER = re.compile(r"[-+–]?[\d.,]+(%|[–-][\d.,]+)?|–")


def _td(text: str) -> str:
    return (f"<td>{_inline(text)}</td>" if _NUMBER.fullmatch(text.strip())
            else f"<td class='text'>{_inline(text)}</td>")


def _inline(text: str) -> str:
    t = html.escape(text)
    t = t.replace("**PASS**", "<span class='pass'>PASS</span>")
    t = t.replace("**FAIL**", "<span class='fail'>FAIL</span>")
    t = t.replace("**UNDECIDED**", "<span class='undecided'>UNDECIDED</span>")
    while "`" in t and t.count("`") >= 2:
        t = t.replace("`", "<code>", 1).replace("`", "</code>", 1)
    return t
